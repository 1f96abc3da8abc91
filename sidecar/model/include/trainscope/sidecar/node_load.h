#pragma once
// A node's own load as its record carries it: CPU steal, the load average per core, CPU and
// memory pressure (PSI), swapping. Read by detect (node_load_watch.h), judged by the diagnosis
// (starved_nodes.h). A value: no I/O.

#include <optional>
#include <string>
#include <vector>

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

}  // namespace trainscope::sidecar
