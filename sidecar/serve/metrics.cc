// Building and serializing the sidecar's metric families; see metrics.h.
#include "serve/metrics.h"

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

std::vector<ClientMetric::Label> TaskLabels(const TaskView& v) {
  return {{std::string(names::kLabelCluster), v.cluster},
          {std::string(names::kLabelRole), v.task.role},
          {std::string(names::kLabelTask), std::to_string(v.task.index)}};
}

// A task's heartbeat latency histogram, from the watcher's counters.
ClientMetric LatencyHistogram(std::vector<ClientMetric::Label> labels, const TaskCounters& c) {
  ClientMetric h;
  h.label = std::move(labels);
  h.histogram.sample_count = c.latency_count;
  h.histogram.sample_sum = c.latency_sum;
  const auto& bounds = LatencyBounds();
  for (size_t b = 0; b < bounds.size() && b < c.latency_buckets.size(); ++b) {
    h.histogram.bucket.push_back({c.latency_buckets[b], bounds[b]});
  }
  h.histogram.bucket.push_back({c.latency_count, std::numeric_limits<double>::infinity()});
  return h;
}

// First-hand facts about this node's tasks; the state is the cluster view's (which may blame a
// ps slower than its peers), the counters the trackers'.
void AddTaskFamilies(const LocalSnapshot& local, const ClusterView& cluster,
                     std::vector<MetricFamily>& out) {
  std::map<TaskRef, TaskState> decided;
  for (const TaskView& v : cluster.tasks) decided[v.task] = v.state;
  auto up = MakeFamily(
      names::kTaskUp,
      "1 when the task is up (answers on time, makes progress); 0 otherwise, done included.",
      MetricType::Gauge);
  auto state = MakeFamily(names::kTaskState, "1 for the task's current state, 0 for the others.",
                          MetricType::Gauge);
  auto transitions = MakeFamily(names::kTaskTransitions, "Times the task entered each state.",
                                MetricType::Counter);
  auto blocked = MakeFamily(names::kTaskBlockedSeconds,
                            "Seconds the task has been waiting on each peer (while blocked).",
                            MetricType::Gauge);
  auto age = MakeFamily(names::kTaskHeartbeatAge,
                        "Seconds since the task's last valid heartbeat answer.", MetricType::Gauge);
  auto restarts = MakeFamily(names::kTaskRestarts, "Restarts of the task (incarnation changes).",
                             MetricType::Counter);
  auto phi = MakeFamily(names::kTaskSuspicion,
                        "Phi-accrual suspicion that the task failed (0 while answers are on time).",
                        MetricType::Gauge);
  auto latency = MakeFamily(names::kTaskHeartbeatLatency,
                            "Heartbeat round-trip latency in seconds.", MetricType::Histogram);
  auto last_latency =
      MakeFamily(names::kTaskHeartbeatLastLatency,
                 "Latest heartbeat round-trip latency in seconds.", MetricType::Gauge);
  auto steps = MakeFamily(names::kTaskSteps, "The task's progress counter (steps or updates).",
                          MetricType::Counter);
  auto step_time = MakeFamily(names::kTaskLastStepSeconds, "Duration of the task's last step.",
                              MetricType::Gauge);
  auto cpu = MakeFamily(names::kTaskCpuSeconds, "CPU seconds the task reports having used.",
                        MetricType::Counter);
  auto rss = MakeFamily(names::kTaskResidentBytes, "Resident memory the task reports, in bytes.",
                        MetricType::Gauge);
  auto threads = MakeFamily(names::kTaskThreads, "Threads the task reports.", MetricType::Gauge);
  auto fds =
      MakeFamily(names::kTaskOpenFds, "Open file descriptors the task reports.", MetricType::Gauge);
  for (size_t i = 0; i < local.views.size(); ++i) {
    const TaskView& v = local.views[i];
    const TaskCounters& c = local.counters[i];
    auto labels = TaskLabels(v);
    const TaskState now = decided.count(v.task) ? decided[v.task] : v.state;
    AddMetric(up, labels).gauge.value = now == TaskState::kUp ? 1 : 0;
    for (int s = 0; s < kNumTaskStates; ++s) {
      auto l = labels;
      l.push_back(
          {std::string(names::kLabelState), std::string(StateName(static_cast<TaskState>(s)))});
      AddMetric(state, l).gauge.value = static_cast<int>(now) == s ? 1 : 0;
      AddMetric(transitions, l).counter.value = static_cast<double>(c.transitions[s]);
    }
    for (const BlockedPeer& b : v.blocked_on) {
      auto l = labels;
      l.push_back({std::string(names::kLabelPeerRole), b.peer.role});
      l.push_back({std::string(names::kLabelPeerTask), std::to_string(b.peer.index)});
      AddMetric(blocked, l).gauge.value = b.seconds;
    }
    AddMetric(restarts, labels).counter.value = static_cast<double>(v.restarts);
    if (v.heartbeat_age_seconds >= 0) {
      AddMetric(age, labels).gauge.value = v.heartbeat_age_seconds;
      AddMetric(phi, labels).gauge.value = v.phi;
      AddMetric(last_latency, labels).gauge.value = v.latency_seconds;
      latency.metric.push_back(LatencyHistogram(labels, c));
      AddMetric(steps, labels).counter.value = static_cast<double>(v.steps);
      AddMetric(step_time, labels).gauge.value = v.last_step_seconds;
      AddMetric(cpu, labels).counter.value = v.cpu_seconds;
      AddMetric(rss, labels).gauge.value = static_cast<double>(v.resident_bytes);
      AddMetric(threads, labels).gauge.value = v.threads;
      AddMetric(fds, labels).gauge.value = v.open_fds;
    }
  }
  for (auto* f : {&up, &state, &transitions, &blocked, &age, &restarts, &phi, &latency,
                  &last_latency, &steps, &step_time, &cpu, &rss, &threads, &fds}) {
    out.push_back(std::move(*f));
  }
}

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

