// /proc readers; see proc.h.
#include "trainscope/common/proc.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>

namespace trainscope {
namespace {

// The system boot time (btime of /proc/stat), read once.
double BootTimeUnix() {
  static const double kBoot = [] {
    double boot = 0;
    if (FILE* f = std::fopen("/proc/stat", "re")) {
      char line[256];
      while (std::fgets(line, sizeof(line), f) != nullptr) {
        if (std::strncmp(line, "btime ", 6) == 0) {
          boot = std::strtod(line + 6, nullptr);
          break;
        }
      }
      std::fclose(f);
    }
    return boot;
  }();
  return kBoot;
}

}  // namespace

std::optional<ProcStat> ReadProcStat(int64_t pid) {
  if (pid < 0) return std::nullopt;
  // Called for every watched task on every tick, so: one open/read/close and a hand parse.
  char path[64];
  if (pid == 0) {
    std::snprintf(path, sizeof(path), "/proc/self/stat");
  } else {
    std::snprintf(path, sizeof(path), "/proc/%lld/stat", static_cast<long long>(pid));
  }
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  char buf[1024];
  ssize_t got = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (got <= 0) return std::nullopt;
  return ParseProcStat(std::string_view(buf, static_cast<size_t>(got)));
}

std::optional<ProcStat> ParseProcStat(std::string_view s) {
  // The command name is in parentheses and may hold spaces and parentheses: the last ')' ends it.
  size_t paren = s.rfind(')');
  if (paren == std::string_view::npos || paren + 2 >= s.size()) return std::nullopt;
  ProcStat out;
  out.state = s[paren + 2];
  // Fields after the state, numbered as proc(5) does: utime 14, stime 15, num_threads 20,
  // starttime 22, vsize 23, rss 24. Field 3 is the state.
  char buf[1024];
  const size_t n = std::min(s.size() - (paren + 3), sizeof(buf) - 1);
  std::memcpy(buf, s.data() + paren + 3, n);
  buf[n] = 0;
  const char* p = buf;
  const char* end = buf + n;
  unsigned long long field[25] = {};
  int i = 4;
  for (; i <= 24 && p < end; ++i) {
    while (p < end && *p == ' ') ++p;
    char* next = nullptr;
    long long v = std::strtoll(p, &next, 10);
    if (next == p) return std::nullopt;
    field[i] = v < 0 ? 0 : static_cast<unsigned long long>(v);
    p = next;
  }
  if (i <= 15) return std::nullopt;
  static const double kTicks = static_cast<double>(sysconf(_SC_CLK_TCK));
  static const int64_t kPage = sysconf(_SC_PAGESIZE);
  out.cpu_seconds = static_cast<double>(field[14] + field[15]) / kTicks;
  out.threads = static_cast<int>(field[20]);
  out.start_ticks = field[22];
  out.start_time_unix = BootTimeUnix() + static_cast<double>(field[22]) / kTicks;
  out.virtual_bytes = static_cast<int64_t>(field[23]);
  out.resident_bytes = static_cast<int64_t>(field[24]) * kPage;
  return out;
}

int CountOpenFds(int64_t pid) {
  char path[64];
  if (pid == 0) {
    std::snprintf(path, sizeof(path), "/proc/self/fd");
  } else {
    std::snprintf(path, sizeof(path), "/proc/%lld/fd", static_cast<long long>(pid));
  }
  int n = 0;
  DIR* d = opendir(path);
  if (d == nullptr) return -1;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] != '.') ++n;
  }
  closedir(d);
  if (pid == 0) --n;  // The directory stream itself.
  return n;
}

namespace {

// The inode of the socket listening on TCP `port` in `table` (/proc/net/tcp or tcp6); 0 when
// none listens there.
uint64_t ListeningInode(const char* table, int port) {
  FILE* f = std::fopen(table, "re");
  if (f == nullptr) return 0;
  char line[512];
  uint64_t found = 0;
  std::fgets(line, sizeof(line), f);  // The header.
  while (found == 0 && std::fgets(line, sizeof(line), f) != nullptr) {
    char local[128];
    unsigned state = 0;
    unsigned long long inode = 0;
    // sl local rem st tx:rx tr:when retrnsmt uid timeout inode
    if (std::sscanf(line, " %*s %127s %*s %x %*s %*s %*s %*s %*s %llu", local, &state, &inode) !=
        3) {
      continue;
    }
    const char* colon = std::strrchr(local, ':');
    if (state != 0x0A || colon == nullptr) continue;  // 0A: TCP_LISTEN.
    if (std::strtol(colon + 1, nullptr, 16) == port) found = inode;
  }
  std::fclose(f);
  return found;
}

// Whether process `pid` holds the socket named `target` ("socket:[inode]") among its fds.
bool HoldsSocket(long long pid, std::string_view target) {
  char dir_path[64];
  std::snprintf(dir_path, sizeof(dir_path), "/proc/%lld/fd", pid);
  DIR* fds = opendir(dir_path);
  if (fds == nullptr) return false;
  bool holds = false;
  while (dirent* fd = readdir(fds)) {
    char path[384];  // The folder, and a name of up to 255 bytes.
    char link[128];
    std::snprintf(path, sizeof(path), "%s/%s", dir_path, fd->d_name);
    ssize_t n = readlink(path, link, sizeof(link));
    if (n > 0 && std::string_view(link, static_cast<size_t>(n)) == target) {
      holds = true;
      break;
    }
  }
  closedir(fds);
  return holds;
}

std::string ReadComm(long long pid) {
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%lld/comm", pid);
  std::string comm;
  if (FILE* f = std::fopen(path, "re")) {
    char buf[64] = {};
    if (std::fgets(buf, sizeof(buf), f) != nullptr) comm = buf;
    std::fclose(f);
  }
  while (!comm.empty() && comm.back() == '\n') comm.pop_back();
  return comm;
}

}  // namespace

std::optional<PortOwner> FindPortOwner(int port) {
  uint64_t inode = ListeningInode("/proc/net/tcp", port);
  if (inode == 0) inode = ListeningInode("/proc/net/tcp6", port);
  if (inode == 0) return std::nullopt;
  char target[64];
  std::snprintf(target, sizeof(target), "socket:[%llu]", static_cast<unsigned long long>(inode));
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return std::nullopt;
  std::optional<PortOwner> found;
  while (dirent* entry = readdir(proc)) {
    char* end = nullptr;
    const long long pid = std::strtoll(entry->d_name, &end, 10);
    if (pid <= 0 || *end != '\0') continue;
    if (HoldsSocket(pid, target)) {
      found = PortOwner{pid, ReadComm(pid)};
      break;
    }
  }
  closedir(proc);
  return found;
}

namespace {

int64_t MaxFds() {
  rlimit limit{};
  return getrlimit(RLIMIT_NOFILE, &limit) == 0 ? static_cast<int64_t>(limit.rlim_cur) : 0;
}

}  // namespace

ResourceUsage ReadResourceUsage() {
  ResourceUsage usage;
  if (std::optional<ProcStat> s = ReadProcStat()) {
    usage.cpu_seconds = s->cpu_seconds;
    usage.resident_bytes = s->resident_bytes;
    usage.threads = s->threads;
    usage.start_time_unix = s->start_time_unix;
    usage.virtual_bytes = s->virtual_bytes;
  }
  usage.open_fds = CountOpenFds();
  usage.max_fds = MaxFds();
  return usage;
}

}  // namespace trainscope
