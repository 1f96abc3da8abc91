#pragma once
// The BatchSpanProcessor: queues finished spans without blocking the RPC path and hands them
// in batches, from a thread of its own, to a SpanExporter (OTLP/gRPC in production, a fake in
// tests). When the queue is full it drops and counts; it never makes training wait.

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "trainscope/telemetry/tracing.h"

namespace trainscope::telemetry {

// Sends a batch of spans somewhere. Called from one thread at a time (the processor's);
// implementations need not be thread-safe. Export may take the batch's contents (move out
// of it); it must return within its own deadline and report failure as a status, not throw.
class SpanExporter {
 public:
  virtual ~SpanExporter();
  virtual absl::Status Export(std::vector<SpanData>& batch) = 0;
};

// Sizes and timing of the processor, as OpenTelemetry's OTEL_BSP_* variables name them.
struct BatchSpanProcessorOptions {
  size_t max_queue_size = 2048;        // OTEL_BSP_MAX_QUEUE_SIZE
  size_t max_export_batch_size = 512;  // OTEL_BSP_MAX_EXPORT_BATCH_SIZE (<= max_queue_size)
  int schedule_delay_ms = 1000;        // OTEL_BSP_SCHEDULE_DELAY
};

// The options that OTEL_BSP_MAX_QUEUE_SIZE, OTEL_BSP_MAX_EXPORT_BATCH_SIZE and
// OTEL_BSP_SCHEDULE_DELAY ask for. A value it cannot use keeps its default and `*warning`
// (when not null) says so; otherwise `*warning` is left empty.
BatchSpanProcessorOptions BatchSpanProcessorOptionsFromEnv(std::string* warning = nullptr);

// Queues spans and exports them in batches of at most max_export_batch_size, every
// schedule_delay_ms or as soon as a batch's worth (or half the queue) is waiting.
// Thread-safe: OnEnd may be called from any thread and never blocks on the exporter (it holds
// a mutex only for a push_back); a span that finds the queue full is dropped and counted.
class BatchSpanProcessor final : public SpanProcessor {
 public:
  // Starts the export thread. `stats` may be null (the processor counts into its own); when
  // given, it must outlive the processor.
  BatchSpanProcessor(std::unique_ptr<SpanExporter> exporter, BatchSpanProcessorOptions options,
                     TracingStats* stats = nullptr);
  // Shutdown(std::chrono::milliseconds(5000)) unless already shut down.
  ~BatchSpanProcessor() override;
  BatchSpanProcessor(const BatchSpanProcessor&) = delete;
  BatchSpanProcessor& operator=(const BatchSpanProcessor&) = delete;

  void OnEnd(SpanData&& span) override;

  // Exports every span queued before the call; returns when done, or DeadlineExceeded after
  // `timeout` (the spans stay queued). FailedPrecondition after Shutdown.
  absl::Status ForceFlush(std::chrono::milliseconds timeout);

  // Exports what is queued, then stops the export thread; later spans are dropped and counted.
  // DeadlineExceeded when the flush did not finish within `timeout`: what is still queued is
  // dropped and counted, and the call then returns once the export in flight (bounded by the
  // exporter's own deadline) ends. Idempotent.
  absl::Status Shutdown(std::chrono::milliseconds timeout);

  const TracingStats& stats() const { return *stats_; }
  const BatchSpanProcessorOptions& options() const { return options_; }

 private:
  void Run();
  // Exports `spans` in batches; called on the export thread without mu_.
  void ExportAll(std::vector<SpanData>& spans);

  const BatchSpanProcessorOptions options_;
  const size_t wake_threshold_;
  std::unique_ptr<SpanExporter> exporter_;  // Used by the export thread only.
  TracingStats own_stats_;
  TracingStats* const stats_;

  std::mutex mu_;
  std::condition_variable wake_;     // The export thread waits on it.
  std::condition_variable flushed_;  // ForceFlush and Shutdown wait on it.
  std::vector<SpanData> queue_ ABSL_GUARDED_BY(mu_);
  bool woken_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;  // Shutdown asked; no more spans accepted.
  bool abandon_ ABSL_GUARDED_BY(mu_) = false;   // Shutdown timed out: drop, don't export.
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;   // The export thread has finished.
  uint64_t flush_requested_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t flush_done_ ABSL_GUARDED_BY(mu_) = 0;

  std::mutex shutdown_mu_;  // Serializes Shutdown calls.
  std::thread thread_;
};

}  // namespace trainscope::telemetry