// What only the cluster view tells about this node's tasks and about this node.
void AddClusterFamilies(const LocalSnapshot& local, const ClusterView& cluster,
                        std::vector<MetricFamily>& out) {
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
  for (const TaskView& v : local.views) {
    auto it = by_task.find(v.task);
    const bool cut = it != by_task.end() && !it->second->partitioned_from.empty();
    AddMetric(partitioned, TaskLabels(v)).gauge.value = cut ? 1 : 0;
    if (!cut) continue;
    for (const std::string& peer : it->second->partitioned_from) {
      auto ref = ParseTaskRef(peer);
      if (!ref.ok()) continue;
      auto labels = TaskLabels(v);
      labels.push_back({std::string(names::kLabelPeerRole), ref->role});
      labels.push_back({std::string(names::kLabelPeerTask), std::to_string(ref->index)});
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
}

void AddSidecarFamilies(const LocalSnapshot& local, const SidecarStats& stats,
                        std::vector<MetricFamily>& out) {
  telemetry::AddGauge(&out, names::kSidecarWatchedTasks, "Tasks this sidecar watches first-hand.",
                      static_cast<double>(local.views.size()));
  telemetry::AddCounter(&out, names::kSidecarPauses,
                        "Times the sidecar's own loop was paused and it re-learned.",
                        static_cast<double>(stats.pauses));
  telemetry::AddCounter(&out, names::kSidecarPeerErrors,
                        "Failed or nonsensical exchanges with peer sidecars.",
                        static_cast<double>(stats.exchange.errors));
  telemetry::AddGauge(&out, names::kSidecarPeers, "Other sidecars of the cluster this one knows.",
                      static_cast<double>(stats.members.size()));
  auto members = MakeFamily(names::kSidecarMembers, "Other sidecars of the cluster, by status.",
                            MetricType::Gauge);
  for (MemberStatus s :
       {MemberStatus::kAlive, MemberStatus::kSuspect, MemberStatus::kSilent, MemberStatus::kLeft}) {
    const auto n = std::count_if(stats.members.begin(), stats.members.end(),
                                 [s](const Member& m) { return m.status == s; });
    AddMetric(members, {{std::string(names::kLabelStatus), std::string(MemberStatusName(s))}})
        .gauge.value = static_cast<double>(n);
  }
  out.push_back(std::move(members));
  const ExchangeStats& x = stats.exchange;
  auto messages =
      MakeFamily(names::kSidecarExchangeMessages,
                 "Exchange messages with other sidecars, by direction.", MetricType::Counter);
  auto bytes =
      MakeFamily(names::kSidecarExchangeBytes,
                 "Exchange payload bytes with other sidecars, by direction.", MetricType::Counter);
  for (auto [direction, n, b] :
       {std::tuple{names::kDirectionSent, x.messages_sent, x.bytes_sent},
        std::tuple{names::kDirectionReceived, x.messages_received, x.bytes_received}}) {
    std::vector<ClientMetric::Label> l = {
        {std::string(names::kLabelDirection), std::string(direction)}};
    AddMetric(messages, l).counter.value = static_cast<double>(n);
    AddMetric(bytes, l).counter.value = static_cast<double>(b);
  }
  out.push_back(std::move(messages));
  out.push_back(std::move(bytes));
  telemetry::AddCounter(
      &out, names::kSidecarRecordsLearned,
      "Newer node records learned from other sidecars (changes somewhere in the cluster).",
      static_cast<double>(x.records_learned));
  telemetry::AddCounter(&out, names::kSidecarRecordsRefused,
                        "Node records from other sidecars that made no sense.",
                        static_cast<double>(x.records_refused));
}

void AddTraceFamilies(const SidecarStats& stats, std::vector<MetricFamily>& out) {
  telemetry::AddCounter(&out, names::kTracesSpansReceived,
                        "Spans received over OTLP (TraceService/Export).",
                        static_cast<double>(stats.receiver.spans_received));
  telemetry::AddGauge(&out, names::kTracesSpansKept,
                      "Spans held now (pending a join, or of slow or failed requests).",
                      static_cast<double>(stats.store.spans_kept));
  telemetry::AddGauge(&out, names::kTracesKeptBytes, "Estimated bytes of the spans held now.",
                      static_cast<double>(stats.store.bytes_kept));
  auto dropped = MakeFamily(names::kTracesSpansDropped,
                            "Spans not kept, or forgotten early, by reason.", MetricType::Counter);
  for (auto [reason, value] : {std::pair{names::kReasonInvalid, stats.receiver.spans_invalid},
                               std::pair{names::kReasonEvicted, stats.store.dropped_evicted},
                               std::pair{names::kReasonTraceFull, stats.store.dropped_trace_full},
                               std::pair{names::kReasonDuplicate, stats.store.dropped_duplicate}}) {
    AddMetric(dropped, {{std::string(names::kLabelReason), std::string(reason)}}).counter.value =
        static_cast<double>(value);
  }
  out.push_back(std::move(dropped));
  // Always exported (0 without --otlp_upstream), so a rule on them need not test presence.
  telemetry::AddCounter(&out, names::kTracesForwardedSpans, "Spans forwarded to the OTLP upstream.",
                        static_cast<double>(stats.forwarder.forwarded_spans));
  telemetry::AddCounter(&out, names::kTracesForwardDroppedSpans,
                        "Spans not forwarded: the queue was full or the upstream refused them.",
                        static_cast<double>(stats.forwarder.dropped_spans));
  telemetry::AddCounter(&out, names::kTracesForwardFailures,
                        "Failed Export calls to the OTLP upstream.",
                        static_cast<double>(stats.forwarder.failures));
}

// Always exported (0 without --alertmanager_url), so a rule on them need not test presence.
void AddAlertFamilies(const SidecarStats& stats, std::vector<MetricFamily>& out) {
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

void AddSnapshotFamilies(const SidecarStats& stats, std::vector<MetricFamily>& out) {
  telemetry::AddCounter(
      &out, names::kSidecarSnapshots,
      "Snapshots taken of this node's tasks' threads (stuck tasks, and on demand).",
      static_cast<double>(stats.keeper.captures));
  telemetry::AddCounter(&out, names::kSidecarSnapshotFailures,
                        "Snapshots that could not be taken (the process was gone).",
                        static_cast<double>(stats.keeper.failures));
  telemetry::AddGauge(&out, names::kSidecarSnapshotBytes, "Bytes of the snapshots kept now.",
                      static_cast<double>(stats.keeper.bytes_kept));
  telemetry::AddGauge(&out, names::kSidecarSnapshotPause,
                      "The longest one thread was held stopped in the last snapshot.",
                      stats.keeper.last_pause_ms / 1000);
}

}  // namespace

std::string RenderMetrics(const LocalSnapshot& local, const SidecarStats& stats,
                          const ClusterView& cluster) {
  std::vector<MetricFamily> out;
  AddTaskFamilies(local, cluster, out);
  AddClusterFamilies(local, cluster, out);
  AddSidecarFamilies(local, stats, out);
  AddTraceFamilies(stats, out);
  AddAlertFamilies(stats, out);
  AddSnapshotFamilies(stats, out);
  telemetry::AddProcessFamilies(&out);  // The one process collector, shared with the runtime.
  std::ostringstream text;
  prometheus::TextSerializer().Serialize(text, out);
  return text.str();
}

}  // namespace trainscope::sidecar
