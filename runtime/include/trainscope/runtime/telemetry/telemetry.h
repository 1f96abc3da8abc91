#pragma once
// A task's telemetry: the recorders for gRPC calls, training and the ps, the tracer that sends
// spans as OTLP, and the /metrics endpoint that renders all of it (plus process, node and GPU
// usage) for Prometheus. The task builds one and hands its interceptors to every channel and
// to its server; a training program records steps through Task::RecordStep.

#include <atomic>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "trainscope/common/cluster_spec.h"
#include "trainscope/runtime/telemetry/metrics.h"
#include "trainscope/runtime/telemetry/tracing.h"

namespace prometheus {
class Exposer;
}  // namespace prometheus

namespace trainscope {
class TaskStatus;
class ParameterStore;
}  // namespace trainscope

namespace trainscope::telemetry {

class BatchSpanProcessor;

struct TelemetryOptions {
  // Record metrics and spans at all. Off, calls go through no interceptor.
  bool enabled = true;
  // Port of the task's /metrics; 0 = any free port (the heartbeat tells it), -1 = none.
  int metrics_port = 0;
  // Host to bind /metrics on; empty = all interfaces.
  std::string metrics_host;
  // Export spans over OTLP (OTEL_* environment variables say where and how much).
  bool tracing = true;
};

// Everything about the task the collectors read at scrape time.
struct TelemetryContext {
  std::string cluster_name;
  TaskRef self;
  ClusterSpec cluster;
  const TaskStatus* status = nullptr;
  const ParameterStore* store = nullptr;  // ps only
  int64_t ps_memory_limit_bytes = 0;
};

// Thread-safe: recorders are atomics; the collectors read at scrape time.
class Telemetry {
 public:
  static absl::StatusOr<std::unique_ptr<Telemetry>> Create(const TelemetryOptions& options,
                                                           TelemetryContext context);
  ~Telemetry();

  bool enabled() const { return options_.enabled; }
  RpcMetrics& rpc() { return rpc_; }
  // Never null; a disabled tracer samples nothing.
  Tracer& tracer() { return *tracer_; }
  // "host:port" of /metrics, empty when there is none.
  const std::string& metrics_address() const { return metrics_address_; }
  // The ps's store, once it exists.
  void SetStore(const ParameterStore* store) { store_.store(store); }

  // Training.
  void RecordStep(double seconds, double loss, int64_t examples);
  // Parameter server: wait for the variable, the update itself, and receipt-to-applied.
  AtomicHistogram& ps_queue() { return ps_queue_; }
  AtomicHistogram& ps_apply() { return ps_apply_; }
  AtomicHistogram& ps_push_to_apply() { return ps_push_to_apply_; }
  std::atomic<int64_t>& ps_inflight() { return ps_inflight_; }
  const TelemetryContext& context() const { return context_; }

  class Collector;

 private:
  Telemetry(const TelemetryOptions& options, TelemetryContext context);
  absl::Status Serve();

  const TelemetryOptions options_;
  const TelemetryContext context_;
  std::atomic<const ParameterStore*> store_{nullptr};
  RpcMetrics rpc_;
  TracingStats tracing_stats_;
  std::unique_ptr<BatchSpanProcessor> processor_;  // null when spans are not exported
  std::unique_ptr<Tracer> tracer_;
  AtomicHistogram step_duration_;
  std::atomic<double> loss_{0};
  std::atomic<int64_t> examples_{0};
  std::atomic<double> examples_per_second_{0};
  AtomicHistogram ps_queue_;
  AtomicHistogram ps_apply_;
  AtomicHistogram ps_push_to_apply_;
  std::atomic<int64_t> ps_inflight_{0};
  std::shared_ptr<Collector> collector_;
  std::unique_ptr<prometheus::Exposer> exposer_;
  std::string metrics_address_;
};

}  // namespace trainscope::telemetry
