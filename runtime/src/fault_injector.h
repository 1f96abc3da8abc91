#pragma once
// What InjectFault arms on a task started with --enable_fault_injection (and the --testing_*
// flags), so that tests and people trying trainscope see faults for real:
// - delays: on every ParameterService call, on every heartbeat, and at random on some calls;
// - lost answers: the first N Push answers fail with UNAVAILABLE after the gradient was applied;
// - wedges: the training thread deadlocked with a second thread on two mutexes taken in
//   opposite order, and a ParameterService call that blocks forever with every later one
//   queued behind it. Wedges cannot be undone (restart the task).
// Thread-safe.

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

namespace trainscope {

class FaultInjector {
 public:
  // The --testing_ps_delay_ms and --testing_drop_push_answers flags.
  FaultInjector(int64_t parameter_delay_ms = 0, int drop_push_answers = 0);

  struct Delays {
    int64_t parameter_ms = 0;       // Every ParameterService call.
    int64_t heartbeat_ms = 0;       // Every Heartbeat answer.
    double random_probability = 0;  // Of a ParameterService call being delayed random_ms more.
    int64_t random_ms = 0;
  };
  void SetDelays(const Delays& delays);
  Delays delays() const;
  // Slow links: the delay this task adds to its own calls to each peer named ("ps:1"), in ms.
  // Replaces the links set before.
  void SetLinkDelays(std::map<std::string, int64_t> delays);
  std::map<std::string, int64_t> link_delays() const;
  // The delay of the link to `peer` (a short name), 0 when none: one relaxed load when no link
  // is delayed.
  int64_t LinkDelayMs(const std::string& peer) const;
  // Calls delayed at random so far.
  int64_t random_delays() const { return random_delays_.load(); }
  // Before a ParameterService call: the delays asked (the random one logged, so that tests know
  // which calls were slowed), and the blocking wedge when armed.
  void BeforeParameterCall();
  // Before a Heartbeat answer.
  void BeforeHeartbeat() const;
  // True when this Push's answer is to be lost (one of the first N).
  bool TakeDroppedPushAnswer();

  // The training thread's next parameter call deadlocks (MaybeDeadlock).
  void ArmDeadlock() { deadlock_armed_.store(true); }
  // The next ParameterService call served blocks (MaybeBlockParameterCall).
  void ArmBlockParameterService() { block_armed_.store(true); }

  // On the training thread before a parameter call: when armed, starts a thread "deadlock-peer"
  // and deadlocks with it on two mutexes; never returns then. One relaxed load otherwise.
  void MaybeDeadlock();
  // In a ParameterService handler: when armed, the first call blocks until Release() and every
  // later one waits behind it. One relaxed load otherwise.
  void MaybeBlockParameterCall();
  // Lets blocked ParameterService calls return (the task is stopping). Idempotent.
  void Release();

 private:
  void TakeAThenB();
  void TakeBThenA();
  void BlockForever();

  std::atomic<int64_t> parameter_delay_ms_;
  std::atomic<int64_t> heartbeat_delay_ms_{0};
  std::atomic<double> random_delay_probability_{0};
  std::atomic<int64_t> random_delay_ms_{0};
  std::atomic<int64_t> random_delays_{0};
  std::atomic<bool> any_link_delay_{false};
  mutable std::mutex link_mu_;                    // Guards link_delay_ms_.
  std::map<std::string, int64_t> link_delay_ms_;  // Peer short name -> ms.
  std::atomic<int> drop_push_answers_;
  std::atomic<bool> deadlock_armed_{false};
  std::atomic<bool> block_armed_{false};
  std::mutex lock_a_;
  std::mutex lock_b_;
  std::atomic<int> first_locks_taken_{0};
  std::mutex serve_mu_;    // Held by the blocked call: later calls wait for it.
  std::mutex release_mu_;  // Guards released_.
  std::condition_variable release_cv_;
  bool released_ = false;
};

}  // namespace trainscope
