// Composing and serializing the sidecar's metric families; see metrics.h.
#include "trainscope/sidecar/metrics.h"

#include <algorithm>
#include <sstream>

#include "absl/strings/match.h"
#include "prometheus/metric_family.h"
#include "prometheus/text_serializer.h"
#include "trainscope/common/proc.h"
#include "trainscope/sidecar/names.h"
#include "trainscope/telemetry/metrics.h"

namespace trainscope::sidecar {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;
using telemetry::AddMetric;
using telemetry::MakeFamily;

// Other nodes this sidecar sees cut off, one series each while it lasts: the alert on a cut-off
// node names the node once, not each of its tasks (the view makes those unreachable, never
// partitioned). A node whose sidecar refuses connections is "down", not silent: not cut off.
void AddSilentNodes(const ClusterView& cluster, std::vector<MetricFamily>& out) {
  auto silent = MakeFamily(names::kNodeSilent,
                           "1 for each other node this sidecar sees silent: it answers no probe, "
                           "directly or through other nodes (series exist only while it lasts).",
                           MetricType::Gauge);
  auto tasks =
      MakeFamily(names::kTaskNodeSilent,
                 "1 for each task of a node this sidecar sees silent, with its node (series "
                 "exist only while it lasts).",
                 MetricType::Gauge);
  for (const NodeInfo& n : cluster.nodes) {
    if (n.self || n.status != MemberStatusName(MemberStatus::kSilent)) continue;
    const ClientMetric::Label cluster_label{std::string(names::kLabelCluster), cluster.cluster};
    const ClientMetric::Label node_label{std::string(names::kLabelNode), n.id};
    AddMetric(silent, {cluster_label, node_label}).gauge.value = 1;
    for (const TaskRef& t : n.tasks) {
      AddMetric(tasks, {cluster_label,
                        {std::string(names::kLabelRole), t.role},
                        {std::string(names::kLabelTask), std::to_string(t.index)},
                        node_label})
          .gauge.value = 1;
    }
  }
  out.push_back(std::move(silent));
  out.push_back(std::move(tasks));
}

// The worker x ps map, for this node's callers: a bounded top-K of their slowest edges, and
// their slow links. Never a series per edge.
void AddWorkerPsMap(const std::vector<TaskView>& local, const ClusterView& cluster,
                    std::vector<MetricFamily>& out) {
  constexpr size_t kTopEdges = 5;
  std::map<TaskRef, const TaskView*> mine;
  for (const TaskView& v : local) mine[v.task] = &v;
  std::vector<const MapEdge*> edges;
  for (const MapEdge& e : cluster.worker_ps.edges) {
    if (mine.contains(e.from)) edges.push_back(&e);
  }
  std::sort(edges.begin(), edges.end(), [](const MapEdge* a, const MapEdge* b) {
    return a->recent_seconds > b->recent_seconds;
  });
  if (edges.size() > kTopEdges) edges.resize(kTopEdges);
  auto latency = MakeFamily(names::kTaskPeerLatency,
                            "Recent latency (10 s median) of the slowest edges from this node's "
                            "workers to a ps: at most 5 series.",
                            MetricType::Gauge);
  auto slow = MakeFamily(names::kTaskSlowLink,
                         "1 for each slow link from this node's workers to a ps (series exist "
                         "only while it lasts).",
                         MetricType::Gauge);
  auto labels = [&](const TaskRef& from, const TaskRef& to) {
    auto l = telemetry::TaskLabels(mine.at(from)->cluster, from);
    l.push_back({std::string(names::kLabelPeerRole), to.role});
    l.push_back({std::string(names::kLabelPeerTask), std::to_string(to.index)});
    return l;
  };
  for (const MapEdge* e : edges)
    AddMetric(latency, labels(e->from, e->to)).gauge.value = e->recent_seconds;
  for (const SlowLink& l : cluster.worker_ps.slow_links) {
    if (mine.contains(l.from)) AddMetric(slow, labels(l.from, l.to)).gauge.value = 1;
  }
  out.push_back(std::move(latency));
  out.push_back(std::move(slow));
}

// What only the cluster view tells about this node's tasks and about this node.
void AddClusterFamilies(const std::vector<TaskView>& local, const ClusterView& cluster,
                        const IncidentsNow* incidents, std::vector<MetricFamily>& out) {
  std::map<TaskRef, const TaskView*> by_task;
  for (const TaskView& v : cluster.tasks) by_task[v.task] = &v;
  auto partitioned = MakeFamily(names::kTaskPartitioned,
                                "1 while the task and a peer are both alive but cannot reach each "
                                "other (a partition); 0 otherwise. This node's tasks only.",
                                MetricType::Gauge);
  auto pairs = MakeFamily(names::kTaskPartition,
                          "1 for each peer this node's task is partitioned from (series exist only "
                          "while the partition lasts).",
                          MetricType::Gauge);
  for (const TaskView& v : local) {
    auto it = by_task.find(v.task);
    const bool cut = it != by_task.end() && !it->second->partitioned_from.empty();
    AddMetric(partitioned, telemetry::TaskLabels(v.cluster, v.task)).gauge.value = cut ? 1 : 0;
    if (!cut) continue;
    for (const std::string& peer : it->second->partitioned_from) {
      auto ref = ParseTaskRef(peer);
      if (!ref.ok()) continue;
      auto labels = telemetry::TaskLabels(v.cluster, v.task);
      labels.push_back({std::string(names::kLabelPeerRole), ref->role});
      labels.push_back({std::string(names::kLabelPeerTask), std::to_string(ref->index)});
      // The partition's incident, as the sidecar's own alert names it: the rule keeps it.
      if (const pb::Incident* in =
              incidents ? OpenLinkIncident(*incidents, cluster, v.task, *ref) : nullptr) {
        labels.push_back({std::string(names::kLabelIncident), in->id()});
      }
      AddMetric(pairs, labels).gauge.value = 1;
    }
  }
  out.push_back(std::move(partitioned));
  out.push_back(std::move(pairs));
  telemetry::AddGauge(
      &out, names::kSidecarIsolated,
      "1 while this node is cut off from every other node (its sidecar reaches none of them).",
      cluster.isolated_since ? 1 : 0);
  auto info =
      MakeFamily(names::kSidecarInfo,
                 "1; this sidecar's cluster, node id (host:port of its exchange) and host name.",
                 MetricType::Gauge);
  AddMetric(info, {{std::string(names::kLabelCluster), cluster.cluster},
                   {std::string(names::kLabelNode), cluster.self},
                   {std::string(names::kLabelHostname), cluster.self_hostname}})
      .gauge.value = 1;
  out.push_back(std::move(info));
  AddSilentNodes(cluster, out);
  AddWorkerPsMap(local, cluster, out);
}

// Always exported (0 without --alertmanager_url), so a rule on them need not test presence.
void AddAlertFamilies(const ServeStats& stats, std::vector<MetricFamily>& out) {
  auto sent = MakeFamily(names::kSidecarAlertsSent,
                         "Alerts (firing or resolved) posted to Alertmanager, by status: ok, or "
                         "failed (each retry counts again).",
                         MetricType::Counter);
  AddMetric(sent, {{std::string(names::kLabelStatus), "ok"}}).counter.value =
      static_cast<double>(stats.alerts.sent);
  AddMetric(sent, {{std::string(names::kLabelStatus), "failed"}}).counter.value =
      static_cast<double>(stats.alerts.failed);
  out.push_back(std::move(sent));
  telemetry::AddCounter(&out, names::kSidecarAlertsDropped,
                        "Alerts not posted: the queue of an unreachable Alertmanager was full.",
                        static_cast<double>(stats.alerts.dropped));
  telemetry::AddGauge(&out, names::kSidecarAlertsFiring,
                      "First-hand alerts this sidecar says are firing now.", stats.alerts.firing);
}

// Requests refused for want of a credential, over HTTP and gRPC, by reason (every reason
// present).
void AddApiFamilies(const ServeStats& stats, std::vector<MetricFamily>& out) {
  auto refused = MakeFamily(
      names::kSidecarApiRefused,
      "Requests refused for want of a credential, over HTTP and gRPC, first-hand or relayed, by "
      "reason: no_credential and bad_token (401), no_token_file (403: no --api_token_file set), "
      "stale_credential and replayed_credential (a relayed operator's proof), otlp_not_local "
      "and report_not_local (spans, and hooked programs' reports, from outside this node "
      "without mutual TLS).",
      MetricType::Counter);
  for (const auto& [reason, n] : stats.api_refused) {
    AddMetric(refused, {{std::string(names::kLabelReason), reason}}).counter.value =
        static_cast<double>(n);
  }
  out.push_back(std::move(refused));
}

// The ledger of this node's workers (each worker's seconds counted by its own node's sidecar
// only, so sums over sidecars count each once), the seconds lost by incident kind and the
// incidents open, as this node sees the cluster.
void AddLedgerFamilies(const std::vector<TaskView>& local, const IncidentsNow* now,
                       std::vector<MetricFamily>& out) {
  auto seconds = MakeFamily(names::kTrainingSeconds,
                            "Seconds of each worker and chief of this node, by outcome: "
                            "productive, waiting (held by an incident), down, redone, idle.",
                            MetricType::Counter);
  auto lost = MakeFamily(names::kIncidentLostSeconds,
                         "Training seconds lost to incidents (waiting and down), by the "
                         "incident's kind, over the cluster as this sidecar sees it.",
                         MetricType::Counter);
  auto open = MakeFamily(names::kIncidentsOpen,
                         "Incidents open now, one per root cause, as this sidecar sees it.",
                         MetricType::Gauge);
  auto held = MakeFamily(names::kTaskIncident,
                         "Per task of this node that is the cause of an open incident: its id "
                         "(label incident); the value is when it started, Unix seconds.",
                         MetricType::Gauge);
  if (now != nullptr) {
    const std::string& cluster = now->goodput.cluster();
    for (const TaskView& v : local) {
      if (const pb::Incident* in = OpenIncidentOf(*now, v.task.ShortName())) {
        auto labels = telemetry::TaskLabels(cluster, v.task);
        labels.push_back({std::string(names::kLabelIncident), in->id()});
        AddMetric(held, labels).gauge.value = in->started();
      }
    }
    for (const TaskView& v : local) {
      auto it = now->seconds.find(v.task);
      if (it == now->seconds.end()) continue;
      for (int i = 0; i < kNumOutcomes; ++i) {
        auto labels = telemetry::TaskLabels(cluster, v.task);
        labels.push_back(
            {std::string(names::kLabelOutcome), std::string(OutcomeName(static_cast<Outcome>(i)))});
        AddMetric(seconds, labels).counter.value = it->second.seconds[i];
      }
    }
    for (const auto& [kind, s] : now->lost_by_kind) {
      AddMetric(lost, {{std::string(names::kLabelCluster), cluster},
                       {std::string(names::kLabelKind), kind}})
          .counter.value = s;
    }
    AddMetric(open, {{std::string(names::kLabelCluster), cluster}}).gauge.value = now->open;
  }
  out.push_back(std::move(seconds));
  out.push_back(std::move(lost));
  out.push_back(std::move(open));
  out.push_back(std::move(held));
}

// With --state_dir: 1 while the store takes writes, 0 while they fail (a full disk).
void AddStoreFamily(const ServeStats& stats, const std::string& cluster,
                    std::vector<MetricFamily>& out) {
  if (!stats.store_ok) return;
  auto ok = MakeFamily(names::kStateStoreOk,
                       "1 while the state store (--state_dir) takes writes, 0 while they fail "
                       "(a full disk): incidents then stay in memory until it takes them again.",
                       MetricType::Gauge);
  AddMetric(ok, {{std::string(names::kLabelCluster), cluster}}).gauge.value =
      *stats.store_ok ? 1 : 0;
  out.push_back(std::move(ok));
}

}  // namespace

std::string RenderMetrics(std::vector<MetricFamily> observed, const std::vector<TaskView>& local,
                          const ServeStats& stats, const ClusterView& cluster) {
  std::vector<MetricFamily> out = std::move(observed);
  AddClusterFamilies(local, cluster, stats.incidents.get(), out);
  AddAlertFamilies(stats, out);
  AddApiFamilies(stats, out);
  AddLedgerFamilies(local, stats.incidents.get(), out);
  AddStoreFamily(stats, cluster.cluster, out);
  telemetry::AddProcessFamilies(&out);  // The one process collector, shared with the runtime.
  std::ostringstream text;
  prometheus::TextSerializer().Serialize(text, out);
  return text.str();
}

}  // namespace trainscope::sidecar
