// The wedges of fault_injector.h. The functions the stacks show are kept out of line, so that a
// snapshot of a wedged task names them.
#include "fault_injector.h"

#include <pthread.h>

#include <chrono>
#include <thread>

#include "spdlog/spdlog.h"

namespace trainscope {

void FaultInjector::MaybeDeadlock() {
  if (!deadlock_armed_.load(std::memory_order_relaxed)) return;
  if (!deadlock_armed_.exchange(false)) return;
  spdlog::warn("fault injected: the training thread now deadlocks with thread deadlock-peer");
  std::thread peer([this] {
    pthread_setname_np(pthread_self(), "deadlock-peer");
    TakeBThenA();
  });
  peer.detach();
  TakeAThenB();
}

__attribute__((noinline)) void FaultInjector::TakeAThenB() {
  std::lock_guard a(lock_a_);
  first_locks_taken_.fetch_add(1);
  while (first_locks_taken_.load() < 2) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::lock_guard b(lock_b_);  // Never: deadlock-peer holds it and waits for lock_a_.
}

__attribute__((noinline)) void FaultInjector::TakeBThenA() {
  std::lock_guard b(lock_b_);
  first_locks_taken_.fetch_add(1);
  while (first_locks_taken_.load() < 2) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::lock_guard a(lock_a_);  // Never: the training thread holds it and waits for lock_b_.
}

void FaultInjector::MaybeBlockParameterCall() {
  if (!block_armed_.load(std::memory_order_relaxed)) return;
  std::lock_guard serve(serve_mu_);  // Later calls wait here, behind the blocked one.
  BlockForever();
}

__attribute__((noinline)) void FaultInjector::BlockForever() {
  std::unique_lock lock(release_mu_);
  if (!released_) {
    spdlog::warn("fault injected: this ParameterService call blocks until the task stops");
  }
  release_cv_.wait(lock, [&] { return released_; });
}

void FaultInjector::Release() {
  {
    std::lock_guard lock(release_mu_);
    released_ = true;
  }
  release_cv_.notify_all();
}

}  // namespace trainscope
