#pragma once
// A process's telemetry: the recorders for gRPC calls, the tracer, the flight recorder and tail
// sampler that decide which calls become spans, the span pipeline, and the
// /metrics endpoint that renders them (plus process, node and GPU usage, and whatever the
// program registers with AddCollector) for Prometheus. Knows nothing of what the program does:
// a task registers collectors for its own bookkeeping. Sees no protobuf: spans leave through a
// SpanExporter the program hands in (OTLP in otlp_exporter.h).

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "trainscope/common/cluster_spec.h"
#include "trainscope/common/tls.h"
#include "trainscope/telemetry/batch_span_processor.h"
#include "trainscope/telemetry/flight_recorder.h"
#include "trainscope/telemetry/metrics.h"
#include "trainscope/telemetry/tail_sampler.h"
#include "trainscope/telemetry/tracing.h"

namespace prometheus {
struct MetricFamily;
}  // namespace prometheus

namespace trainscope {
class HttpTls;
class HttpServer;
}  // namespace trainscope

namespace trainscope::telemetry {

struct TelemetryOptions {
  // Record metrics and spans at all. Off, calls go through no interceptor and nothing is served.
  bool enabled = true;
  // Who records, for error messages ("ps:0").
  std::string name;
  // Every task the process talks to: their roles label the call metrics, each gets per-peer
  // counters; and where each is (for span attributes), in the same order.
  std::vector<TaskRef> peers;
  std::vector<std::string> peer_addresses;
  // Port of /metrics; 0 = any free port (metrics_address() tells), -1 = none.
  int metrics_port = 0;
  // Host to bind /metrics on; empty = all interfaces.
  std::string metrics_host;
  // With a certificate, /metrics is served over HTTPS; with a CA too, scrapers must present a
  // certificate it signed. Re-read when the files change (trainscope/common/http_tls.h).
  TlsFiles tls;
  // Hears of certificate reloads and failed reloads (may be null).
  std::function<void(const std::string&)> log;
  // Host to advertise in metrics_address(); empty = metrics_host (or, when that is a wildcard,
  // nothing better than it).
  std::string advertised_host;
  // Which new traces are exported whatever happens to them (the head sampler), and how
  // finished spans are queued for the exporter.
  SamplerOptions sampler;
  BatchSpanProcessorOptions batch;
  // Calls held in the flight recorder (80 bytes each, plus 8), and which of them the tail sampler
  // keeps whatever the head sampler said.
  size_t trace_buffer_records = 32768;
  TailSamplerOptions tail;
};

// Adds the collector's families to `out`, at scrape time, on the /metrics server's thread.
using MetricsCollector = std::function<void(std::vector<prometheus::MetricFamily>* out)>;

// Thread-safe: recorders are atomics; collectors run at scrape time.
class Telemetry {
 public:
  // `exporter` receives the sampled spans; null exports none (spans are still named and
  // propagated). Fails when /metrics cannot be served.
  static absl::StatusOr<std::unique_ptr<Telemetry>> Create(TelemetryOptions options,
                                                           std::unique_ptr<SpanExporter> exporter);
  ~Telemetry();

  bool enabled() const { return options_.enabled; }
  RpcMetrics& rpc() { return rpc_; }
  // Never null; a tracer without an exporter records nothing.
  Tracer& tracer() { return *tracer_; }
  // Where every traced call is recorded, and what decides which become spans; null when spans
  // are not exported.
  FlightRecorder* recorder() { return recorder_.get(); }
  TailSampler* tail() { return tail_.get(); }
  // "host:port" of /metrics, empty when there is none.
  const std::string& metrics_address() const { return metrics_address_; }

  // Renders `collector`'s families on every scrape, after the call metrics and before the
  // process and tracing ones. What it reads must outlive this Telemetry. Thread-safe.
  void AddCollector(MetricsCollector collector);

 private:
  explicit Telemetry(TelemetryOptions options);
  absl::Status Serve();
  // What a scrape of /metrics reads (Prometheus' text format).
  std::string RenderMetrics() const;
  std::vector<prometheus::MetricFamily> Collect() const;

  const TelemetryOptions options_;
  RpcMetrics rpc_;
  TracingStats tracing_stats_;
  std::unique_ptr<BatchSpanProcessor> processor_;  // null when spans are not exported
  std::unique_ptr<Tracer> tracer_;
  std::unique_ptr<FlightRecorder> recorder_;  // null when spans are not exported
  std::unique_ptr<TailSampler> tail_;         // null when spans are not exported
  mutable std::mutex collectors_mu_;
  std::vector<MetricsCollector> collectors_ ABSL_GUARDED_BY(collectors_mu_);
  std::unique_ptr<HttpTls> http_tls_;  // Outlives server_, which uses it.
  std::unique_ptr<HttpServer> server_;
  std::string metrics_address_;
};

}  // namespace trainscope::telemetry
