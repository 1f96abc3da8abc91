// Starved nodes (starved_nodes.h).
#include "trainscope/sidecar/starved_nodes.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "trainscope/common/clock.h"
#include "trainscope/sidecar/stragglers.h"

namespace trainscope::sidecar {
namespace {

// A training task whose node is known.
bool Training(const TaskView& v) { return TrainingNow(v) && !v.node.empty(); }

// The median step of `role`'s training tasks on nodes other than `node`; 0 when none.
double OthersMedian(const std::map<TaskRef, TaskView>& tasks, const std::string& node,
                    const std::string& role) {
  std::vector<double> steps;
  for (const auto& [t, v] : tasks) {
    if (t.role == role && Training(v) && v.node != node) steps.push_back(v.recent_step_seconds);
  }
  return steps.empty() ? 0 : MedianOf(steps);
}

// True when `v` is slow against `others` (the same role elsewhere) and its own past.
bool SlowTogether(const TaskView& v, double others, bool evidence, const StarvedNodeRules& r) {
  const double step = v.recent_step_seconds;
  if (evidence) {
    const bool gap = step > std::max(r.cause_factor * others, others + r.cause_min_gap_s);
    const bool changed =
        HeldByItsCpuQuota(v.cgroup) ||
        (v.usual_step_seconds > 0 && step >= r.cause_factor * v.usual_step_seconds);
    return gap && changed;
  }
  return step > std::max(r.factor * others, others + r.min_gap_s) && v.usual_step_seconds > 0 &&
         v.step_raised_seconds >= r.hold_s;
}

// What the node's tasks and its load (`strain`, against the others') say, in words.
std::string EvidenceOf(const std::vector<const TaskView*>& tasks, const std::string& strain) {
  std::vector<std::string> words;
  const auto quota = std::count_if(tasks.begin(), tasks.end(),
                                   [](const TaskView* v) { return HeldByItsCpuQuota(v->cgroup); });
  if (quota * 2 > static_cast<long>(tasks.size())) {
    words.push_back(absl::StrCat(quota, " of them held back by their CPU quota"));
  }
  if (!strain.empty()) words.push_back(absl::StrCat("the node: ", strain));
  return absl::StrJoin(words, "; ");
}

// The verdict on one node's training tasks, or nullopt.
std::optional<StarvedNode> Judge(const std::string& node, const std::vector<const TaskView*>& mine,
                                 const std::map<TaskRef, TaskView>& tasks,
                                 const std::string& strain, const StarvedNodeRules& rules) {
  StarvedNode s;
  s.node = node;
  const bool node_evidence = !strain.empty();
  std::vector<double> steps, others;
  std::vector<const TaskView*> slow;
  std::map<std::string, double> others_by_role;  // Each role's, once per node.
  for (const TaskView* v : mine) {
    auto [it, fresh] = others_by_role.try_emplace(v->task.role, 0.0);
    if (fresh) it->second = OthersMedian(tasks, node, v->task.role);
    const double o = it->second;
    if (o <= 0) continue;
    ++s.compared;
    const bool evidence = node_evidence || HeldByItsCpuQuota(v->cgroup);
    if (!SlowTogether(*v, o, evidence, rules)) continue;
    slow.push_back(v);
    s.slow.push_back(v->task);
    steps.push_back(v->recent_step_seconds);
    others.push_back(o);
    s.raised_seconds = std::max(s.raised_seconds, v->step_raised_seconds);
  }
  const int n = static_cast<int>(slow.size());
  if (n < rules.min_slow || n * 2 <= s.compared) return std::nullopt;
  s.step_seconds = MedianOf(steps);
  s.others_seconds = MedianOf(others);
  s.evidence = EvidenceOf(slow, strain);
  return s;
}

}  // namespace

std::vector<StarvedNode> FindStarvedNodes(const std::map<TaskRef, TaskView>& tasks,
                                          const std::map<std::string, NodeLoad>& loads,
                                          const StarvedNodeRules& rules) {
  std::map<std::string, std::vector<const TaskView*>> by_node;
  for (const auto& [t, v] : tasks) {
    if (Training(v)) by_node[v.node].push_back(&v);
  }
  if (by_node.size() < 2) return {};  // Nothing to compare a node with.
  std::vector<StarvedNode> out;
  for (const auto& [node, mine] : by_node) {
    std::string strain;
    if (auto it = loads.find(node); it != loads.end()) {
      std::vector<NodeLoad> others;
      for (const auto& [o, l] : loads) {
        if (o != node && l.read) others.push_back(l);
      }
      strain = NodeStrainWords(it->second, others);
    }
    if (auto s = Judge(node, mine, tasks, strain, rules)) {
      out.push_back(*std::move(s));
    }
  }
  return out;
}

std::string StarvedNodeWords(const StarvedNode& s, const std::string& name) {
  std::set<std::string> roles;
  std::vector<std::string> names;
  for (const TaskRef& t : s.slow) {
    roles.insert(t.role);
    names.push_back(t.ShortName());
  }
  const std::string role = roles.size() == 1 ? *roles.begin() : "training task";
  std::string words = absl::StrCat(
      "throttled or starved node ", name, ": ", s.slow.size(), " of its ", s.compared, " ", role,
      "s (", absl::StrJoin(names, ", "), ") step ",
      absl::StrFormat("%.1f", s.step_seconds / std::max(s.others_seconds, 1e-6)),
      "x slower than the ", role, "s of other nodes (a step every ", HumanDuration(s.step_seconds),
      " against ", HumanDuration(s.others_seconds), ")");
  absl::StrAppend(&words, ": ",
                  s.evidence.empty() ? "nothing on the node says why (not their CPU quota, "
                                       "nor its steal, load, pressure or swapping)"
                                     : s.evidence);
  return words;
}

}  // namespace trainscope::sidecar
