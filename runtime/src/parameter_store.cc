// Variable storage and SGD updates on a ps task; see parameter_store.h.
#include "parameter_store.h"

#include <Eigen/Core>
#include <chrono>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "trainscope/common/clock.h"

namespace trainscope {
namespace {

template <typename T>
void Sgd(std::string* value, absl::string_view gradient, float learning_rate) {
  const Eigen::Index n = static_cast<Eigen::Index>(value->size() / sizeof(T));
  Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>> w(reinterpret_cast<T*>(value->data()), n);
  Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>> g(
      reinterpret_cast<const T*>(gradient.data()), n);
  w -= static_cast<T>(learning_rate) * g;
}

}  // namespace

ParameterStore::ParameterStore(ParameterStoreOptions options) : options_(std::move(options)) {}

absl::StatusOr<bool> ParameterStore::Create(const std::string& name, const TensorSpec& spec,
                                            absl::string_view initial, absl::string_view from) {
  const int64_t size = spec.ByteSize();
  if (name.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(from, " asked ", options_.task_name, " to create a variable with no name"));
  }
  if (size < 0) {
    return absl::InvalidArgumentError(absl::StrCat("variable '", name, "' from ", from,
                                                   " has an invalid dtype or shape ",
                                                   spec.DebugString()));
  }
  if (static_cast<int64_t>(initial.size()) != size) {
    return absl::InvalidArgumentError(
        absl::StrCat("variable '", name, "' from ", from, " is ", spec.DebugString(), " (", size,
                     " bytes) but its initial value has ", initial.size(), " bytes"));
  }
  std::unique_lock lock(map_mu_);
  if (auto it = variables_.find(name); it != variables_.end()) {
    const TensorSpec& held = it->second->spec;
    if (held != spec) {
      return absl::InvalidArgumentError(
          absl::StrCat("variable '", name, "' on ", options_.task_name, " is ", held.DebugString(),
                       " but ", from, " creates it as ", spec.DebugString(),
                       ": every task must build the same model (check flags such as --features)"));
    }
    return true;
  }
  const int64_t held = bytes_held_.load();
  if (options_.memory_limit_bytes > 0 && held + size > options_.memory_limit_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat(options_.task_name, " cannot hold variable '", name, "' (", spec.DebugString(),
                     ", ", HumanBytes(size), "): it holds ", HumanBytes(held), " and would need ",
                     HumanBytes(held + size), " of its ", HumanBytes(options_.memory_limit_bytes),
                     " budget (--ps_memory_limit_bytes=", options_.memory_limit_bytes,
                     "); raise the budget or add ps tasks"));
  }
  auto variable = std::make_unique<Variable>();
  variable->spec = spec;
  {
    std::lock_guard var_lock(variable->mu);
    variable->value.assign(initial.data(), initial.size());
  }
  variables_.emplace(name, std::move(variable));
  bytes_held_.fetch_add(size);
  return false;
}

absl::StatusOr<ParameterStore::Variable*> ParameterStore::Find(const std::string& name,
                                                               absl::string_view from) const {
  std::shared_lock lock(map_mu_);
  auto it = variables_.find(name);
  if (it == variables_.end()) {
    return absl::NotFoundError(absl::StrCat(from, " asked ", options_.task_name, " for variable '",
                                            name, "', which it does not hold (was it created?)"));
  }
  return it->second.get();
}

absl::Status ParameterStore::Read(const std::string& name, TensorSpec* spec,
                                  std::string* out) const {
  auto variable = Find(name, "a Pull");
  if (!variable.ok()) return variable.status();
  *spec = (*variable)->spec;
  std::lock_guard lock((*variable)->mu);
  out->assign((*variable)->value);
  return absl::OkStatus();
}

absl::Status ParameterStore::ApplyGradient(const std::string& name, const TensorSpec& spec,
                                           absl::string_view gradient, float learning_rate,
                                           absl::string_view from, Timing* timing) {
  auto found = Find(name, from);
  if (!found.ok()) return found.status();
  Variable* variable = *found;
  if (spec != variable->spec) {
    return absl::InvalidArgumentError(absl::StrCat(
        "variable '", name, "' on ", options_.task_name, " is ", variable->spec.DebugString(),
        " but ", from, " pushed a gradient of ", spec.DebugString()));
  }
  if (static_cast<int64_t>(gradient.size()) != spec.ByteSize()) {
    return absl::InvalidArgumentError(
        absl::StrCat("gradient for '", name, "' from ", from, " is ", spec.DebugString(), " (",
                     spec.ByteSize(), " bytes) but carries ", gradient.size(), " bytes"));
  }
  using Clock = std::chrono::steady_clock;
  const auto wait_start = Clock::now();
  std::lock_guard lock(variable->mu);
  const auto apply_start = Clock::now();
  switch (spec.dtype) {
    case DType::kFloat:
      Sgd<float>(&variable->value, gradient, learning_rate);
      break;
    case DType::kDouble:
      Sgd<double>(&variable->value, gradient, learning_rate);
      break;
    default:
      return absl::InvalidArgumentError(absl::StrCat("variable '", name, "' is ",
                                                     DTypeName(spec.dtype),
                                                     ": only float32 and float64 are trainable"));
  }
  updates_applied_.fetch_add(1, std::memory_order_relaxed);
  if (timing != nullptr) {
    timing->queue_seconds = std::chrono::duration<double>(apply_start - wait_start).count();
    timing->apply_seconds = std::chrono::duration<double>(Clock::now() - apply_start).count();
  }
  return absl::OkStatus();
}

int64_t ParameterStore::num_variables() const {
  std::shared_lock lock(map_mu_);
  return static_cast<int64_t>(variables_.size());
}

RecentRequests::Sender* RecentRequests::Find(const std::string& sender) {
  {
    std::shared_lock lock(mu_);
    if (auto it = senders_.find(sender); it != senders_.end()) return it->second.get();
  }
  std::unique_lock lock(mu_);
  auto& slot = senders_[sender];
  if (!slot) slot = std::make_unique<Sender>();
  return slot.get();
}

bool RecentRequests::Insert(const std::string& sender, uint64_t incarnation, uint64_t sequence) {
  Sender* s = Find(sender);
  std::lock_guard lock(s->mu);
  if (s->incarnation != incarnation) {
    s->incarnation = incarnation;
    s->seen.clear();
    s->order.clear();
  }
  if (!s->seen.insert(sequence).second) return false;
  s->order.push_back(sequence);
  while (s->order.size() > per_sender_) {
    s->seen.erase(s->order.front());
    s->order.pop_front();
  }
  return true;
}

void RecentRequests::Erase(const std::string& sender, uint64_t sequence) {
  Sender* s = Find(sender);
  std::lock_guard lock(s->mu);
  s->seen.erase(sequence);  // Its entry in `order` expires harmlessly.
}

}  // namespace trainscope
