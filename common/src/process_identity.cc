// A task's process, found by its listening socket and its namespaced PID; see
// process_identity.h.
#include "trainscope/common/process_identity.h"

#include <dirent.h>
#include <errno.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "trainscope/common/proc.h"

namespace trainscope {
namespace {

// At most this much of a /proc file is read: status and stat are small; a net table of a busy
// namespace is read line by line.
constexpr size_t kMaxSmallFile = 16 << 10;

std::string ProcPath(const std::string& root, int64_t pid, const char* file) {
  return absl::StrCat(root, "/", pid, "/", file);
}

std::optional<std::string> ReadSmall(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::string data(kMaxSmallFile, '\0');
  in.read(data.data(), static_cast<std::streamsize>(data.size()));
  data.resize(static_cast<size_t>(in.gcount()));
  return data;
}

std::optional<ProcStat> ReadStat(const std::string& root, int64_t pid) {
  std::optional<std::string> text = ReadSmall(ProcPath(root, pid, "stat"));
  return text ? ParseProcStat(*text) : std::nullopt;
}

std::string ReadCommand(const std::string& root, int64_t pid) {
  std::string comm = ReadSmall(ProcPath(root, pid, "comm")).value_or("");
  absl::StripTrailingAsciiWhitespace(&comm);
  return comm;
}

// How a candidate fared: it holds the socket, or why not.
enum class Holds { kYes, kNoSocket, kNoFd, kCannotRead };

// Whether process `pid` holds a socket listening on `port` in its own network namespace; the
// inode in `*inode` when it does.
Holds HoldsListener(const std::string& root, int64_t pid, int port, uint64_t* inode) {
  const std::vector<uint64_t> inodes = ListeningInodes(pid, port, root);
  if (inodes.empty()) return Holds::kNoSocket;
  const std::string dir_path = ProcPath(root, pid, "fd");
  DIR* fds = opendir(dir_path.c_str());
  if (fds == nullptr) return errno == EACCES || errno == EPERM ? Holds::kCannotRead : Holds::kNoFd;
  Holds holds = Holds::kNoFd;
  while (dirent* fd = readdir(fds)) {
    if (fd->d_name[0] == '.') continue;
    char link[128];
    const std::string path = absl::StrCat(dir_path, "/", fd->d_name);
    const ssize_t n = readlink(path.c_str(), link, sizeof(link) - 1);
    if (n <= 0) continue;
    link[n] = 0;
    unsigned long long found = 0;
    if (std::sscanf(link, "socket:[%llu]", &found) != 1) continue;
    if (std::find(inodes.begin(), inodes.end(), found) != inodes.end()) {
      *inode = found;
      holds = Holds::kYes;
      break;
    }
  }
  closedir(fds);
  return holds;
}

// The processes of this /proc in a nested PID namespace whose PID there is `ns_pid`.
std::vector<int64_t> NestedCandidates(const std::string& root, int64_t ns_pid) {
  std::vector<int64_t> out;
  DIR* proc = opendir(root.c_str());
  if (proc == nullptr) return out;
  while (dirent* entry = readdir(proc)) {
    int64_t pid = 0;
    if (!absl::SimpleAtoi(entry->d_name, &pid) || pid <= 0 || pid == ns_pid) continue;
    std::vector<int64_t> ns = ReadNsPids(pid, root);
    if (ns.size() > 1 && ns.back() == ns_pid) out.push_back(pid);
  }
  closedir(proc);
  std::sort(out.begin(), out.end());
  return out;
}

// The candidate `pid` verified as holding `port`, its start time the same before and after.
std::optional<ProcessIdentity> Verify(const std::string& root, int64_t pid, int64_t ns_pid,
                                      int port, Holds* why) {
  std::optional<ProcStat> before = ReadStat(root, pid);
  if (!before || before->state == 'Z' || before->state == 'X') {
    *why = Holds::kNoFd;
    return std::nullopt;
  }
  uint64_t inode = 0;
  *why = HoldsListener(root, pid, port, &inode);
  std::optional<ProcStat> after = ReadStat(root, pid);
  if (*why != Holds::kYes || !after || after->start_ticks != before->start_ticks) {
    return std::nullopt;
  }
  return ProcessIdentity{pid, ns_pid, before->start_ticks, inode, ReadCommand(root, pid)};
}

}  // namespace

std::string ProcessIdentity::Describe() const {
  if (ns_pid == pid || ns_pid <= 0) return absl::StrCat("pid ", pid);
  return absl::StrCat("pid ", pid, " (pid ", ns_pid, " in its own PID namespace)");
}

std::vector<int64_t> ReadNsPids(int64_t pid, const std::string& proc_root) {
  std::optional<std::string> status = ReadSmall(ProcPath(proc_root, pid, "status"));
  std::vector<int64_t> out;
  if (!status) return out;
  for (absl::string_view line : absl::StrSplit(*status, '\n')) {
    if (!absl::ConsumePrefix(&line, "NSpid:")) continue;
    for (absl::string_view word : absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty())) {
      int64_t v = 0;
      if (!absl::SimpleAtoi(word, &v) || v <= 0) return {};
      out.push_back(v);
    }
    break;
  }
  return out;
}

