#pragma once
// Prometheus exposition of the sidecar: per-task families built at scrape time from the
// watcher's published views (so series of blocked peers vanish with the wait), what the cluster
// view says of this node's tasks (partitions) and of this node (cut off), the exchange's
// counters, and the sidecar's own process_* metrics. Series grow with this node's tasks, never
// with the cluster. Private to the sidecar library.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "detect/task_watcher.h"
#include "gossip/exchange_core.h"
#include "gossip/membership.h"
#include "serve/cluster_view.h"
#include "trainscope/sidecar/task_tracker.h"
#include "trainscope/sidecar/task_view.h"

namespace trainscope::sidecar {

struct SidecarStats {
  int64_t pauses = 0;
  int64_t peer_errors = 0;
  int peers = 0;
  ExchangeStats exchange;
  std::map<MemberStatus, int> members_by_status;
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
  // Alerts posted to Alertmanager (see names.h, kSidecarAlerts*).
  int64_t alerts_sent = 0;
  int64_t alerts_failed = 0;
  int64_t alerts_dropped = 0;
  int alerts_firing = 0;
  // Snapshots of stuck tasks (see names.h, kSidecarSnapshot*).
  int64_t snapshots = 0;
  int64_t snapshot_failures = 0;
  int64_t snapshot_bytes = 0;
  double snapshot_pause_s = 0;
};

// The text exposition format (version 0.0.4) of everything: `local` is this node's tasks,
// first-hand; `cluster` the whole cluster's view, for what only it can tell (partitions, a node
// cut off).
std::string RenderMetrics(const LocalSnapshot& local, const SidecarStats& stats,
                          const ClusterView& cluster);

}  // namespace trainscope::sidecar
