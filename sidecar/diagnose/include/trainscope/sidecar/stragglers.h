#pragma once
// Stragglers: a task whose steps stay well above its peers' (the same role), named with why when
// its node says it (its CPU quota, memory pressure, a slow link of its own). A verdict needs a
// gap against the peers, held in the 10 s median of each task's steps, and either a change
// against the task's own past, held 5 s (RaisedWatch), or evidence of a cause, which lowers the
// bar. A machine busy for everyone slows every task together and makes no straggler. Pure
// functions over values.

#include <map>
#include <string>
#include <vector>

#include "trainscope/common/cluster_spec.h"
#include "trainscope/sidecar/task_view.h"
#include "trainscope/sidecar/worker_ps_map.h"

namespace trainscope::sidecar {

struct StragglerRules {
  // Steps above factor x the peers' median and above it by min_gap_s, and raised against its
  // own past for hold_s;
  double factor = 3;
  double min_gap_s = 0.05;
  double hold_s = kHeldRaiseS;
  // or, when its node shows a cause (its quota throttles it, memory pressure, a slow link of its
  // own), above cause_factor x the median and by cause_min_gap_s: the evidence is the hold.
  double cause_factor = 1.3;
  double cause_min_gap_s = 0.003;
  int min_peers = 2;
};

struct Straggler {
  TaskRef task;
  double recent_step_seconds = 0;
  double peers_median_seconds = 0;
  double usual_step_seconds = 0;  // 0 when not learned.
  double raised_seconds = 0;
  std::string cause;  // Why, in words; "" when nothing on its node says.
};

// A task that trains now (up or slow, expected to progress, with a recent pace): one that a
// fail-slow verdict may compare. Shared with starved_nodes.
bool TrainingNow(const TaskView& v);
// The median of `v` (the upper one of an even count); `v` not empty.
double MedianOf(std::vector<double> v);

std::vector<Straggler> FindStragglers(const std::map<TaskRef, TaskView>& tasks,
                                      const WorkerPsMap& map, const StragglerRules& rules = {});

// "straggler: its steps take 180 ms, 18x its peers' median (10 ms) ...: <cause>".
std::string StragglerWords(const Straggler& s);

}  // namespace trainscope::sidecar
