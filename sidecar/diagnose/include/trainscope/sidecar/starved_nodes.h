#pragma once
// Starved nodes: most training tasks of one node slow together against the same roles on the
// other nodes, named as the node with its evidence (its tasks' CPU quota; its own steal, load,
// pressure, swapping, at twice the other nodes' or more: node_load.h), rather than as N
// stragglers. Each slow task needs a gap
// against the other nodes' tasks and a change against its own past: with evidence, 1.5x both;
// without, a raise held 5 s and 3x the others. A machine busy for everyone slows every node
// together and makes no verdict. Pure functions over values.

#include <map>
#include <string>
#include <vector>

#include "trainscope/common/cluster_spec.h"
#include "trainscope/sidecar/node_load.h"
#include "trainscope/sidecar/task_view.h"

namespace trainscope::sidecar {

struct StarvedNodeRules {
  double factor = 3;  // Without evidence: above factor x the others, by min_gap_s, raised hold_s.
  double min_gap_s = 0.05;
  double hold_s = kHeldRaiseS;
  double cause_factor = 1.5;  // With evidence: above cause_factor x the others and its usual.
  double cause_min_gap_s = 0.003;
  int min_slow = 2;  // Tasks of the node slow together, and more than half of those compared.
};

struct StarvedNode {
  std::string node;
  std::vector<TaskRef> slow;
  int compared = 0;           // Its training tasks that have peers on other nodes.
  double step_seconds = 0;    // The median of its slow tasks' recent steps.
  double others_seconds = 0;  // The median of the same roles' on the other nodes.
  double raised_seconds = 0;  // The longest raise among its slow tasks (0: not known).
  std::string evidence;       // Why, in words; "" when nothing on the node says.
};

// `loads`: each node's load by node id (what its record carries; this node's own).
std::vector<StarvedNode> FindStarvedNodes(const std::map<TaskRef, TaskView>& tasks,
                                          const std::map<std::string, NodeLoad>& loads,
                                          const StarvedNodeRules& rules = {});

// "throttled or starved node n4: 2 of its 2 workers ...: <evidence>". `name`: the node's name
// for people (NodeName).
std::string StarvedNodeWords(const StarvedNode& s, const std::string& name);

}  // namespace trainscope::sidecar
