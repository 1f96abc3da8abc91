// The detect part's metric families; see detect_metrics.h.
#include "trainscope/sidecar/detect_metrics.h"

#include <functional>
#include <limits>
#include <optional>
#include <string>

#include "prometheus/metric_family.h"
#include "trainscope/sidecar/names.h"
#include "trainscope/telemetry/metrics.h"

namespace trainscope::sidecar {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;
using telemetry::AddMetric;
using telemetry::MakeFamily;

namespace {

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

}  // namespace

namespace {

// The families of AddTaskFamilies, in the order they are exported.
struct TaskFamilies {
  MetricFamily up, state, transitions, blocked, age, restarts, phi, latency, last_latency, steps,
      step_time, cpu, rss, threads, fds;
};

// The task families, empty: their names, helps and types.
TaskFamilies MakeTaskFamilies() {
  TaskFamilies f;
  f.up = MakeFamily(
      names::kTaskUp,
      "1 when the task is up (answers on time, makes progress); 0 otherwise, done included.",
      MetricType::Gauge);
  f.state = MakeFamily(names::kTaskState, "1 for the task's current state, 0 for the others.",
                       MetricType::Gauge);
  f.transitions = MakeFamily(names::kTaskTransitions, "Times the task entered each state.",
                             MetricType::Counter);
  f.blocked = MakeFamily(names::kTaskBlockedSeconds,
                         "Seconds the task has been waiting on each peer (while blocked).",
                         MetricType::Gauge);
  f.age = MakeFamily(names::kTaskHeartbeatAge,
                     "Seconds since the task's last valid heartbeat answer.", MetricType::Gauge);
  f.restarts = MakeFamily(names::kTaskRestarts, "Restarts of the task (incarnation changes).",
                          MetricType::Counter);
  f.phi = MakeFamily(names::kTaskSuspicion,
                     "Phi-accrual suspicion that the task failed (0 while answers are on time).",
                     MetricType::Gauge);
  f.latency = MakeFamily(names::kTaskHeartbeatLatency, "Heartbeat round-trip latency in seconds.",
                         MetricType::Histogram);
  f.last_latency = MakeFamily(names::kTaskHeartbeatLastLatency,
                              "Latest heartbeat round-trip latency in seconds.", MetricType::Gauge);
  f.steps = MakeFamily(names::kTaskSteps, "The task's progress counter (steps or updates).",
                       MetricType::Counter);
  f.step_time = MakeFamily(names::kTaskLastStepSeconds, "Duration of the task's last step.",
                           MetricType::Gauge);
  f.cpu = MakeFamily(names::kTaskCpuSeconds, "CPU seconds the task reports having used.",
                     MetricType::Counter);
  f.rss = MakeFamily(names::kTaskResidentBytes, "Resident memory the task reports, in bytes.",
                     MetricType::Gauge);
  f.threads = MakeFamily(names::kTaskThreads, "Threads the task reports.", MetricType::Gauge);
  f.fds =
      MakeFamily(names::kTaskOpenFds, "Open file descriptors the task reports.", MetricType::Gauge);
  return f;
}

// One task's series: its state `now` (as decided), transitions, blocked peers, restarts, and,
// once it has answered, its heartbeat and resource facts.
void AddTaskSeries(const TaskView& v, const TaskCounters& c, TaskState now, TaskFamilies& f) {
  auto labels = telemetry::TaskLabels(v.cluster, v.task);
  AddMetric(f.up, labels).gauge.value = now == TaskState::kUp ? 1 : 0;
  for (int s = 0; s < kNumTaskStates; ++s) {
    auto l = labels;
    l.push_back(
        {std::string(names::kLabelState), std::string(StateName(static_cast<TaskState>(s)))});
    AddMetric(f.state, l).gauge.value = static_cast<int>(now) == s ? 1 : 0;
    AddMetric(f.transitions, l).counter.value = static_cast<double>(c.transitions[s]);
  }
  for (const BlockedPeer& b : v.blocked_on) {
    auto l = labels;
    l.push_back({std::string(names::kLabelPeerRole), b.peer.role});
    l.push_back({std::string(names::kLabelPeerTask), std::to_string(b.peer.index)});
    AddMetric(f.blocked, l).gauge.value = b.seconds;
  }
  AddMetric(f.restarts, labels).counter.value = static_cast<double>(v.restarts);
  if (v.heartbeat_age_seconds >= 0) {
    AddMetric(f.age, labels).gauge.value = v.heartbeat_age_seconds;
    AddMetric(f.phi, labels).gauge.value = v.phi;
    AddMetric(f.last_latency, labels).gauge.value = v.latency_seconds;
    f.latency.metric.push_back(LatencyHistogram(labels, c));
    AddMetric(f.steps, labels).counter.value = static_cast<double>(v.steps);
    AddMetric(f.step_time, labels).gauge.value = v.last_step_seconds;
    AddMetric(f.cpu, labels).counter.value = v.cpu_seconds;
    AddMetric(f.rss, labels).gauge.value = static_cast<double>(v.resident_bytes);
    AddMetric(f.threads, labels).gauge.value = v.threads;
    AddMetric(f.fds, labels).gauge.value = v.open_fds;
  }
}

}  // namespace

void AddTaskFamilies(const LocalSnapshot& local, const std::map<TaskRef, TaskState>& decided,
                     std::vector<MetricFamily>* out_families) {
  std::vector<MetricFamily>& out = *out_families;
  TaskFamilies f = MakeTaskFamilies();
  for (size_t i = 0; i < local.views.size(); ++i) {
    const TaskView& v = local.views[i];
    const auto it = decided.find(v.task);
    const TaskState now = it != decided.end() ? it->second : v.state;
    AddTaskSeries(v, local.counters[i], now, f);
  }
  for (auto* fam :
       {&f.up, &f.state, &f.transitions, &f.blocked, &f.age, &f.restarts, &f.phi, &f.latency,
        &f.last_latency, &f.steps, &f.step_time, &f.cpu, &f.rss, &f.threads, &f.fds}) {
    out.push_back(std::move(*fam));
  }
}

void AddCgroupFamilies(const LocalSnapshot& local, std::vector<MetricFamily>* out) {
  struct Fact {
    const char* name;
    const char* help;
    MetricType type;
    // The fact of a view, absent when not known (or, for a limit, when there is none).
    std::function<std::optional<double>(const TaskCgroup&)> get;
  };
  const auto positive = [](auto v) -> std::optional<double> {
    if (!v || *v <= 0) return std::nullopt;
    return static_cast<double>(*v);
  };
  const auto known = [](auto v) -> std::optional<double> {
    if (!v) return std::nullopt;
    return static_cast<double>(*v);
  };
  const Fact facts[] = {
      {names::kTaskMemoryLimitBytes, "The memory limit of the task's cgroup (when it has one).",
       MetricType::Gauge, [&](const TaskCgroup& c) { return positive(c.memory_limit_bytes); }},
      {names::kTaskMemoryUsageBytes, "Memory used by the task's cgroup, page cache included.",
       MetricType::Gauge, [&](const TaskCgroup& c) { return known(c.memory_usage_bytes); }},
      {names::kTaskMemoryWorkingSetBytes,
       "Memory used by the task's cgroup without inactive page cache (what nears the limit).",
       MetricType::Gauge, [&](const TaskCgroup& c) { return known(c.memory_working_set_bytes); }},
      {names::kTaskOomKills, "Processes the kernel's OOM killer killed in the task's cgroup.",
       MetricType::Counter, [&](const TaskCgroup& c) { return known(c.oom_kills); }},
      {names::kTaskMemoryPressure,
       "Share of the last 10 s some of the cgroup's tasks stalled on memory (PSI some avg10).",
       MetricType::Gauge, [&](const TaskCgroup& c) { return known(c.memory_pressure_ratio); }},
      {names::kTaskCpuQuotaCores, "The CPU quota of the task's cgroup in cores (when it has one).",
       MetricType::Gauge, [&](const TaskCgroup& c) { return positive(c.cpu_quota_cores); }},
      {names::kTaskCpuPeriods, "CFS scheduling periods of the task's cgroup.", MetricType::Counter,
       [&](const TaskCgroup& c) { return known(c.cpu_periods); }},
      {names::kTaskCpuThrottledPeriods,
       "CFS periods in which the task's cgroup used up its quota and was throttled.",
       MetricType::Counter, [&](const TaskCgroup& c) { return known(c.cpu_throttled_periods); }},
      {names::kTaskCpuThrottledSeconds, "Time the task's cgroup spent throttled by its quota.",
       MetricType::Counter, [&](const TaskCgroup& c) { return known(c.cpu_throttled_seconds); }},
  };
  for (const Fact& fact : facts) {
    MetricFamily family = MakeFamily(fact.name, fact.help, fact.type);
    for (const TaskView& v : local.views) {
      const std::optional<double> value = v.cgroup.version > 0 ? fact.get(v.cgroup) : std::nullopt;
      if (!value) continue;
      ClientMetric& m = AddMetric(family, telemetry::TaskLabels(v.cluster, v.task));
      (fact.type == MetricType::Counter ? m.counter.value : m.gauge.value) = *value;
    }
    out->push_back(std::move(family));
  }
}

void AddWatcherFamilies(const LocalSnapshot& local, int64_t pauses,
                        std::vector<MetricFamily>* out) {
  telemetry::AddGauge(out, names::kSidecarWatchedTasks, "Tasks this sidecar watches first-hand.",
                      static_cast<double>(local.views.size()));
  telemetry::AddCounter(out, names::kSidecarPauses,
                        "Times the sidecar's own loop was paused and it re-learned.",
                        static_cast<double>(pauses));
}

void AddSnapshotFamilies(const KeeperStats& keeper, std::vector<MetricFamily>* out) {
  telemetry::AddCounter(
      out, names::kSidecarSnapshots,
      "Snapshots taken of this node's tasks' threads (stuck tasks, and on demand).",
      static_cast<double>(keeper.captures));
  telemetry::AddCounter(out, names::kSidecarSnapshotFailures,
                        "Snapshots that could not be taken (the process was gone).",
                        static_cast<double>(keeper.failures));
  telemetry::AddGauge(out, names::kSidecarSnapshotBytes, "Bytes of the snapshots kept now.",
                      static_cast<double>(keeper.bytes_kept));
  telemetry::AddGauge(out, names::kSidecarSnapshotPause,
                      "The longest one thread was held stopped in the last snapshot.",
                      keeper.last_pause_ms / 1000);
  auto demands = telemetry::MakeFamily(
      names::kSidecarSnapshotDemands,
      "Demands for a fresh snapshot, by result: captured (its own capture), shared (joined "
      "another's), recent (a capture younger than a second answered), dropped (its asker left or "
      "its deadline passed first).",
      MetricType::Counter);
  const std::pair<const char*, int64_t> results[] = {{"captured", keeper.demands_captured},
                                                     {"shared", keeper.demands_shared},
                                                     {"recent", keeper.demands_recent},
                                                     {"dropped", keeper.demands_dropped}};
  for (const auto& [result, n] : results) {
    telemetry::AddMetric(demands, {{std::string(names::kLabelResult), result}}).counter.value =
        static_cast<double>(n);
  }
  out->push_back(std::move(demands));
}

}  // namespace trainscope::sidecar
