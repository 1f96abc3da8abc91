// The process's telemetry: recorders, tracer, collectors and the /metrics endpoint; see
// telemetry.h.
#include "trainscope/telemetry/telemetry.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "prometheus/text_serializer.h"
#include "system_metrics.h"
#include "trainscope/common/cluster_spec.h"
#include "trainscope/common/http_server.h"
#include "trainscope/common/http_tls.h"
#include "trainscope/common/proc.h"
#include "trainscope/telemetry/names.h"

namespace trainscope::telemetry {

void AddProcessFamilies(std::vector<prometheus::MetricFamily>* out) {
  ResourceUsage u = ReadResourceUsage();
  AddCounter(out, names::kProcessCpuSeconds, "Total user and system CPU time spent in seconds.",
             u.cpu_seconds);
  AddGauge(out, names::kProcessResidentBytes, "Resident memory size in bytes.",
           static_cast<double>(u.resident_bytes));
  AddGauge(out, names::kProcessVirtualBytes, "Virtual memory size in bytes.",
           static_cast<double>(u.virtual_bytes));
  AddGauge(out, names::kProcessOpenFds, "Number of open file descriptors.", u.open_fds);
  AddGauge(out, names::kProcessMaxFds, "Maximum number of open file descriptors.",
           static_cast<double>(u.max_fds));
  AddGauge(out, names::kProcessStartTime, "Start time of the process since unix epoch in seconds.",
           u.start_time_unix);
  AddGauge(out, names::kProcessThreads, "Number of OS threads in the process.", u.threads);
}

namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

void CollectProcess(std::vector<MetricFamily>* out) {
  AddProcessFamilies(out);
  NodeUsage node = ReadNodeUsage();
  auto& cpu = AddFamily(out, names::kNodeCpuSeconds, "CPU time of the whole node by mode.",
                        MetricType::Counter);
  for (const auto& [mode, seconds] : node.cpu_seconds_by_mode) {
    AddMetric(cpu, {{names::kLabelMode, mode}}).counter.value = seconds;
  }
  AddGauge(out, names::kNodeMemoryTotal, "Memory of the node.",
           static_cast<double>(node.memory_total_bytes));
  AddGauge(out, names::kNodeMemoryAvailable, "Memory available on the node.",
           static_cast<double>(node.memory_available_bytes));

  auto& util = AddFamily(out, names::kGpuUtilization,
                         "Share of time a GPU kernel was running (NVML).", MetricType::Gauge);
  auto& used = AddFamily(out, names::kGpuMemoryUsed, "GPU memory used (NVML).", MetricType::Gauge);
  auto& total = AddFamily(out, names::kGpuMemoryTotal, "GPU memory (NVML).", MetricType::Gauge);
  for (const GpuUsage& g : ReadGpuUsage()) {
    std::vector<ClientMetric::Label> l = {{names::kLabelGpu, std::to_string(g.index)}};
    AddMetric(util, l).gauge.value = g.utilization_ratio;
    AddMetric(used, l).gauge.value = static_cast<double>(g.memory_used_bytes);
    AddMetric(total, l).gauge.value = static_cast<double>(g.memory_total_bytes);
  }
}

void CollectTracing(std::vector<MetricFamily>* out, const Tracer& tracer) {
  const TracingStats& s = tracer.stats();
  AddCounter(out, names::kSpansStarted, "Spans started (sampled or not).",
             static_cast<double>(s.spans_started.load()));
  AddCounter(out, names::kSpansExported, "Spans sent to the OTLP endpoint.",
             static_cast<double>(s.spans_exported.load()));
  AddCounter(out, names::kSpansDropped,
             "Spans dropped because the export queue was full (training never waits for it).",
             static_cast<double>(s.spans_dropped.load()));
  AddCounter(out, names::kExportFailures, "Span exports that failed.",
             static_cast<double>(s.export_failures.load()));
}

void CollectTail(std::vector<MetricFamily>* out, const FlightRecorder& recorder,
                 const TailSampler& tail) {
  const TailStats& s = tail.stats();
  AddCounter(out, names::kTraceCallsRecorded,
             "Calls recorded in the flight recorder and read by the tail sampler.",
             static_cast<double>(s.calls_read.load()));
  AddCounter(out, names::kTraceCallsOverwritten,
             "Calls overwritten in the flight recorder before the tail sampler read them.",
             static_cast<double>(s.calls_overwritten.load()));
  auto& kept = AddFamily(out, names::kTraceCallsKept,
                         "Calls kept as spans whatever the head sampler said, by their first "
                         "reason; dropped: over the rate limit.",
                         MetricType::Counter);
  const std::pair<const char*, const std::atomic<uint64_t>*> reasons[] = {
      {"error", &s.kept_error},     {"deadline", &s.kept_deadline},   {"slow", &s.kept_slow},
      {"slowest", &s.kept_slowest}, {"requested", &s.kept_requested}, {"dropped", &s.kept_dropped}};
  for (const auto& [reason, count] : reasons) {
    AddMetric(kept, {{names::kLabelReason, reason}}).counter.value =
        static_cast<double>(count->load());
  }
  auto& requests = AddFamily(out, names::kTraceKeepRequests,
                             "Callers' requests to keep this side of a call they kept: matched "
                             "(found in the flight recorder) or missed.",
                             MetricType::Counter);
  AddMetric(requests, {{names::kLabelResult, "matched"}}).counter.value =
      static_cast<double>(s.keep_matched.load());
  AddMetric(requests, {{names::kLabelResult, "missed"}}).counter.value =
      static_cast<double>(s.keep_missed.load());
  AddGauge(out, names::kTraceBufferBytes, "Memory of the flight recorder's rings.",
           static_cast<double>(recorder.bytes()));
}

}  // namespace

