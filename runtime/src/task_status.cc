// Task and peer bookkeeping for heartbeats; see task_status.h.
#include "task_status.h"

namespace trainscope {
namespace {

void Add(std::atomic<double>& a, double v) {
  double old = a.load(std::memory_order_relaxed);
  while (!a.compare_exchange_weak(old, old + v, std::memory_order_relaxed)) {
  }
}

}  // namespace

void PeerHealth::RecordSuccess(double seconds) {
  consecutive_failures_.store(0, std::memory_order_relaxed);
  first_failure_.store(-1, std::memory_order_relaxed);
  last_success_.store(MonotonicSeconds(), std::memory_order_relaxed);
  network_failure_.store(false, std::memory_order_relaxed);
  if (seconds > 0) {
    // A recent mean: a third of each new call, so that a change shows within a few calls.
    const double old = latency_.load(std::memory_order_relaxed);
    latency_.store(old <= 0 ? seconds : old + (seconds - old) / 3, std::memory_order_relaxed);
  }
}

void PeerHealth::RecordFailure(std::string error, bool network) {
  if (consecutive_failures_.fetch_add(1, std::memory_order_relaxed) == 0) {
    first_failure_.store(MonotonicSeconds(), std::memory_order_relaxed);
  }
  network_failure_.store(network, std::memory_order_relaxed);
  std::lock_guard lock(mu_);
  last_error_ = std::move(error);
}

void PeerHealth::AddWait(double seconds) { Add(wait_, seconds); }

void PeerHealth::EndStep(double step_seconds) {
  const double wait = wait_.exchange(0, std::memory_order_relaxed);
  share_.store(step_seconds > 0 ? std::min(1.0, wait / step_seconds) : 0,
               std::memory_order_relaxed);
}

void PeerHealth::SetIdentity(uint64_t incarnation, std::string listen_address) {
  std::lock_guard lock(mu_);
  peer_incarnation_ = incarnation;
  peer_listen_address_ = std::move(listen_address);
}

PeerHealth::Snapshot PeerHealth::Read() const {
  Snapshot s;
  s.peer = peer_;
  s.address = address_;
  s.consecutive_failures = consecutive_failures_.load(std::memory_order_relaxed);
  double last = last_success_.load(std::memory_order_relaxed);
  s.seconds_since_success = last < 0 ? -1 : MonotonicSeconds() - last;
  s.connected = last >= 0 && s.consecutive_failures == 0;
  const double first = first_failure_.load(std::memory_order_relaxed);
  s.seconds_failing = first < 0 || s.consecutive_failures == 0 ? 0 : MonotonicSeconds() - first;
  s.latency_seconds = latency_.load(std::memory_order_relaxed);
  s.step_share = share_.load(std::memory_order_relaxed);
  s.network_failure = network_failure_.load(std::memory_order_relaxed);
  std::lock_guard lock(mu_);
  s.last_error = last_error_;
  s.peer_incarnation = peer_incarnation_;
  s.peer_listen_address = peer_listen_address_;
  return s;
}

PeerHealth* TaskStatus::Peer(const TaskRef& peer, const std::string& address) {
  std::lock_guard lock(mu_);
  auto& slot = peers_[peer];
  if (!slot) slot = std::make_unique<PeerHealth>(peer, address);
  return slot.get();
}

void TaskStatus::StartWaiting(std::string what, std::vector<TaskRef> peers) {
  std::lock_guard lock(mu_);
  waiting_ = true;
  waiting_what_ = std::move(what);
  waiting_since_unix_ = UnixSeconds();
  waiting_on_ = std::move(peers);
}

void TaskStatus::UpdateWaiting(std::vector<TaskRef> peers) {
  std::lock_guard lock(mu_);
  waiting_on_ = std::move(peers);
}

void TaskStatus::StopWaiting() {
  std::lock_guard lock(mu_);
  waiting_ = false;
  waiting_on_.clear();
}

void TaskStatus::RecordStep(double seconds) {
  steps_.fetch_add(1, std::memory_order_relaxed);
  last_step_seconds_.store(seconds, std::memory_order_relaxed);
  last_step_recovered_.store(step_recovering_.exchange(false, std::memory_order_relaxed),
                             std::memory_order_relaxed);
  std::lock_guard lock(mu_);
  for (auto& [ref, health] : peers_) health->EndStep(seconds);
}

void TaskStatus::RecordServed(double seconds, double queue_seconds, double work_seconds) {
  served_calls_.fetch_add(1, std::memory_order_relaxed);
  Add(served_seconds_, seconds);
  Add(served_queue_seconds_, queue_seconds);
  Add(served_work_seconds_, work_seconds);
}

TaskStatus::Snapshot TaskStatus::Read() const {
  Snapshot s;
  s.phase = phase_.load();
  s.steps = steps_.load();
  s.last_step_seconds = last_step_seconds_.load();
  s.last_step_recovered = last_step_recovered_.load(std::memory_order_relaxed);
  s.expects_progress = expects_progress_.load();
  s.served_calls = served_calls_.load(std::memory_order_relaxed);
  s.served_seconds = served_seconds_.load(std::memory_order_relaxed);
  s.served_queue_seconds = served_queue_seconds_.load(std::memory_order_relaxed);
  s.served_work_seconds = served_work_seconds_.load(std::memory_order_relaxed);
  std::lock_guard lock(mu_);
  s.waiting = waiting_;
  s.waiting_what = waiting_what_;
  s.waiting_since_unix = waiting_since_unix_;
  for (const TaskRef& ref : waiting_on_) {
    if (auto it = peers_.find(ref); it != peers_.end()) s.waiting_on.push_back(it->second->Read());
  }
  for (const auto& [ref, health] : peers_) s.peers.push_back(health->Read());
  return s;
}

}  // namespace trainscope
