// InflightCalls: a map under one mutex; a task has a few calls in flight at a time.
#include "inflight_calls.h"

#include <sys/syscall.h>
#include <unistd.h>

namespace trainscope {

int64_t CurrentTid() {
  thread_local const int64_t tid = static_cast<int64_t>(::syscall(SYS_gettid));
  return tid;
}

uint64_t InflightCalls::Add(const Call& call) {
  std::lock_guard lock(mu_);
  const uint64_t id = next_id_++;
  calls_.emplace_hint(calls_.end(), id, call);
  return id;
}

void InflightCalls::Remove(uint64_t id) {
  std::lock_guard lock(mu_);
  calls_.erase(id);
}

std::vector<InflightCalls::Call> InflightCalls::Oldest(size_t max) const {
  std::vector<Call> out;
  std::lock_guard lock(mu_);
  for (const auto& [id, call] : calls_) {
    if (out.size() >= max) break;
    out.push_back(call);
  }
  return out;
}

}  // namespace trainscope
