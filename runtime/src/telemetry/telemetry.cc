// The task's telemetry: recorders, tracer, and the /metrics endpoint; see telemetry.h.
#include "trainscope/runtime/telemetry/telemetry.h"

#include <chrono>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "prometheus/client_metric.h"
#include "prometheus/collectable.h"
#include "prometheus/exposer.h"
#include "prometheus/metric_family.h"
#include "spdlog/spdlog.h"
#include "system_metrics.h"
#include "trainscope/common/proc.h"
#include "trainscope/runtime/parameter_store.h"
#include "trainscope/runtime/task_status.h"
#include "trainscope/runtime/telemetry/batch_span_processor.h"
#include "trainscope/runtime/telemetry/names.h"
#include "trainscope/runtime/telemetry/otlp_exporter.h"
#include "trainscope/runtime/telemetry/tracing.h"
#include "trainscope/runtime/version.h"

namespace trainscope::telemetry {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

// Step-time buckets: 1 ms to 100 s.
constexpr double kStepBuckets[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                   0.5,   1,      2.5,   5,    10,    25,   50,  100};

ClientMetric& Add(MetricFamily& f, std::vector<ClientMetric::Label> labels = {}) {
  f.metric.emplace_back();
  f.metric.back().label = std::move(labels);
  return f.metric.back();
}

void Gauge(std::vector<MetricFamily>* out, const char* name, const char* help, double value) {
  Add(AddFamily(out, name, help, MetricType::Gauge)).gauge.value = value;
}

void Counter(std::vector<MetricFamily>* out, const char* name, const char* help, double value) {
  Add(AddFamily(out, name, help, MetricType::Counter)).counter.value = value;
}

}  // namespace

// Renders everything at scrape time.
class Telemetry::Collector final : public prometheus::Collectable {
 public:
  explicit Collector(Telemetry* telemetry) : t_(telemetry) {}

  std::vector<MetricFamily> Collect() const override {
    std::vector<MetricFamily> out = t_->rpc_.Collect();
    const TelemetryContext& c = t_->context_;
    Add(AddFamily(&out, names::kTaskInfo, "Identity of this task; value 1.", MetricType::Gauge),
        {{names::kLabelCluster, c.cluster_name},
         {names::kLabelRole, c.self.role},
         {names::kLabelTask, std::to_string(c.self.index)},
         {"runtime_version", kRuntimeVersion}})
        .gauge.value = 1;
    CollectTraining(&out);
    CollectPs(&out);
    CollectSession(&out);
    CollectProcess(&out);
    CollectTracing(&out);
    // Families with no series say nothing; leave them out.
    std::erase_if(out, [](const MetricFamily& f) { return f.metric.empty(); });
    return out;
  }

 private:
  void CollectTraining(std::vector<MetricFamily>* out) const {
    if (t_->context_.self.role == "ps") return;
    const TaskStatus* status = t_->context_.status;
    Counter(out, names::kSteps, "Training steps done.",
            static_cast<double>(status ? status->steps() : 0));
    t_->step_duration_.CollectInto(&Add(
        AddFamily(out, names::kStepDuration, "Duration of a training step (pull, compute, push).",
                  MetricType::Histogram)));
    Gauge(out, names::kLoss, "Loss of the last training step.", t_->loss_.load());
    Counter(out, names::kExamples, "Training examples processed.",
            static_cast<double>(t_->examples_.load()));
    Gauge(out, names::kExamplesPerSecond, "Examples per second over the last step.",
          t_->examples_per_second_.load());
  }

  void CollectPs(std::vector<MetricFamily>* out) const {
    const ParameterStore* store = t_->store_.load();
    if (store == nullptr) return;
    Gauge(out, names::kPsVariables, "Variables this ps holds.",
          static_cast<double>(store->num_variables()));
    Gauge(out, names::kPsBytesHeld, "Bytes of variables this ps holds.",
          static_cast<double>(store->bytes_held()));
    Gauge(out, names::kPsMemoryLimit,
          "This ps's memory budget for variables (--ps_memory_limit_bytes; 0 = none).",
          static_cast<double>(t_->context_.ps_memory_limit_bytes));
    Counter(out, names::kPsUpdates, "Gradient updates applied.",
            static_cast<double>(store->updates_applied()));
    Gauge(out, names::kPsInflight, "ParameterService calls being served now.",
          static_cast<double>(t_->ps_inflight_.load()));
    t_->ps_queue_.CollectInto(&Add(AddFamily(
        out, names::kPsQueueSeconds, "Time a Push waited for its variable before the update.",
        MetricType::Histogram)));
    t_->ps_apply_.CollectInto(&Add(AddFamily(
        out, names::kPsApplySeconds, "Time to apply one gradient update.", MetricType::Histogram)));
    t_->ps_push_to_apply_.CollectInto(&Add(
        AddFamily(out, names::kPsPushToApplySeconds,
                  "Time from receiving a Push to having applied it (queue, delays and update).",
                  MetricType::Histogram)));
  }

