#pragma once
// A node's own load, from the kernel's /proc: CPU steal, the load average per core, CPU and
// memory pressure (PSI), swapping. The evidence of a starved node (docs/sidecar.md, "Slow, not
// dead"): most of its tasks slow together while this says why. Inside a container /proc/stat,
// /proc/loadavg and /proc/pressure are the host's, which is the node that starves.
// NodeLoadWatch is not thread-safe (one per watcher).

#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace trainscope::sidecar {
namespace v1 {
class NodeLoad;
}

struct NodeLoad {
  bool read = false;  // Something was read (false: not sampled yet, or no /proc).
  int cores = 0;
  std::optional<double> load_per_core;          // The 1-minute load average / cores.
  std::optional<double> cpu_steal_ratio;        // Of all CPU time, over the last ~10 s.
  std::optional<double> cpu_pressure_ratio;     // PSI cpu `some avg10`, 0-1.
  std::optional<double> memory_pressure_ratio;  // PSI memory `some avg10`, 0-1.
  std::optional<double> swap_pages_per_second;  // Swapped in + out, over the last ~10 s.
};

// What in `load` says the node is short of CPU or memory, in words ("CPU steal 35%, load 4.1
// per core"); "" when nothing does. With `others` (the other nodes' loads), a fact counts only
// at twice the median of theirs or more: a strain every node shares (one busy host under
// several nodes, a whole rack) is no node's own, and would come and go with the host's noise.
std::string NodeStrainWords(const NodeLoad& load, const std::vector<NodeLoad>& others = {});

// The wire form, in each node's record (sidecar.proto).
void ToProto(const NodeLoad& load, v1::NodeLoad* out);
NodeLoad FromProto(const v1::NodeLoad& in);

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