std::vector<MetricFamily> Telemetry::Collect() const {
  std::vector<MetricFamily> out = rpc_.Collect();
  {
    std::lock_guard lock(collectors_mu_);
    for (const MetricsCollector& collect : collectors_) collect(&out);
  }
  CollectProcess(&out);
  CollectTracing(&out, *tracer_);
  if (tail_) CollectTail(&out, *recorder_, *tail_);
  // Families with no series say nothing; leave them out.
  std::erase_if(out, [](const MetricFamily& f) { return f.metric.empty(); });
  return out;
}

Telemetry::Telemetry(TelemetryOptions options)
    : options_(std::move(options)), rpc_(options_.peers) {}

Telemetry::~Telemetry() {
  server_.reset();  // Waits for a scrape in progress.
  tail_.reset();    // Its last pass hands spans to the processor, which then flushes them.
  if (processor_) processor_->Shutdown(std::chrono::milliseconds(1000)).IgnoreError();
}

absl::StatusOr<std::unique_ptr<Telemetry>> Telemetry::Create(
    TelemetryOptions options, std::unique_ptr<SpanExporter> exporter) {
  std::unique_ptr<Telemetry> t(new Telemetry(std::move(options)));
  const TelemetryOptions& o = t->options_;
  if (o.enabled && exporter != nullptr) {
    t->processor_ =
        std::make_unique<BatchSpanProcessor>(std::move(exporter), o.batch, &t->tracing_stats_);
  }
  t->tracer_ = std::make_unique<Tracer>(t->processor_ ? o.sampler : SamplerOptions{},
                                        t->processor_.get(), &t->tracing_stats_);
  if (t->processor_) {
    t->recorder_ = std::make_unique<FlightRecorder>(o.trace_buffer_records);
    SpanNames names;
    for (size_t i = 0; i < o.peers.size(); ++i) {
      names.peer_tasks.push_back(o.peers[i].ShortName());
      names.peer_addresses.push_back(i < o.peer_addresses.size() ? o.peer_addresses[i] : "");
    }
    t->tail_ = std::make_unique<TailSampler>(o.tail, t->recorder_.get(), t->processor_.get(),
                                             std::move(names));
  }
  if (o.enabled && o.metrics_port >= 0) {
    absl::Status served = t->Serve();
    if (!served.ok()) return served;
  }
  return t;
}

void Telemetry::AddCollector(MetricsCollector collector) {
  std::lock_guard lock(collectors_mu_);
  collectors_.push_back(std::move(collector));
}

std::string Telemetry::RenderMetrics() const {
  return prometheus::TextSerializer().Serialize(Collect());
}

absl::Status Telemetry::Serve() {
  const std::string host = options_.metrics_host.empty() ? "0.0.0.0" : options_.metrics_host;
  if (!options_.tls.cert_file.empty()) {
    auto tls = HttpTls::Create(options_.tls, options_.log);
    if (!tls.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(options_.name,
                                                     " cannot serve /metrics over "
                                                     "HTTPS: ",
                                                     tls.status().message()));
    }
    http_tls_ = *std::move(tls);
  }
  // Scraped by a Prometheus or two and the node's sidecar: fewer connections than the
  // sidecar's page (docs/security.md, "HTTP listeners"); one scrape at a time is rendered.
  HttpServerOptions limits;
  limits.max_connections = 64;
  limits.max_connections_per_address = 16;
  limits.handler_threads = 1;
  auto server = HttpServer::Start(
      {host}, options_.metrics_port,
      [this](const HttpServer::Request& r) -> HttpServer::Response {
        if (r.path != "/metrics") {
          return {404, "text/plain; charset=utf-8", "not found; the metrics are at /metrics\n"};
        }
        return {200, "text/plain; version=0.0.4; charset=utf-8", RenderMetrics()};
      },
      http_tls_.get(), limits);
  if (!server.ok()) {
    return absl::UnavailableError(
        absl::StrCat(options_.name, " cannot serve /metrics: ", server.status().message(),
                     " (is --metrics_port in use?)"));
  }
  server_ = *std::move(server);
  const std::string& shown = options_.advertised_host.empty() ? host : options_.advertised_host;
  metrics_address_ = JoinHostPort(shown, server_->port());
  return absl::OkStatus();
}

}  // namespace trainscope::telemetry