  void CollectSession(std::vector<MetricFamily>* out) const {
    const TaskStatus* status = t_->context_.status;
    if (status == nullptr) return;
    TaskStatus::Snapshot s = status->Read();
    auto& phase =
        AddFamily(out, names::kSessionPhase, "1 for the task's current phase.", MetricType::Gauge);
    for (Phase p : {Phase::kStarting, Phase::kCreatingSession, Phase::kTraining, Phase::kDone,
                    Phase::kServing}) {
      Add(phase, {{names::kLabelPhase, std::string(PhaseName(p))}}).gauge.value =
          p == s.phase ? 1 : 0;
    }
    auto& waiting = AddFamily(out, names::kSessionWaitingSeconds,
                              "Seconds CreateSession has waited for each peer it still needs.",
                              MetricType::Gauge);
    if (s.waiting) {
      const double waited = UnixSeconds() - s.waiting_since_unix;
      for (const auto& peer : s.waiting_on) {
        Add(waiting, {{names::kLabelPeerRole, peer.peer.role},
                      {names::kLabelPeerTask, std::to_string(peer.peer.index)}})
            .gauge.value = waited;
      }
    }
  }

  void CollectProcess(std::vector<MetricFamily>* out) const {
    ResourceUsage u = ReadResourceUsage();
    Counter(out, names::kProcessCpuSeconds, "Total user and system CPU time spent in seconds.",
            u.cpu_seconds);
    Gauge(out, names::kProcessResidentBytes, "Resident memory size in bytes.",
          static_cast<double>(u.resident_bytes));
    Gauge(out, names::kProcessVirtualBytes, "Virtual memory size in bytes.",
          static_cast<double>(u.virtual_bytes));
    Gauge(out, names::kProcessOpenFds, "Number of open file descriptors.", u.open_fds);
    Gauge(out, names::kProcessMaxFds, "Maximum number of open file descriptors.",
          static_cast<double>(u.max_fds));
    Gauge(out, names::kProcessStartTime, "Start time of the process since unix epoch in seconds.",
          u.start_time_unix);
    Gauge(out, names::kProcessThreads, "Number of OS threads in the process.", u.threads);

    NodeUsage node = ReadNodeUsage();
    auto& cpu = AddFamily(out, names::kNodeCpuSeconds, "CPU time of the whole node by mode.",
                          MetricType::Counter);
    for (const auto& [mode, seconds] : node.cpu_seconds_by_mode) {
      Add(cpu, {{names::kLabelMode, mode}}).counter.value = seconds;
    }
    Gauge(out, names::kNodeMemoryTotal, "Memory of the node.",
          static_cast<double>(node.memory_total_bytes));
    Gauge(out, names::kNodeMemoryAvailable, "Memory available on the node.",
          static_cast<double>(node.memory_available_bytes));

    auto& util = AddFamily(out, names::kGpuUtilization,
                           "Share of time a GPU kernel was running (NVML).", MetricType::Gauge);
    auto& used =
        AddFamily(out, names::kGpuMemoryUsed, "GPU memory used (NVML).", MetricType::Gauge);
    auto& total = AddFamily(out, names::kGpuMemoryTotal, "GPU memory (NVML).", MetricType::Gauge);
    for (const GpuUsage& g : ReadGpuUsage()) {
      std::vector<ClientMetric::Label> l = {{names::kLabelGpu, std::to_string(g.index)}};
      Add(util, l).gauge.value = g.utilization_ratio;
      Add(used, l).gauge.value = static_cast<double>(g.memory_used_bytes);
      Add(total, l).gauge.value = static_cast<double>(g.memory_total_bytes);
    }
  }

