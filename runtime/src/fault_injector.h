#pragma once
// Wedges a task for real, so that tests (and people trying trainscope) see what a stuck task
// looks like: the training thread deadlocked with a second thread on two mutexes taken in
// opposite order, and a ParameterService call that blocks forever with every later one queued
// behind it. Armed by InjectFault on a task started with --enable_fault_injection; neither can
// be undone (restart the task). Thread-safe.

#include <atomic>
#include <condition_variable>
#include <mutex>

namespace trainscope {

class FaultInjector {
 public:
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
