// The task's collectors; see task_metrics.h.
#include "task_metrics.h"

#include "parameter_store.h"
#include "task_status.h"
#include "trainscope/common/clock.h"
#include "trainscope/runtime/version.h"
#include "trainscope/telemetry/names.h"

namespace trainscope {
namespace {

namespace names = telemetry::names;
using prometheus::MetricFamily;
using prometheus::MetricType;
using telemetry::AddCounter;
using telemetry::AddFamily;
using telemetry::AddGauge;
using telemetry::AddMetric;

// Step-time buckets: 1 ms to 100 s.
constexpr double kStepBuckets[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                   0.5,   1,      2.5,   5,    10,    25,   50,  100};

}  // namespace

TaskMetrics::TaskMetrics(std::string cluster_name, TaskRef self, const TaskStatus* status,
                         int64_t ps_memory_limit_bytes)
    : cluster_name_(std::move(cluster_name)),
      self_(std::move(self)),
      status_(status),
      ps_memory_limit_bytes_(ps_memory_limit_bytes),
      step_duration_(kStepBuckets),
      ps_queue_(names::kLatencyBuckets),
      ps_apply_(names::kLatencyBuckets),
      ps_push_to_apply_(names::kLatencyBuckets) {}

void TaskMetrics::RecordStep(double seconds, double loss, int64_t examples) {
  step_duration_.Observe(seconds);
  loss_.store(loss, std::memory_order_relaxed);
  examples_.fetch_add(examples, std::memory_order_relaxed);
  if (seconds > 0) {
    examples_per_second_.store(static_cast<double>(examples) / seconds, std::memory_order_relaxed);
  }
}

void TaskMetrics::Collect(std::vector<MetricFamily>* out) const {
  AddMetric(AddFamily(out, names::kTaskInfo, "Identity of this task; value 1.", MetricType::Gauge),
            {{names::kLabelCluster, cluster_name_},
             {names::kLabelRole, self_.role},
             {names::kLabelTask, std::to_string(self_.index)},
             {"runtime_version", kRuntimeVersion}})
      .gauge.value = 1;
  CollectTraining(out);
  CollectPs(out);
  CollectSession(out);
  CollectCheckpoints(out);
  AddCounter(out, names::kIdentityRefused,
             "Calls refused under mutual TLS: the caller's certificate does not name the host the "
             "cluster spec gives the task it claims to be.",
             static_cast<double>(identity_refused_.load()));
}

void TaskMetrics::RecordCheckpoint(bool ok, double seconds, int64_t bytes) {
  if (!ok) {
    checkpoint_failures_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  checkpoint_saves_.fetch_add(1, std::memory_order_relaxed);
  checkpoint_duration_.store(seconds, std::memory_order_relaxed);
  checkpoint_bytes_.store(bytes, std::memory_order_relaxed);
  checkpoint_last_unix_.store(UnixSeconds(), std::memory_order_relaxed);
}

void TaskMetrics::CollectCheckpoints(std::vector<MetricFamily>* out) const {
  AddCounter(out, names::kCheckpointRestores,
             "Restores from a checkpoint: a ps that loaded its variables, a worker that went on "
             "from a restored step.",
             static_cast<double>(checkpoint_restores_.load()));
  const double last = checkpoint_last_unix_.load();
  if (last <= 0) return;  // Not the checkpointing task.
  AddGauge(out, names::kCheckpointAge,
           "Seconds since the newest checkpoint was written (since checkpointing started when "
           "none was yet).",
           UnixSeconds() - last);
  AddGauge(out, names::kCheckpointDuration, "Seconds the newest checkpoint took to write.",
           checkpoint_duration_.load());
  AddGauge(out, names::kCheckpointSize, "Bytes of the newest checkpoint.",
           static_cast<double>(checkpoint_bytes_.load()));
  AddCounter(out, names::kCheckpointSaves, "Checkpoints written.",
             static_cast<double>(checkpoint_saves_.load()));
  AddCounter(out, names::kCheckpointFailures, "Checkpoints that could not be written.",
             static_cast<double>(checkpoint_failures_.load()));
}

void TaskMetrics::CollectTraining(std::vector<MetricFamily>* out) const {
  if (self_.role == "ps") return;
  AddCounter(out, names::kSteps, "Training steps done.", static_cast<double>(status_->steps()));
  step_duration_.CollectInto(&AddMetric(
      AddFamily(out, names::kStepDuration, "Duration of a training step (pull, compute, push).",
                MetricType::Histogram)));
  AddGauge(out, names::kLoss, "Loss of the last training step.", loss_.load());
  AddCounter(out, names::kExamples, "Training examples processed.",
             static_cast<double>(examples_.load()));
  AddGauge(out, names::kExamplesPerSecond, "Examples per second over the last step.",
           examples_per_second_.load());
}

void TaskMetrics::CollectPs(std::vector<MetricFamily>* out) const {
  const ParameterStore* store = store_.load();
  if (store == nullptr) return;
  AddGauge(out, names::kPsVariables, "Variables this ps holds.",
           static_cast<double>(store->num_variables()));
  AddGauge(out, names::kPsBytesHeld, "Bytes of variables this ps holds.",
           static_cast<double>(store->bytes_held()));
  AddGauge(out, names::kPsMemoryLimit,
           "This ps's memory budget for variables (--ps_memory_limit_bytes; 0 = none).",
           static_cast<double>(ps_memory_limit_bytes_));
  AddCounter(out, names::kPsUpdates, "Gradient updates applied.",
             static_cast<double>(store->updates_applied()));
  AddGauge(out, names::kPsInflight, "ParameterService calls being served now.",
           static_cast<double>(ps_inflight_.load()));
  ps_queue_.CollectInto(&AddMetric(AddFamily(out, names::kPsQueueSeconds,
                                             "Time a Push waited for its variable before the "
                                             "update.",
                                             MetricType::Histogram)));
  ps_apply_.CollectInto(&AddMetric(AddFamily(
      out, names::kPsApplySeconds, "Time to apply one gradient update.", MetricType::Histogram)));
  ps_push_to_apply_.CollectInto(&AddMetric(
      AddFamily(out, names::kPsPushToApplySeconds,
                "Time from receiving a Push to having applied it (queue, delays and update).",
                MetricType::Histogram)));
}

void TaskMetrics::CollectSession(std::vector<MetricFamily>* out) const {
  TaskStatus::Snapshot s = status_->Read();
  auto& phase =
      AddFamily(out, names::kSessionPhase, "1 for the task's current phase.", MetricType::Gauge);
  for (Phase p : {Phase::kStarting, Phase::kCreatingSession, Phase::kTraining, Phase::kDone,
                  Phase::kServing, Phase::kLeaving}) {
    AddMetric(phase, {{names::kLabelPhase, std::string(PhaseName(p))}}).gauge.value =
        p == s.phase ? 1 : 0;
  }
  auto& waiting = AddFamily(out, names::kSessionWaitingSeconds,
                            "Seconds CreateSession has waited for each peer it still needs.",
                            MetricType::Gauge);
  if (s.waiting) {
    const double waited = UnixSeconds() - s.waiting_since_unix;
    for (const auto& peer : s.waiting_on) {
      AddMetric(waiting, {{names::kLabelPeerRole, peer.peer.role},
                          {names::kLabelPeerTask, std::to_string(peer.peer.index)}})
          .gauge.value = waited;
    }
  }
}

}  // namespace trainscope