  void CollectTracing(std::vector<MetricFamily>* out) const {
    const TracingStats& s = t_->tracer_->stats();
    Counter(out, names::kSpansStarted, "Spans started (sampled or not).",
            static_cast<double>(s.spans_started.load()));
    Counter(out, names::kSpansExported, "Spans sent to the OTLP endpoint.",
            static_cast<double>(s.spans_exported.load()));
    Counter(out, names::kSpansDropped,
            "Spans dropped because the export queue was full (training never waits for it).",
            static_cast<double>(s.spans_dropped.load()));
    Counter(out, names::kExportFailures, "Span exports that failed.",
            static_cast<double>(s.export_failures.load()));
  }

  Telemetry* t_;
};

Telemetry::Telemetry(const TelemetryOptions& options, TelemetryContext context)
    : options_(options),
      context_(std::move(context)),
      store_(context_.store),
      rpc_(context_.cluster.AllTasks()),
      step_duration_(kStepBuckets),
      ps_queue_(names::kLatencyBuckets),
      ps_apply_(names::kLatencyBuckets),
      ps_push_to_apply_(names::kLatencyBuckets) {}

Telemetry::~Telemetry() {
  exposer_.reset();
  if (processor_) processor_->Shutdown(std::chrono::milliseconds(1000)).IgnoreError();
}

absl::StatusOr<std::unique_ptr<Telemetry>> Telemetry::Create(const TelemetryOptions& options,
                                                             TelemetryContext context) {
  std::unique_ptr<Telemetry> t(new Telemetry(options, std::move(context)));
  SamplerOptions sampler;
  if (options.enabled && options.tracing) {
    std::string warning;
    sampler = Tracer::SamplerFromEnv(&warning);
    if (!warning.empty()) spdlog::warn("{}", warning);
    warning.clear();
    OtlpExporterOptions exporter_options = OtlpOptionsFromEnv(
        t->context_.cluster_name, t->context_.self.role, t->context_.self.index, &warning);
    if (!warning.empty()) spdlog::warn("{}", warning);
    auto exporter = OtlpGrpcExporter::Create(exporter_options);
    if (!exporter.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          t->context_.self.ShortName(), " cannot export traces: ", exporter.status().message()));
    }
    warning.clear();
    BatchSpanProcessorOptions batch = BatchSpanProcessorOptionsFromEnv(&warning);
    if (!warning.empty()) spdlog::warn("{}", warning);
    t->processor_ =
        std::make_unique<BatchSpanProcessor>(*std::move(exporter), batch, &t->tracing_stats_);
  }
  t->tracer_ = std::make_unique<Tracer>(sampler, t->processor_.get(), &t->tracing_stats_);
  if (options.enabled && options.metrics_port >= 0) {
    absl::Status served = t->Serve();
    if (!served.ok()) return served;
  }
  return t;
}

absl::Status Telemetry::Serve() {
  const std::string host = options_.metrics_host.empty() ? "0.0.0.0" : options_.metrics_host;
  const std::string bind = absl::StrCat(host, ":", options_.metrics_port);
  try {
    exposer_ = std::make_unique<prometheus::Exposer>(bind, /*num_threads=*/1);
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat(context_.self.ShortName(),
                                               " cannot serve /metrics on ", bind, ": ", e.what(),
                                               " (is --metrics_port in use?)"));
  }
  collector_ = std::make_shared<Collector>(this);
  exposer_->RegisterCollectable(collector_);
  std::vector<int> ports = exposer_->GetListeningPorts();
  const int port = ports.empty() ? options_.metrics_port : ports.front();
  std::string advertised_host = host;
  if (host == "0.0.0.0" || host == "::") {
    // Advertise the host others reach this task at: its host in the cluster spec.
    if (const std::string* address = context_.cluster.FindAddress(context_.self)) {
      if (auto spec = ParseHostPort(*address); spec.ok()) advertised_host = spec->host;
    }
  }
  metrics_address_ = absl::StrCat(advertised_host, ":", port);
  return absl::OkStatus();
}

void Telemetry::RecordStep(double seconds, double loss, int64_t examples) {
  step_duration_.Observe(seconds);
  loss_.store(loss, std::memory_order_relaxed);
  examples_.fetch_add(examples, std::memory_order_relaxed);
  if (seconds > 0) {
    examples_per_second_.store(static_cast<double>(examples) / seconds, std::memory_order_relaxed);
  }
}

}  // namespace trainscope::telemetry
