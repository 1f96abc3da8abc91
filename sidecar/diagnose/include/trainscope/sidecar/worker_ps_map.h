#pragma once
// The worker x ps map: every edge from a worker (or chief) to a ps, with its recent latency, and
// the slow links read from it. The graph is bipartite, so a slow link is an edge far above the
// other edges of its row (the same worker's calls to the other ps) and of its column (the other
// workers' calls to the same ps), that has also been well above its own past for a while
// (EdgeWatch). A slow ps raises a whole column and a slow worker a whole row: neither is a link.
// Pure functions over values.

#include <map>
#include <string>
#include <vector>

#include "trainscope/common/cluster_spec.h"
#include "trainscope/sidecar/task_view.h"

namespace trainscope::sidecar {

struct MapEdge {
  TaskRef from;  // A worker or the chief.
  TaskRef to;    // A ps.
  double recent_seconds = 0;
  double usual_seconds = 0;  // 0 while its watcher learns it.
  double raised_seconds = 0;
  bool slow_link = false;
};

struct SlowLink {
  TaskRef from, to;
  double recent_seconds = 0;
  double usual_seconds = 0;
  double row_median_seconds = 0;     // `from`'s calls to the other ps.
  double column_median_seconds = 0;  // The other callers' calls to `to`.
  double raised_seconds = 0;
};

struct WorkerPsMap {
  std::vector<MapEdge> edges;  // By (from, to).
  std::vector<SlowLink> slow_links;
};

struct LinkRules {
  double hold_s = kHeldRaiseS;  // Raised against its own past this long.
  double factor = 4;            // Above factor x the row's and the column's medians,
  double min_gap_s = 0.02;      // and above them by this much.
};

// The map of every caller-to-ps edge the views report (first-hand views carry every peer;
// others, only the ones failing or slow), and its slow links.
WorkerPsMap BuildWorkerPsMap(const std::map<TaskRef, TaskView>& tasks, const LinkRules& rules = {});

// For a big cluster: the edges among the `rows` callers and the `columns` ps whose slowest edge
// is slowest (all of them when there are no more).
std::vector<MapEdge> SampleMap(const std::vector<MapEdge>& edges, size_t rows, size_t columns);

// The reason a slow link adds to its caller's view.
std::string SlowLinkWords(const SlowLink& link);

}  // namespace trainscope::sidecar