std::vector<uint64_t> ListeningInodes(int64_t pid, int port, const std::string& proc_root) {
  std::vector<uint64_t> out;
  for (const char* table : {"net/tcp", "net/tcp6"}) {
    std::ifstream in(ProcPath(proc_root, pid, table));
    std::string line;
    std::getline(in, line);  // The header.
    while (std::getline(in, line)) {
      char local[128];
      unsigned state = 0;
      unsigned long long inode = 0;
      // sl local rem st tx:rx tr:when retrnsmt uid timeout inode
      if (line.size() > 512 ||
          std::sscanf(line.c_str(), " %*s %127s %*s %x %*s %*s %*s %*s %*s %llu", local, &state,
                      &inode) != 3) {
        continue;
      }
      const char* colon = std::strrchr(local, ':');
      if (state != 0x0A || colon == nullptr || inode == 0) continue;  // 0A: TCP_LISTEN.
      if (std::strtol(colon + 1, nullptr, 16) == port) out.push_back(inode);
    }
  }
  return out;
}

absl::StatusOr<ProcessIdentity> FindTaskProcess(int64_t reported_pid, int port,
                                                const std::string& proc_root) {
  if (reported_pid <= 0 || port <= 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("no pid or port to check (pid ", reported_pid, ", port ", port, ")"));
  }
  bool cannot_read = false;
  std::vector<std::string> tried;
  auto attempt = [&](int64_t pid) {
    Holds why = Holds::kNoFd;
    std::optional<ProcessIdentity> id = Verify(proc_root, pid, reported_pid, port, &why);
    cannot_read |= why == Holds::kCannotRead;
    if (!id) tried.push_back(absl::StrCat(pid, " (", ReadCommand(proc_root, pid), ")"));
    return id;
  };
  // Most tasks share the sidecar's PID namespace: the reported pid is theirs here too. Only
  // when it is not are the other processes' namespaces read.
  const std::vector<int64_t> own = ReadNsPids(reported_pid, proc_root);
  if (!own.empty() && own.back() == reported_pid) {
    if (auto id = attempt(reported_pid)) return *id;
  }
  for (int64_t pid : NestedCandidates(proc_root, reported_pid)) {
    if (auto id = attempt(pid)) return *id;
  }
  if (tried.empty()) {
    return absl::NotFoundError(absl::StrCat(
        "no process here is pid ", reported_pid,
        " in its own PID namespace: this sidecar does not see the task's PID namespace (run it "
        "with hostPID, or the task's pod with shareProcessNamespace)"));
  }
  if (cannot_read) {
    return absl::PermissionDeniedError(absl::StrCat(
        "cannot read the sockets or fds of pid ", absl::StrJoin(tried, ", pid "),
        ": run the sidecar as root or with CAP_DAC_READ_SEARCH and CAP_SYS_PTRACE"));
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "the task claims pid ", reported_pid, ", but pid ", absl::StrJoin(tried, ", pid "),
      " does not hold its listening port ", port, ": not the task's process, never read as it"));
}

bool StillSameProcess(const ProcessIdentity& id, const std::string& proc_root) {
  std::optional<ProcStat> st = ReadStat(proc_root, id.pid);
  return st && st->state != 'Z' && st->state != 'X' && st->start_ticks == id.start_ticks;
}

}  // namespace trainscope
