#pragma once
// The task's own metrics, registered with its Telemetry as a collector: identity
// (trainscope_task_info), training steps, loss and examples, the ps's variables and where a
// Push's time went, and CreateSession's phase and waits. The recorders are atomics; the rest is
// read from the task's bookkeeping at scrape time.

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "trainscope/common/clock.h"
#include "trainscope/common/cluster_spec.h"
#include "trainscope/telemetry/metrics.h"

namespace trainscope {

class ParameterStore;
class TaskStatus;

// Thread-safe: recording is a few relaxed atomic operations; Collect reads.
class TaskMetrics {
 public:
  // `status` must outlive this.
  TaskMetrics(std::string cluster_name, TaskRef self, const TaskStatus* status,
              int64_t ps_memory_limit_bytes);

  // The ps's store, once it exists; it must outlive this.
  void SetStore(const ParameterStore* store) { store_.store(store); }

  // Training.
  void RecordStep(double seconds, double loss, int64_t examples);
  // Parameter server: wait for the variable, the update itself, and receipt-to-applied.
  telemetry::AtomicHistogram& ps_queue() { return ps_queue_; }
  telemetry::AtomicHistogram& ps_apply() { return ps_apply_; }
  telemetry::AtomicHistogram& ps_push_to_apply() { return ps_push_to_apply_; }
  std::atomic<int64_t>& ps_inflight() { return ps_inflight_; }
  // Checkpoints: this task saves them from now on (the age counts from here until the first).
  void StartCheckpointing() { checkpoint_last_unix_.store(UnixSeconds()); }
  void RecordCheckpoint(bool ok, double seconds, int64_t bytes);
  // A ps restored its variables, or a worker went on after a ps restored them.
  void RecordRestore() { checkpoint_restores_.fetch_add(1, std::memory_order_relaxed); }
  // A call refused under mutual TLS: the certificate does not name the task the caller claims.
  void RecordIdentityRefused() { identity_refused_.fetch_add(1, std::memory_order_relaxed); }

  // Appends the task's families to `out` (a telemetry::MetricsCollector).
  void Collect(std::vector<prometheus::MetricFamily>* out) const;

 private:
  void CollectTraining(std::vector<prometheus::MetricFamily>* out) const;
  void CollectPs(std::vector<prometheus::MetricFamily>* out) const;
  void CollectSession(std::vector<prometheus::MetricFamily>* out) const;
  void CollectCheckpoints(std::vector<prometheus::MetricFamily>* out) const;

  const std::string cluster_name_;
  const TaskRef self_;
  const TaskStatus* const status_;
  const int64_t ps_memory_limit_bytes_;
  std::atomic<const ParameterStore*> store_{nullptr};
  telemetry::AtomicHistogram step_duration_;
  std::atomic<double> loss_{0};
  std::atomic<int64_t> examples_{0};
  std::atomic<double> examples_per_second_{0};
  telemetry::AtomicHistogram ps_queue_;
  telemetry::AtomicHistogram ps_apply_;
  telemetry::AtomicHistogram ps_push_to_apply_;
  std::atomic<int64_t> ps_inflight_{0};
  std::atomic<double> checkpoint_last_unix_{0};  // 0: this task does not save checkpoints.
  std::atomic<double> checkpoint_duration_{0};
  std::atomic<int64_t> checkpoint_bytes_{0};
  std::atomic<int64_t> checkpoint_saves_{0};
  std::atomic<int64_t> checkpoint_failures_{0};
  std::atomic<int64_t> checkpoint_restores_{0};
  std::atomic<int64_t> identity_refused_{0};
};

}  // namespace trainscope
