#pragma once
// Prometheus exposition of the sidecar, built at scrape time: the observers' own families as the
// wiring hands them (detect: per-task families from the watcher's published views, so series of
// blocked peers vanish with the wait; gossip: the exchange; traces: spans), then what the cluster
// view says of this node's tasks (partitions, slow edges) and of this node (cut off), the
// notifier's alerts, the API's refusals, and the process_* metrics of telemetry's one process
// collector. Series grow with this node's tasks, never with the cluster. Private to the sidecar
// library.

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "prometheus/metric_family.h"
#include "trainscope/sidecar/alert_notifier.h"
#include "trainscope/sidecar/cluster_view.h"
#include "trainscope/sidecar/incidents.h"
#include "trainscope/sidecar/task_view.h"

namespace trainscope::sidecar {

// What only serving counts (zeros without an Alertmanager), so that a rule on them need not test
// presence.
struct ServeStats {
  NotifierStats alerts;
  // The incidents and the ledger as of the wiring's last tick; null: none yet.
  std::shared_ptr<const IncidentsNow> incidents;
  std::map<std::string, int64_t> api_refused;  // ApiAuth::refused(): by reason.
  // With --state_dir: whether the state store takes writes now; nullopt without a store.
  std::optional<bool> store_ok;
};

// The text exposition format (version 0.0.4) of everything: `observed` the observers' families,
// `local` this node's tasks, first-hand; `cluster` the whole cluster's view, for what only it
// can tell (partitions, a node cut off).
std::string RenderMetrics(std::vector<prometheus::MetricFamily> observed,
                          const std::vector<TaskView>& local, const ServeStats& stats,
                          const ClusterView& cluster);

}  // namespace trainscope::sidecar
