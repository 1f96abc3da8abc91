// The faults of fault_injector.h. The functions the stacks of a wedge show are kept out of line,
// so that a snapshot of a wedged task names them.
#include "fault_injector.h"

#include <pthread.h>

#include <chrono>
#include <random>
#include <thread>

#include "spdlog/spdlog.h"

namespace trainscope {
namespace {

void SleepMs(int64_t ms) {
  if (ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

}  // namespace

FaultInjector::FaultInjector(int64_t parameter_delay_ms, int drop_push_answers)
    : parameter_delay_ms_(parameter_delay_ms), drop_push_answers_(drop_push_answers) {}

void FaultInjector::SetDelays(const Delays& d) {
  parameter_delay_ms_.store(d.parameter_ms);
  heartbeat_delay_ms_.store(d.heartbeat_ms);
  random_delay_ms_.store(d.random_ms);
  random_delay_probability_.store(d.random_probability);
}

FaultInjector::Delays FaultInjector::delays() const {
  return {parameter_delay_ms_.load(), heartbeat_delay_ms_.load(), random_delay_probability_.load(),
          random_delay_ms_.load()};
}

void FaultInjector::SetLinkDelays(std::map<std::string, int64_t> delays) {
  std::erase_if(delays, [](const auto& d) { return d.second <= 0; });
  std::lock_guard lock(link_mu_);
  link_delay_ms_ = std::move(delays);
  any_link_delay_.store(!link_delay_ms_.empty());
}

std::map<std::string, int64_t> FaultInjector::link_delays() const {
  std::lock_guard lock(link_mu_);
  return link_delay_ms_;
}

int64_t FaultInjector::LinkDelayMs(const std::string& peer) const {
  if (!any_link_delay_.load(std::memory_order_relaxed)) return 0;
  std::lock_guard lock(link_mu_);
  auto it = link_delay_ms_.find(peer);
  return it == link_delay_ms_.end() ? 0 : it->second;
}

void FaultInjector::BeforeParameterCall() {
  SleepMs(parameter_delay_ms_.load(std::memory_order_relaxed));
  MaybeBlockParameterCall();
  const double p = random_delay_probability_.load(std::memory_order_relaxed);
  if (p <= 0) return;
  thread_local std::mt19937_64 random{std::random_device{}()};
  if (std::uniform_real_distribution<double>(0, 1)(random) >= p) return;
  const int64_t ms = random_delay_ms_.load();
  random_delays_.fetch_add(1);
  spdlog::warn("fault injected: this call delayed {} ms (at random)", ms);
  SleepMs(ms);
}

void FaultInjector::BeforeHeartbeat() const { SleepMs(heartbeat_delay_ms_.load()); }

bool FaultInjector::TakeDroppedPushAnswer() {
  int left = drop_push_answers_.load();
  while (left > 0 && !drop_push_answers_.compare_exchange_weak(left, left - 1)) {
  }
  return left > 0;
}

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
