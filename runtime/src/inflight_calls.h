#pragma once
// The calls a task has in flight, those it made (a worker's Pull to a ps) and those it serves
// (a ps's Pull from a worker), for its heartbeat: the sidecar shows them beside the stacks of a
// stuck task and joins them across tasks ("main thread waiting 41 s in Pull to ps:1").

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "trainscope/common/cluster_spec.h"

namespace trainscope {

// The Linux id of the calling thread (cached per thread).
int64_t CurrentTid();

// Thread-safe: one short lock to add a call and one to remove it.
class InflightCalls {
 public:
  struct Call {
    const char* method = "";  // A string literal: "Pull".
    TaskRef peer;             // The ps called, or the caller served.
    double start = 0;         // MonotonicSeconds().
    std::array<uint8_t, 16> trace_id{};
    bool traced = false;
    int64_t tid = 0;
    bool served = false;
  };

  // Registers `call` until Remove(id).
  uint64_t Add(const Call& call);
  void Remove(uint64_t id);
  // The oldest `max` calls in flight, oldest first.
  std::vector<Call> Oldest(size_t max) const;

 private:
  mutable std::mutex mu_;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<uint64_t, Call> calls_ ABSL_GUARDED_BY(mu_);  // By id: oldest first.
};

// Registers a call for the life of the scope. `calls` may be null (nothing is registered).
class InflightScope {
 public:
  InflightScope(InflightCalls* calls, const InflightCalls::Call& call)
      : calls_(calls), id_(calls != nullptr ? calls->Add(call) : 0) {}
  ~InflightScope() {
    if (calls_ != nullptr) calls_->Remove(id_);
  }
  InflightScope(const InflightScope&) = delete;
  InflightScope& operator=(const InflightScope&) = delete;

 private:
  InflightCalls* calls_;
  uint64_t id_;
};

}  // namespace trainscope
