// A task's process, found by its listening socket and its namespaced PID; see
// process_identity.h.
#include "trainscope/common/process_identity.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "trainscope/common/proc.h"
#include "trainscope/common/resolve.h"

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

// The inodes of the sockets listening on `address`:`port` in `pid`'s network namespace.
std::vector<uint64_t> MatchingInodes(const std::string& root, int64_t pid,
                                     const std::string& address, int port) {
  std::vector<uint64_t> out;
  std::optional<std::vector<std::string>> own;
  for (const ListeningSocket& s : ListeningSockets(pid, port, root)) {
    bool matches = address.empty() || s.address == address;
    if (!matches && s.address.empty()) {
      if (!own) own = NamespaceAddresses(pid, root);
      matches = std::find(own->begin(), own->end(), address) != own->end();
    }
    if (matches) out.push_back(s.inode);
  }
  return out;
}

// Whether `pid` holds one of `inodes` among its fds (the one in `*inode`).
Holds HoldsOneOf(const std::string& root, int64_t pid, const std::vector<uint64_t>& inodes,
                 uint64_t* inode) {
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

// Whether process `pid` holds a socket listening on `address`:`port` in its own network
// namespace (`address` empty: any); the inode in `*inode` when it does.
Holds HoldsListener(const std::string& root, int64_t pid, const std::string& address, int port,
                    uint64_t* inode) {
  const std::vector<uint64_t> inodes = MatchingInodes(root, pid, address, port);
  if (inodes.empty()) return Holds::kNoSocket;
  return HoldsOneOf(root, pid, inodes, inode);
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
                                      const std::string& address, int port, Holds* why) {
  std::optional<ProcStat> before = ReadStat(root, pid);
  if (!before || before->state == 'Z' || before->state == 'X') {
    *why = Holds::kNoFd;
    return std::nullopt;
  }
  uint64_t inode = 0;
  *why = HoldsListener(root, pid, address, port, &inode);
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

namespace {

// The address of a /proc/net/tcp* "local_address" field's hex ("0100007F" or 32 digits), as
// text; "" for every address (all zeros); nullopt when it is not one.
std::optional<std::string> HexAddress(absl::string_view hex) {
  if (hex.size() != 8 && hex.size() != 32) return std::nullopt;
  unsigned char bytes[16] = {};
  for (size_t word = 0; word < hex.size() / 8; ++word) {
    uint32_t v = 0;
    if (!absl::SimpleHexAtoi(hex.substr(word * 8, 8), &v)) return std::nullopt;
    std::memcpy(bytes + word * 4, &v, 4);  // The kernel prints each word in host order.
  }
  const bool v4 = hex.size() == 8;
  if (std::all_of(bytes, bytes + (v4 ? 4 : 16), [](unsigned char b) { return b == 0; })) {
    return std::string();
  }
  char text[INET6_ADDRSTRLEN] = {};
  if (inet_ntop(v4 ? AF_INET : AF_INET6, bytes, text, sizeof(text)) == nullptr) return std::nullopt;
  absl::string_view out = text;
  absl::ConsumePrefix(&out, "::ffff:");  // IPv4 mapped: compared as IPv4.
  return std::string(out);
}

}  // namespace

std::vector<ListeningSocket> ListeningSockets(int64_t pid, int port, const std::string& proc_root) {
  std::vector<ListeningSocket> out;
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
      if (std::strtol(colon + 1, nullptr, 16) != port) continue;
      std::optional<std::string> address =
          HexAddress(absl::string_view(local, static_cast<size_t>(colon - local)));
      if (address) out.push_back({inode, *address});
    }
  }
  return out;
}

std::vector<std::string> NamespaceAddresses(int64_t pid, const std::string& proc_root) {
  std::vector<std::string> out;
  // fib_trie: "|-- 10.0.0.3" then "/32 host LOCAL" under it for an address of the namespace.
  std::ifstream trie(ProcPath(proc_root, pid, "net/fib_trie"));
  std::string line, last;
  for (int n = 0; n < 100000 && std::getline(trie, line); ++n) {
    absl::string_view s = absl::StripLeadingAsciiWhitespace(line);
    if (absl::ConsumePrefix(&s, "|-- ")) {
      last = std::string(s);
    } else if (absl::StrContains(s, "/32 host LOCAL") && !last.empty()) {
      if (std::find(out.begin(), out.end(), last) == out.end()) out.push_back(last);
    }
  }
  // if_inet6: the address's 32 hex digits first on each line, in network order.
  std::ifstream inet6(ProcPath(proc_root, pid, "net/if_inet6"));
  for (int n = 0; n < 10000 && std::getline(inet6, line); ++n) {
    if (line.size() < 32) continue;
    unsigned char bytes[16];
    bool ok = true;
    for (int i = 0; i < 16 && ok; ++i) {
      uint32_t v = 0;
      ok = absl::SimpleHexAtoi(absl::string_view(line).substr(i * 2, 2), &v);
      bytes[i] = static_cast<unsigned char>(v);
    }
    char text[INET6_ADDRSTRLEN] = {};
    if (ok && inet_ntop(AF_INET6, bytes, text, sizeof(text)) != nullptr) out.push_back(text);
  }
  return out;
}

