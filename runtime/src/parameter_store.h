#pragma once
// The variables a ps task holds: creation with dtype/shape checks, reads, and SGD updates,
// within a memory budget. Knows nothing of gRPC or protobuf.

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <unordered_set>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "trainscope/runtime/tensor.h"

namespace trainscope {

struct ParameterStoreOptions {
  std::string task_name;           // "ps:0", used in every error.
  int64_t memory_limit_bytes = 0;  // 0 = no budget.
};

// Thread-safe. Each variable has its own lock; the variable map takes a reader lock on reads
// and updates, a writer lock only to create a variable.
class ParameterStore {
 public:
  explicit ParameterStore(ParameterStoreOptions options);

  // Creates `name` with `initial` (bytes of `spec`). Returns true when it already existed with
  // the same dtype and shape (its value is kept). INVALID_ARGUMENT on a dtype/shape mismatch
  // with an existing variable or bytes that do not match `spec`; RESOURCE_EXHAUSTED past the
  // memory budget. `from` names the sending task in errors.
  absl::StatusOr<bool> Create(const std::string& name, const TensorSpec& spec,
                              absl::string_view initial, absl::string_view from);

  // Copies the value of `name` into `*out` and its dtype/shape into `*spec`.
  absl::Status Read(const std::string& name, TensorSpec* spec, std::string* out) const;

  // Where the time of an update went.
  struct Timing {
    double queue_seconds = 0;  // waiting for the variable's lock
    double apply_seconds = 0;  // the update itself
  };

  // value -= learning_rate * gradient. The gradient's dtype and shape must match the variable.
  // Fills `timing` when given.
  absl::Status ApplyGradient(const std::string& name, const TensorSpec& spec,
                             absl::string_view gradient, float learning_rate,
                             absl::string_view from, Timing* timing = nullptr);

  int64_t bytes_held() const { return bytes_held_.load(std::memory_order_relaxed); }
  int64_t num_variables() const;
  uint64_t updates_applied() const { return updates_applied_.load(std::memory_order_relaxed); }

 private:
  struct Variable {
    TensorSpec spec;
    mutable std::mutex mu;
    std::string value ABSL_GUARDED_BY(mu);
  };
  absl::StatusOr<Variable*> Find(const std::string& name, absl::string_view from) const;

  const ParameterStoreOptions options_;
  mutable std::shared_mutex map_mu_;
  std::map<std::string, std::unique_ptr<Variable>, std::less<>> variables_ ABSL_GUARDED_BY(map_mu_);
  std::atomic<int64_t> bytes_held_{0};
  std::atomic<uint64_t> updates_applied_{0};
};

// The ids of the Push requests a ps applied recently, per sender, so that a retried Push (its
// first attempt applied, the answer lost) is answered without being applied twice. The newest
// `per_sender` ids of each sender are kept: a worker retries only the pushes of its current step,
// which are its newest, so a count bounds memory and holds however long an outage lasts (a time
// window would have to outlast the worker's --ps_patience_s). Thread-safe; senders do not contend.
class RecentRequests {
 public:
  explicit RecentRequests(size_t per_sender) : per_sender_(per_sender) {}
  // Records the id and returns true when it is new; false when it is among the kept ones.
  // A sender at a new incarnation starts afresh.
  bool Insert(const std::string& sender, uint64_t incarnation, uint64_t sequence);
  // Forgets an id whose request was not applied after all (it failed), so a retry applies it.
  void Erase(const std::string& sender, uint64_t sequence);

 private:
  struct Sender {
    std::mutex mu;
    uint64_t incarnation ABSL_GUARDED_BY(mu) = 0;
    std::unordered_set<uint64_t> seen ABSL_GUARDED_BY(mu);
    std::deque<uint64_t> order ABSL_GUARDED_BY(mu);  // Oldest first.
  };
  Sender* Find(const std::string& sender);

  const size_t per_sender_;
  std::shared_mutex mu_;
  std::map<std::string, std::unique_ptr<Sender>> senders_ ABSL_GUARDED_BY(mu_);
};

}  // namespace trainscope
