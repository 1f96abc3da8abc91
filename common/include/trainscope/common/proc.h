#pragma once
// What /proc says about a process: its state letter, CPU time, threads, memory and start time
// (/proc/<pid>/stat), and its open file descriptors. One hand parser, used by the runtime for
// its own usage and by the sidecar for the tasks it watches and for itself. Thread-safe.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace trainscope {

struct ProcStat {
  char state = '?';  // R, S, D, T, t, Z, X, ...
  double cpu_seconds = 0;
  int threads = 0;
  int64_t virtual_bytes = 0;
  int64_t resident_bytes = 0;
  double start_time_unix = 0;
  // Field 22 as the kernel gives it (clock ticks after boot): with the pid, names one process
  // for the life of the machine (a reused pid has a later start).
  uint64_t start_ticks = 0;
};

// Reads /proc/<pid>/stat (pid 0: this process) with one read and no allocation beyond the
// result; nullopt when there is no such process or the file cannot be parsed.
std::optional<ProcStat> ReadProcStat(int64_t pid = 0);
// Parses the text of a /proc/<pid>/stat file; nullopt when it is not one.
std::optional<ProcStat> ParseProcStat(std::string_view stat);

// This process's resource usage, as Prometheus' standard process_* metrics and the heartbeat
// report it.
struct ResourceUsage {
  double cpu_seconds = 0;
  int64_t resident_bytes = 0;
  int threads = 0;
  int open_fds = 0;
  double start_time_unix = 0;
  int64_t virtual_bytes = 0;
  int64_t max_fds = 0;
};
ResourceUsage ReadResourceUsage();

// The number of open file descriptors of process `pid` (0: this process); -1 when its
// /proc/<pid>/fd cannot be read (no such process, or another user's).
int CountOpenFds(int64_t pid = 0);

// The process that holds the socket listening on TCP `port` (any local address), found through
// /proc/net/tcp{,6} (the socket's inode) and /proc/*/fd (who holds it). nullopt when nothing
// listens there or the holder cannot be seen (another user's process). Scans every process's
// fds: call it when the answer is needed, not on every poll.
struct PortOwner {
  int64_t pid = 0;
  std::string command;  // /proc/<pid>/comm, e.g. "python3".
};
std::optional<PortOwner> FindPortOwner(int port);

}  // namespace trainscope