absl::StatusOr<ProcessIdentity> FindTaskProcess(int64_t reported_pid, const std::string& host,
                                                int port, const std::string& proc_root) {
  if (reported_pid <= 0 || port <= 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("no pid or port to check (pid ", reported_pid, ", port ", port, ")"));
  }
  // A name that does not resolve matches any address (the port alone then says which).
  const std::string address = host.empty() ? "" : NumericAddress(host);
  bool cannot_read = false;
  std::vector<std::string> tried;
  auto attempt = [&](int64_t pid) {
    Holds why = Holds::kNoFd;
    std::optional<ProcessIdentity> id = Verify(proc_root, pid, reported_pid, address, port, &why);
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
    return absl::PermissionDeniedError(
        absl::StrCat("cannot read the sockets or fds of pid ", absl::StrJoin(tried, ", pid "),
                     ": run the sidecar as root or with CAP_DAC_READ_SEARCH and CAP_SYS_PTRACE"));
  }
  return absl::FailedPreconditionError(
      absl::StrCat("the task claims pid ", reported_pid, ", but pid ",
                   absl::StrJoin(tried, ", pid "), " does not hold its listening port ", port,
                   address.empty() ? "" : absl::StrCat(" on ", address),
                   ": not the task's process, never read as it"));
}

namespace {

// The network namespace of process `pid` ("net:[4026531992]"); its pid when unknown, so that it
// is a namespace of its own.
std::string NetNamespace(const std::string& root, int64_t pid) {
  char link[64];
  const std::string path = ProcPath(root, pid, "ns/net");
  const ssize_t n = readlink(path.c_str(), link, sizeof(link) - 1);
  return n > 0 ? std::string(link, static_cast<size_t>(n)) : absl::StrCat("pid:", pid);
}

}  // namespace

absl::StatusOr<ProcessIdentity> FindListeningProcess(const std::string& host, int port,
                                                     const std::string& proc_root) {
  const std::string address = host.empty() ? "" : NumericAddress(host);
  std::map<std::string, std::vector<uint64_t>> inodes_of;  // By network namespace.
  bool cannot_read = false;
  DIR* proc = opendir(proc_root.c_str());
  if (proc == nullptr) return absl::NotFoundError(absl::StrCat("cannot read ", proc_root));
  std::vector<int64_t> pids;
  while (dirent* entry = readdir(proc)) {
    int64_t pid = 0;
    if (absl::SimpleAtoi(entry->d_name, &pid) && pid > 0) pids.push_back(pid);
  }
  closedir(proc);
  std::sort(pids.begin(), pids.end());
  for (int64_t pid : pids) {
    const std::string ns = NetNamespace(proc_root, pid);
    auto it = inodes_of.find(ns);
    if (it == inodes_of.end()) {
      it = inodes_of.emplace(ns, MatchingInodes(proc_root, pid, address, port)).first;
    }
    if (it->second.empty()) continue;
    std::optional<ProcStat> before = ReadStat(proc_root, pid);
    uint64_t inode = 0;
    const Holds holds = HoldsOneOf(proc_root, pid, it->second, &inode);
    cannot_read |= holds == Holds::kCannotRead;
    std::optional<ProcStat> after = ReadStat(proc_root, pid);
    if (holds != Holds::kYes || !before || !after || before->start_ticks != after->start_ticks) {
      continue;
    }
    const std::vector<int64_t> ns_pids = ReadNsPids(pid, proc_root);
    return ProcessIdentity{pid, ns_pids.empty() ? pid : ns_pids.back(), before->start_ticks, inode,
                           ReadCommand(proc_root, pid)};
  }
  if (cannot_read) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot read the fds of the process listening on ", host, ":", port,
                     ": run the sidecar as root or with CAP_DAC_READ_SEARCH and CAP_SYS_PTRACE"));
  }
  return absl::NotFoundError(absl::StrCat("no process here listens on ",
                                          host.empty() ? "" : host + ":", port,
                                          " (in any network namespace this sidecar sees)"));
}

bool StillSameProcess(const ProcessIdentity& id, const std::string& proc_root) {
  std::optional<ProcStat> st = ReadStat(proc_root, id.pid);
  return st && st->state != 'Z' && st->state != 'X' && st->start_ticks == id.start_ticks;
}

absl::StatusOr<LogChunk> ReadProcessLog(int64_t pid, int64_t offset, size_t max,
                                        const std::string& proc_root) {
  for (int fd : {2, 1}) {
    const std::string link = absl::StrCat(proc_root, "/", pid, "/fd/", fd);
    const int file = open(link.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (file < 0) continue;
    struct stat st {};
    if (fstat(file, &st) != 0 || !S_ISREG(st.st_mode)) {
      close(file);
      continue;
    }
    LogChunk chunk;
    char target[256];
    const ssize_t named = readlink(link.c_str(), target, sizeof(target) - 1);
    if (named > 0) chunk.path.assign(target, static_cast<size_t>(named));
    chunk.inode = st.st_ino;
    chunk.size = st.st_size;
    chunk.offset = offset < 0 ? st.st_size : offset <= st.st_size ? offset : 0;
    chunk.bytes.resize(
        std::min<size_t>({max, kMaxLogChunk, static_cast<size_t>(st.st_size - chunk.offset)}));
    const ssize_t n =
        chunk.bytes.empty() ? 0 : pread(file, chunk.bytes.data(), chunk.bytes.size(), chunk.offset);
    close(file);
    chunk.bytes.resize(n > 0 ? static_cast<size_t>(n) : 0);
    return chunk;
  }
  return absl::NotFoundError(
      absl::StrCat("process ", pid, " writes its stderr and stdout to no file here"));
}

absl::StatusOr<std::string> ReadProcessEnviron(int64_t pid, const std::string& proc_root) {
  const std::string path = absl::StrCat(proc_root, "/", pid, "/environ");
  const int file = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (file < 0) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::string text(kMaxEnvironBytes, '\0');
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = read(file, text.data() + done, text.size() - done);
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  close(file);
  text.resize(done);
  return text;
}

}  // namespace trainscope
