// Building and serializing the sidecar's metric families; see metrics.h.
#include "metrics.h"

#include <sstream>

#include "absl/strings/match.h"
#include "prometheus/metric_family.h"
#include "prometheus/text_serializer.h"
#include "trainscope/common/proc.h"
#include "trainscope/sidecar/names.h"

namespace trainscope::sidecar {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

MetricFamily Family(std::string_view name, std::string help, MetricType type) {
  MetricFamily f;
  f.name = std::string(name);
  f.help = std::move(help);
  f.type = type;
  return f;
}

std::vector<ClientMetric::Label> TaskLabels(const TaskView& v) {
  return {{std::string(names::kLabelCluster), v.cluster},
          {std::string(names::kLabelRole), v.task.role},
          {std::string(names::kLabelTask), std::to_string(v.task.index)}};
}

void AddGauge(MetricFamily& f, std::vector<ClientMetric::Label> labels, double value) {
  ClientMetric m;
  m.label = std::move(labels);
  m.gauge.value = value;
  f.metric.push_back(std::move(m));
}

void AddCounter(MetricFamily& f, std::vector<ClientMetric::Label> labels, double value) {
  ClientMetric m;
  m.label = std::move(labels);
  m.counter.value = value;
  f.metric.push_back(std::move(m));
}

void AddProcessMetrics(std::vector<MetricFamily>& out) {
  const ResourceUsage u = ReadResourceUsage();
  const double cpu = u.cpu_seconds;
  const double rss = static_cast<double>(u.resident_bytes);
  const double vsize = static_cast<double>(u.virtual_bytes);
  const double threads = u.threads;
  auto cpu_f = Family(names::kProcessCpuSeconds, "Total user and system CPU time spent in seconds.",
                      MetricType::Counter);
  AddCounter(cpu_f, {}, cpu);
  out.push_back(std::move(cpu_f));
  auto rss_f =
      Family(names::kProcessResidentBytes, "Resident memory size in bytes.", MetricType::Gauge);
  AddGauge(rss_f, {}, rss);
  out.push_back(std::move(rss_f));
  auto vm_f =
      Family(names::kProcessVirtualBytes, "Virtual memory size in bytes.", MetricType::Gauge);
  AddGauge(vm_f, {}, vsize);
  out.push_back(std::move(vm_f));
  auto fds_f =
      Family(names::kProcessOpenFds, "Number of open file descriptors.", MetricType::Gauge);
  AddGauge(fds_f, {}, u.open_fds);
  out.push_back(std::move(fds_f));
  auto max_f =
      Family(names::kProcessMaxFds, "Maximum number of open file descriptors.", MetricType::Gauge);
  AddGauge(max_f, {}, static_cast<double>(u.max_fds));
  out.push_back(std::move(max_f));
  auto start_f =
      Family(names::kProcessStartTime, "Start time of the process since unix epoch in seconds.",
             MetricType::Gauge);
  AddGauge(start_f, {}, u.start_time_unix);
  out.push_back(std::move(start_f));
  auto thr_f =
      Family(names::kProcessThreads, "Number of OS threads in the process.", MetricType::Gauge);
  AddGauge(thr_f, {}, threads);
  out.push_back(std::move(thr_f));
}

}  // namespace

