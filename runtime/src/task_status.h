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

  void RecordSuccess();
  void RecordFailure(std::string error);
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
  };
  Snapshot Read() const;
  const TaskRef& peer() const { return peer_; }
  const std::string& address() const { return address_; }

 private:
  const TaskRef peer_;
  const std::string address_;
  std::atomic<int64_t> consecutive_failures_{0};
  std::atomic<double> last_success_{-1};  // MonotonicSeconds() of the last success.
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

  // A training step finished, taking `seconds`.
  void RecordStep(double seconds);
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
    bool expects_progress = false;
    std::vector<PeerHealth::Snapshot> peers;
  };
  Snapshot Read() const;

 private:
  std::atomic<Phase> phase_{Phase::kStarting};
  std::atomic<int64_t> steps_{0};
  std::atomic<double> last_step_seconds_{0};
  std::atomic<bool> expects_progress_{false};
  mutable std::mutex mu_;
  std::map<TaskRef, std::unique_ptr<PeerHealth>> peers_ ABSL_GUARDED_BY(mu_);
  bool waiting_ ABSL_GUARDED_BY(mu_) = false;
  std::string waiting_what_ ABSL_GUARDED_BY(mu_);
  double waiting_since_unix_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<TaskRef> waiting_on_ ABSL_GUARDED_BY(mu_);
};

}  // namespace trainscope
