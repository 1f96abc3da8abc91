// Stragglers (stragglers.h).
#include "trainscope/sidecar/stragglers.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "trainscope/common/clock.h"

namespace trainscope::sidecar {
namespace {

constexpr double kMemoryPressureShare = 0.1;

int WholePercent(double share) { return static_cast<int>(std::lround(share * 100)); }

// What its node says holds `v` back, in words; "" when nothing does.
std::string CauseOf(const TaskView& v, const WorkerPsMap& map) {
  const TaskCgroup& c = v.cgroup;
  // Its own tracker's reason says how much, and what the quota is (CgroupWatch::ThrottledWords).
  if (HeldByItsCpuQuota(c)) return "held back by its own CPU quota";
  if (c.memory_pressure_ratio && *c.memory_pressure_ratio >= kMemoryPressureShare) {
    return absl::StrCat("it stalls waiting for memory ", WholePercent(*c.memory_pressure_ratio),
                        "% of the time (memory pressure)");
  }
  for (const SlowLink& l : map.slow_links) {
    if (l.from == v.task) return absl::StrCat("its link to ", l.to.ShortName(), " is slow");
  }
  return "";
}

}  // namespace

bool TrainingNow(const TaskView& v) {
  return (v.state == TaskState::kUp || v.state == TaskState::kSlow) && v.expects_progress &&
         v.recent_step_seconds > 0;
}

double MedianOf(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

std::vector<Straggler> FindStragglers(const std::map<TaskRef, TaskView>& tasks,
                                      const WorkerPsMap& map, const StragglerRules& rules) {
  std::vector<Straggler> out;
  for (const auto& [t, v] : tasks) {
    if (!TrainingNow(v)) continue;
    std::vector<double> peers;
    for (const auto& [o, ov] : tasks) {
      if (o != t && o.role == t.role && TrainingNow(ov)) peers.push_back(ov.recent_step_seconds);
    }
    if (static_cast<int>(peers.size()) < rules.min_peers) continue;
    const double median = MedianOf(peers);
    const double step = v.recent_step_seconds;
    if (step <= std::max(rules.cause_factor * median, median + rules.cause_min_gap_s)) continue;
    std::string cause = CauseOf(v, map);
    const bool changed = v.usual_step_seconds > 0 && v.step_raised_seconds >= rules.hold_s &&
                         step > std::max(rules.factor * median, median + rules.min_gap_s);
    if (!changed && cause.empty()) continue;
    out.push_back({t, v.recent_step_seconds, median, v.usual_step_seconds, v.step_raised_seconds,
                   std::move(cause)});
  }
  return out;
}

std::string StragglerWords(const Straggler& s) {
  std::string words = absl::StrCat(
      "straggler: a step every ", HumanDuration(s.recent_step_seconds), ", ",
      absl::StrFormat("%.1f", s.recent_step_seconds / std::max(s.peers_median_seconds, 1e-6)),
      "x the median of the other ", s.task.role, "s (", HumanDuration(s.peers_median_seconds), ")");
  if (s.raised_seconds > 0 && s.usual_step_seconds > 0) {
    absl::StrAppend(&words, ", for ", HumanDuration(s.raised_seconds), " (usually ",
                    HumanDuration(s.usual_step_seconds), ")");
  }
  absl::StrAppend(&words, ": ",
                  s.cause.empty() ? "nothing on its node says why (not its CPU quota, nor "
                                    "memory, nor a link of its own)"
                                  : s.cause);
  return words;
}

}  // namespace trainscope::sidecar
