// The worker x ps map and its slow links (worker_ps_map.h).
#include "trainscope/sidecar/worker_ps_map.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "trainscope/common/clock.h"

namespace trainscope::sidecar {
namespace {

bool IsCaller(const TaskRef& t) { return t.role == "worker" || t.role == "chief"; }

double Median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

// The edge's latency to compare: its 10 s median when the watcher gave one, else the task's own
// recent mean.
double EdgeLatency(const PeerInfo& p) {
  return p.recent_latency_seconds > 0 ? p.recent_latency_seconds : p.latency_seconds;
}

// True when `x` stands far above `others` (at least one).
bool FarAbove(double x, const std::vector<double>& others, const LinkRules& rules, double* median) {
  if (others.empty()) return false;
  *median = Median(others);
  return x > std::max(rules.factor * *median, *median + rules.min_gap_s);
}

}  // namespace

WorkerPsMap BuildWorkerPsMap(const std::map<TaskRef, TaskView>& tasks, const LinkRules& rules) {
  WorkerPsMap map;
  for (const auto& [t, v] : tasks) {
    if (!IsCaller(t) || (v.state != TaskState::kUp && v.state != TaskState::kSlow)) continue;
    for (const PeerInfo& p : v.peers) {
      if (p.peer.role != "ps" || !p.connected || EdgeLatency(p) <= 0) continue;
      map.edges.push_back({t, p.peer, EdgeLatency(p), p.usual_latency_seconds, p.raised_seconds});
    }
  }
  for (MapEdge& e : map.edges) {
    if (e.raised_seconds < rules.hold_s || e.usual_seconds <= 0) continue;
    std::vector<double> row, column;
    for (const MapEdge& o : map.edges) {
      if (o.from == e.from && o.to != e.to) row.push_back(o.recent_seconds);
      if (o.to == e.to && o.from != e.from) column.push_back(o.recent_seconds);
    }
    double row_median = 0, column_median = 0;
    if (!FarAbove(e.recent_seconds, row, rules, &row_median) ||
        !FarAbove(e.recent_seconds, column, rules, &column_median)) {
      continue;
    }
    e.slow_link = true;
    map.slow_links.push_back({e.from, e.to, e.recent_seconds, e.usual_seconds, row_median,
                              column_median, e.raised_seconds});
  }
  return map;
}

std::vector<MapEdge> SampleMap(const std::vector<MapEdge>& edges, size_t rows, size_t columns) {
  std::map<TaskRef, double> row_max, column_max;
  for (const MapEdge& e : edges) {
    row_max[e.from] = std::max(row_max[e.from], e.recent_seconds);
    column_max[e.to] = std::max(column_max[e.to], e.recent_seconds);
  }
  auto slowest = [](const std::map<TaskRef, double>& max, size_t n) {
    std::vector<std::pair<double, TaskRef>> order;
    for (const auto& [t, v] : max) order.push_back({v, t});
    std::sort(order.begin(), order.end(),
              [](const auto& a, const auto& b) { return a.first > b.first; });
    std::set<TaskRef> keep;
    for (size_t i = 0; i < order.size() && i < n; ++i) keep.insert(order[i].second);
    return keep;
  };
  const std::set<TaskRef> keep_rows = slowest(row_max, rows);
  const std::set<TaskRef> keep_columns = slowest(column_max, columns);
  std::vector<MapEdge> out;
  for (const MapEdge& e : edges) {
    if (keep_rows.contains(e.from) && keep_columns.contains(e.to)) out.push_back(e);
  }
  return out;
}

std::string SlowLinkWords(const SlowLink& l) {
  const std::string from = l.from.ShortName();
  const std::string to = l.to.ShortName();
  return absl::StrCat("slow link ", from, " -> ", to, ": its calls to ", to, " take ",
                      HumanDuration(l.recent_seconds), " (usually ", HumanDuration(l.usual_seconds),
                      ") for ", HumanDuration(l.raised_seconds),
                      ", where its calls to the other ps take ",
                      HumanDuration(l.row_median_seconds), " and the other workers' calls to ", to,
                      " take ", HumanDuration(l.column_median_seconds),
                      ": the path between the two is slow, not ", to, " nor ", from);
}

}  // namespace trainscope::sidecar
