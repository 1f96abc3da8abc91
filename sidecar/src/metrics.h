#pragma once
// Prometheus exposition of the sidecar: per-task families built at scrape time from the
// trackers' published views (so series of blocked peers vanish with the wait), and the
// sidecar's own process_* metrics. Private to the sidecar library.

#include <cstdint>
#include <string>
#include <vector>

#include "trainscope/sidecar/task_tracker.h"
#include "trainscope/sidecar/task_view.h"

namespace trainscope::sidecar {

struct SidecarStats {
  int64_t pauses = 0;
  int64_t peer_errors = 0;
  int peers = 0;
  // Traces (see names.h, kTraces*).
  int64_t spans_received = 0;
  int64_t spans_kept = 0;
  int64_t bytes_kept = 0;
  int64_t dropped_invalid = 0;
  int64_t dropped_evicted = 0;
  int64_t dropped_trace_full = 0;
  int64_t dropped_duplicate = 0;
  bool forwarding = false;  // An upstream is configured.
  int64_t forwarded_spans = 0;
  int64_t forward_dropped_spans = 0;
  int64_t forward_failures = 0;
};

// The text exposition format (version 0.0.4) of everything. `views` and `counters` are parallel
// (this node's tasks, first-hand); `cluster` is the merged view of the whole cluster, for what
// only it can tell (partitions).
std::string RenderMetrics(const std::vector<TaskView>& views,
                          const std::vector<TaskCounters>& counters, const SidecarStats& stats,
                          const std::vector<TaskView>& cluster);

}  // namespace trainscope::sidecar
