#pragma once
// A node's own load, read from the kernel's /proc into the model's NodeLoad (node_load.h). The
// evidence of a starved node (docs/sidecar.md, "Slow, not dead"): most of its tasks slow together
// while this says why. Inside a container /proc/stat, /proc/loadavg and /proc/pressure are the
// host's, which is the node that starves. NodeLoadWatch is not thread-safe (one per watcher).

#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "trainscope/sidecar/node_load.h"

namespace trainscope::sidecar {

// Parsers of /proc text; nullopt when the text is not what the kernel writes (PSI:
// ParsePsiSomeAvg10, trainscope/common/cgroup.h).
struct CpuTicks {
  double total = 0;
  double steal = 0;
};
std::optional<CpuTicks> ParseProcStatCpu(absl::string_view stat);      // /proc/stat
std::optional<double> ParseLoadAverage(absl::string_view loadavg);     // /proc/loadavg
std::optional<double> ParseVmstatSwapPages(absl::string_view vmstat);  // /proc/vmstat
int ParseProcStatCores(absl::string_view stat);                        // cpuN lines

class NodeLoadWatch {
 public:
  // `proc`: where /proc is (tests give a folder of their own).
  explicit NodeLoadWatch(std::string proc = "/proc") : proc_(std::move(proc)) {}
  // Reads /proc at monotonic `now_s`; rates are over the last ~10 s of samples.
  NodeLoad Sample(double now_s);

 private:
  struct Counters {
    double at = 0;
    std::optional<CpuTicks> cpu;
    std::optional<double> swap_pages;
  };
  std::string proc_;
  std::deque<Counters> past_;
};

// A NodeLoadWatch read by several threads (the page, the exchange): /proc at most once a
// second, the last sample otherwise. Thread-safe.
class SharedNodeLoad {
 public:
  explicit SharedNodeLoad(std::string proc = "/proc") : watch_(std::move(proc)) {}
  NodeLoad Get(double now_s);

 private:
  std::mutex mu_;
  NodeLoadWatch watch_;
  NodeLoad last_;
  double at_ = -1;
};

}  // namespace trainscope::sidecar
