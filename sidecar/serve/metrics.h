#pragma once
// Prometheus exposition of the sidecar, built at scrape time: each part's own families (detect:
// per-task families from the watcher's published views, so series of blocked peers vanish with
// the wait; gossip: the exchange; traces: spans), what the cluster view says of this node's
// tasks (partitions) and of this node (cut off), the notifier's alerts, and the process_*
// metrics of telemetry's one process collector. Series grow with this node's tasks, never
// with the cluster. Private to the sidecar library.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "detect/stack_keeper.h"
#include "detect/task_watcher.h"
#include "gossip/exchange_core.h"
#include "gossip/membership.h"
#include "serve/alert_notifier.h"
#include "serve/cluster_view.h"
#include "traces/trace_stats.h"
#include "trainscope/sidecar/task_tracker.h"
#include "trainscope/sidecar/task_view.h"
#include "trainscope/sidecar/trace_store.h"

namespace trainscope::sidecar {

// Each part's own counters, as it gives them (zeros for a part not running: no exchange, no
// upstream, no Alertmanager), so that a rule on them need not test presence.
struct SidecarStats {
  int64_t pauses = 0;  // The watcher's.
  ExchangeStats exchange;
  std::vector<Member> members;  // The exchange's view of the other sidecars.
  ReceiverStats receiver;
  TraceStoreStats store;
  ForwarderStats forwarder;
  NotifierStats alerts;
  KeeperStats keeper;
  std::map<std::string, int64_t> api_refused;  // ApiAuth::refused(): by reason.
};

// The text exposition format (version 0.0.4) of everything: `local` is this node's tasks,
// first-hand; `cluster` the whole cluster's view, for what only it can tell (partitions, a node
// cut off).
std::string RenderMetrics(const LocalSnapshot& local, const SidecarStats& stats,
                          const ClusterView& cluster);

}  // namespace trainscope::sidecar
