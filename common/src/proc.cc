// /proc readers; see proc.h.
#include "trainscope/common/proc.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

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
  size_t n = static_cast<size_t>(got);
  buf[n] = 0;
  std::string_view s(buf, n);
  // The command name is in parentheses and may hold spaces and parentheses: the last ')' ends it.
  size_t paren = s.rfind(')');
  if (paren == std::string_view::npos || paren + 2 >= s.size()) return std::nullopt;
  ProcStat out;
  out.state = s[paren + 2];
  // Fields after the state, numbered as proc(5) does: utime 14, stime 15, num_threads 20,
  // starttime 22, vsize 23, rss 24. Field 3 is the state.
  const char* p = buf + paren + 3;
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
  out.start_time_unix = BootTimeUnix() + static_cast<double>(field[22]) / kTicks;
  out.virtual_bytes = static_cast<int64_t>(field[23]);
  out.resident_bytes = static_cast<int64_t>(field[24]) * kPage;
  return out;
}

namespace {

int CountOpenFds() {
  int n = 0;
  if (DIR* d = opendir("/proc/self/fd")) {
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] != '.') ++n;
    }
    closedir(d);
    --n;  // The directory stream itself.
  }
  return n;
}

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
