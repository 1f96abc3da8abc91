#pragma once
// What a task knows about itself and its peers, kept for its Heartbeat answer and its logs:
// phase, what it waits on, progress, and per peer the health of the calls to it.
// Plain bookkeeping: no gRPC or protobuf here.

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "inflight_calls.h"
#include "trainscope/common/clock.h"
#include "trainscope/common/cluster_spec.h"
#include "trainscope/common/phase.h"

namespace trainscope {

// The health of calls from this task to one peer. Thread-safe: counters are atomics, the last
// error has its own small lock, so recording a call on the RPC path takes no shared lock.
class PeerHealth {
 public:
  PeerHealth(TaskRef peer, std::string address)
      : peer_(std::move(peer)), address_(std::move(address)) {}

  // A call that succeeded after `seconds` (folded into a recent mean latency).
  void RecordSuccess(double seconds = 0);
  // A call that failed; `network`: the network failed (connection lost, no route, connect timed
  // out), not the peer's answer.
  void RecordFailure(std::string error, bool network = false);
  // Time the task spent in a call to this peer during the current step.
  void AddWait(double seconds);
  // The step ended after `step_seconds`: the share of it spent on this peer becomes the
  // reported one, and the next step starts from zero.
  void EndStep(double step_seconds);
  // Identity the peer gave in its handshake.
  void SetIdentity(uint64_t incarnation, std::string listen_address);

  struct Snapshot {
    TaskRef peer;
    std::string address;
    bool connected = false;
    int64_t consecutive_failures = 0;
    std::string last_error;
    double seconds_since_success = -1;
    uint64_t peer_incarnation = 0;
    std::string peer_listen_address;
    double latency_seconds = 0;
    double step_share = 0;
    bool network_failure = false;
    double seconds_failing = 0;  // Since the first failure of the current run; 0 when none.
  };
  Snapshot Read() const;
  const TaskRef& peer() const { return peer_; }
  const std::string& address() const { return address_; }

 private:
  const TaskRef peer_;
  const std::string address_;
  std::atomic<int64_t> consecutive_failures_{0};
  std::atomic<double> last_success_{-1};   // MonotonicSeconds() of the last success.
  std::atomic<double> first_failure_{-1};  // ... of the current run's first failure, else -1.
  std::atomic<double> latency_{0};         // Recent mean of successful calls' durations.
  std::atomic<double> wait_{0};            // In calls to the peer during this step.
  std::atomic<double> share_{0};           // Of the last step.
  std::atomic<bool> network_failure_{false};
  mutable std::mutex mu_;
  std::string last_error_ ABSL_GUARDED_BY(mu_);
  uint64_t peer_incarnation_ ABSL_GUARDED_BY(mu_) = 0;
  std::string peer_listen_address_ ABSL_GUARDED_BY(mu_);
};

// The task's own state. Thread-safe.
class TaskStatus {
 public:
  // The PeerHealth of `peer`, created on first use; the pointer stays valid for the life of
  // this TaskStatus.
  PeerHealth* Peer(const TaskRef& peer, const std::string& address);

  void SetPhase(Phase phase) { phase_.store(phase); }
  Phase phase() const { return phase_.load(); }

  // Marks the task as waiting (`what`, e.g. "CreateSession") on `peers`, since now.
  void StartWaiting(std::string what, std::vector<TaskRef> peers);
  // Replaces the peers still waited on; the start time stays.
  void UpdateWaiting(std::vector<TaskRef> peers);
  void StopWaiting();

  // A training step finished, taking `seconds`; each peer's share of it is fixed.
  void RecordStep(double seconds);
  // The step under way recovers from a failure (a retried call, a restarted ps): the heartbeat
  // says so of it once it is recorded. Lock-free.
  void MarkStepRecovering() { step_recovering_.store(true, std::memory_order_relaxed); }
  // A ps served a ParameterService call: its duration on the ps, of which waiting and working.
  // Lock-free (atomics).
  void RecordServed(double seconds, double queue_seconds, double work_seconds);
  // Progress counter for tasks that count something else (a ps counts updates applied).
  void SetSteps(int64_t steps) { steps_.store(steps); }
  int64_t steps() const { return steps_.load(); }
  void SetExpectsProgress(bool expects) { expects_progress_.store(expects); }

  struct Snapshot {
    Phase phase = Phase::kStarting;
    bool waiting = false;
    std::string waiting_what;
    double waiting_since_unix = 0;
    std::vector<PeerHealth::Snapshot> waiting_on;
    int64_t steps = 0;
    double last_step_seconds = 0;
    bool last_step_recovered = false;
    bool expects_progress = false;
    std::vector<PeerHealth::Snapshot> peers;
    // What a ps served (cumulative).
    int64_t served_calls = 0;
    double served_seconds = 0;
    double served_queue_seconds = 0;
    double served_work_seconds = 0;
  };
  Snapshot Read() const;

  // The calls in flight, made and served (the heartbeat lists them).
  InflightCalls& inflight() { return inflight_; }
  const InflightCalls& inflight() const { return inflight_; }

 private:
  InflightCalls inflight_;
  std::atomic<Phase> phase_{Phase::kStarting};
  std::atomic<int64_t> steps_{0};
  std::atomic<double> last_step_seconds_{0};
  std::atomic<bool> step_recovering_{false};
  std::atomic<bool> last_step_recovered_{false};
  std::atomic<bool> expects_progress_{false};
  std::atomic<int64_t> served_calls_{0};
  std::atomic<double> served_seconds_{0};
  std::atomic<double> served_queue_seconds_{0};
  std::atomic<double> served_work_seconds_{0};
  mutable std::mutex mu_;
  std::map<TaskRef, std::unique_ptr<PeerHealth>> peers_ ABSL_GUARDED_BY(mu_);
  bool waiting_ ABSL_GUARDED_BY(mu_) = false;
  std::string waiting_what_ ABSL_GUARDED_BY(mu_);
  double waiting_since_unix_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<TaskRef> waiting_on_ ABSL_GUARDED_BY(mu_);
};

}  // namespace trainscope