std::string RenderMetrics(const std::vector<TaskView>& views,
                          const std::vector<TaskCounters>& counters, const SidecarStats& stats,
                          const std::vector<TaskView>& cluster) {
  std::vector<MetricFamily> out;
  auto up =
      Family(names::kTaskUp,
             "1 when the task is up (answers on time, makes progress); 0 otherwise, done included.",
             MetricType::Gauge);
  auto state = Family(names::kTaskState, "1 for the task's current state, 0 for the others.",
                      MetricType::Gauge);
  auto transitions =
      Family(names::kTaskTransitions, "Times the task entered each state.", MetricType::Counter);
  auto blocked =
      Family(names::kTaskBlockedSeconds,
             "Seconds the task has been waiting on each peer (while blocked).", MetricType::Gauge);
  auto age = Family(names::kTaskHeartbeatAge,
                    "Seconds since the task's last valid heartbeat answer.", MetricType::Gauge);
  auto restarts = Family(names::kTaskRestarts, "Restarts of the task (incarnation changes).",
                         MetricType::Counter);
  auto phi = Family(names::kTaskSuspicion,
                    "Phi-accrual suspicion that the task failed (0 while answers are on time).",
                    MetricType::Gauge);
  auto latency = Family(names::kTaskHeartbeatLatency, "Heartbeat round-trip latency in seconds.",
                        MetricType::Histogram);
  auto last_latency = Family(names::kTaskHeartbeatLastLatency,
                             "Latest heartbeat round-trip latency in seconds.", MetricType::Gauge);
  auto steps = Family(names::kTaskSteps, "The task's progress counter (steps or updates).",
                      MetricType::Counter);
  auto step_time =
      Family(names::kTaskLastStepSeconds, "Duration of the task's last step.", MetricType::Gauge);
  auto cpu = Family(names::kTaskCpuSeconds, "CPU seconds the task reports having used.",
                    MetricType::Counter);
  auto rss = Family(names::kTaskResidentBytes, "Resident memory the task reports, in bytes.",
                    MetricType::Gauge);
  auto threads = Family(names::kTaskThreads, "Threads the task reports.", MetricType::Gauge);
  auto fds =
      Family(names::kTaskOpenFds, "Open file descriptors the task reports.", MetricType::Gauge);
  for (size_t i = 0; i < views.size(); ++i) {
    const TaskView& v = views[i];
    const TaskCounters& c = counters[i];
    auto labels = TaskLabels(v);
    AddGauge(up, labels, v.state == TaskState::kUp ? 1 : 0);
    for (int s = 0; s < kNumTaskStates; ++s) {
      auto l = labels;
      l.push_back(
          {std::string(names::kLabelState), std::string(StateName(static_cast<TaskState>(s)))});
      AddGauge(state, l, static_cast<int>(v.state) == s ? 1 : 0);
      AddCounter(transitions, l, static_cast<double>(c.transitions[s]));
    }
    for (const BlockedPeer& b : v.blocked_on) {
      auto l = labels;
      l.push_back({std::string(names::kLabelPeerRole), b.peer.role});
      l.push_back({std::string(names::kLabelPeerTask), std::to_string(b.peer.index)});
      AddGauge(blocked, l, b.seconds);
    }
    AddCounter(restarts, labels, static_cast<double>(v.restarts));
    if (v.heartbeat_age_seconds >= 0) {
      AddGauge(age, labels, v.heartbeat_age_seconds);
      AddGauge(phi, labels, v.phi);
      AddGauge(last_latency, labels, v.latency_seconds);
      ClientMetric h;
      h.label = labels;
      h.histogram.sample_count = c.latency_count;
      h.histogram.sample_sum = c.latency_sum;
      const auto& bounds = LatencyBounds();
      for (size_t b = 0; b < bounds.size() && b < c.latency_buckets.size(); ++b) {
        h.histogram.bucket.push_back({c.latency_buckets[b], bounds[b]});
      }
      h.histogram.bucket.push_back({c.latency_count, std::numeric_limits<double>::infinity()});
      latency.metric.push_back(std::move(h));
      AddCounter(steps, labels, static_cast<double>(v.steps));
      AddGauge(step_time, labels, v.last_step_seconds);
      AddCounter(cpu, labels, v.cpu_seconds);
      AddGauge(rss, labels, static_cast<double>(v.resident_bytes));
      AddGauge(threads, labels, v.threads);
      AddGauge(fds, labels, v.open_fds);
    }
  }
  auto partitioned = Family(names::kTaskPartitioned,
                            "1 while the task answers its own sidecar but other tasks cannot "
                            "reach it (a partition); 0 otherwise.",
                            MetricType::Gauge);
  for (const TaskView& v : cluster) {
    AddGauge(partitioned, TaskLabels(v), absl::StartsWith(v.reason, "partition:") ? 1 : 0);
  }
  for (auto* f : {&up, &state, &transitions, &blocked, &age, &restarts, &phi, &latency,
                  &last_latency, &steps, &step_time, &cpu, &rss, &threads, &fds, &partitioned}) {
    out.push_back(std::move(*f));
  }
  auto watched = Family(names::kSidecarWatchedTasks, "Tasks this sidecar watches first-hand.",
                        MetricType::Gauge);
  AddGauge(watched, {}, static_cast<double>(views.size()));
  out.push_back(std::move(watched));
  auto pauses =
      Family(names::kSidecarPauses, "Times the sidecar's own loop was paused and it re-learned.",
             MetricType::Counter);
  AddCounter(pauses, {}, static_cast<double>(stats.pauses));
  out.push_back(std::move(pauses));
  auto peer_errors =
      Family(names::kSidecarPeerErrors, "Failed or nonsensical answers from peer sidecars.",
             MetricType::Counter);
  AddCounter(peer_errors, {}, static_cast<double>(stats.peer_errors));
  out.push_back(std::move(peer_errors));
  auto peers =
      Family(names::kSidecarPeers, "Peer sidecars asked for their views.", MetricType::Gauge);
  AddGauge(peers, {}, stats.peers);
  out.push_back(std::move(peers));
  auto received = Family(names::kTracesSpansReceived,
                         "Spans received over OTLP (TraceService/Export).", MetricType::Counter);
  AddCounter(received, {}, static_cast<double>(stats.spans_received));
  out.push_back(std::move(received));
  auto kept =
      Family(names::kTracesSpansKept,
             "Spans held now (pending a join, or of slow or failed requests).", MetricType::Gauge);
  AddGauge(kept, {}, static_cast<double>(stats.spans_kept));
  out.push_back(std::move(kept));
  auto kept_bytes =
      Family(names::kTracesKeptBytes, "Estimated bytes of the spans held now.", MetricType::Gauge);
  AddGauge(kept_bytes, {}, static_cast<double>(stats.bytes_kept));
  out.push_back(std::move(kept_bytes));
  auto dropped = Family(names::kTracesSpansDropped,
                        "Spans not kept, or forgotten early, by reason.", MetricType::Counter);
  for (auto [reason, value] : {std::pair{names::kReasonInvalid, stats.dropped_invalid},
                               std::pair{names::kReasonEvicted, stats.dropped_evicted},
                               std::pair{names::kReasonTraceFull, stats.dropped_trace_full},
                               std::pair{names::kReasonDuplicate, stats.dropped_duplicate}}) {
    AddCounter(dropped, {{std::string(names::kLabelReason), std::string(reason)}},
               static_cast<double>(value));
  }
  out.push_back(std::move(dropped));
  {  // Always exported (0 without --otlp_upstream), so a rule on them need not test presence.
    auto fwd = Family(names::kTracesForwardedSpans, "Spans forwarded to the OTLP upstream.",
                      MetricType::Counter);
    AddCounter(fwd, {}, static_cast<double>(stats.forwarded_spans));
    out.push_back(std::move(fwd));
    auto fwd_dropped =
        Family(names::kTracesForwardDroppedSpans,
               "Spans not forwarded: the queue was full or the upstream refused them.",
               MetricType::Counter);
    AddCounter(fwd_dropped, {}, static_cast<double>(stats.forward_dropped_spans));
    out.push_back(std::move(fwd_dropped));
    auto fwd_fail = Family(names::kTracesForwardFailures,
                           "Failed Export calls to the OTLP upstream.", MetricType::Counter);
    AddCounter(fwd_fail, {}, static_cast<double>(stats.forward_failures));
    out.push_back(std::move(fwd_fail));
  }
  AddProcessMetrics(out);
  std::ostringstream text;
  prometheus::TextSerializer().Serialize(text, out);
  return text.str();
}

}  // namespace trainscope::sidecar
