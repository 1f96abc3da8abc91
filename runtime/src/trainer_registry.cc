// The trainers of a task and their Done; see trainer_registry.h.
#include "trainer_registry.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "spdlog/spdlog.h"

namespace trainscope {

TrainerRegistry::TrainerRegistry(const ClusterSpec& cluster, TaskRef self)
    : cluster_(cluster), self_(std::move(self)) {
  for (const TaskRef& t : cluster_.AllTasks()) {
    if (IsTrainer(t.role)) ++trainers_;
  }
}

void TrainerRegistry::RecordHandshake(const TaskRef& from, uint64_t incarnation) {
  std::lock_guard lock(mu_);
  handshakes_[from] = incarnation;
}

absl::StatusOr<int> TrainerRegistry::MarkDone(const TaskRef& from, uint64_t incarnation) {
  std::lock_guard lock(mu_);
  auto refuse = [&](absl::string_view why) {
    std::string message = absl::StrCat(self_.ShortName(), " refused Done from ", from.ShortName(),
                                       " (incarnation ", absl::Hex(incarnation), "): ", why);
    spdlog::warn("{}", message);
    return absl::PermissionDeniedError(message);
  };
  if (!IsTrainer(from.role) || cluster_.FindAddress(from) == nullptr) {
    return refuse("the cluster spec lists no such worker or chief");
  }
  auto it = handshakes_.find(from);
  if (it == handshakes_.end()) return refuse("it never created a session with this task");
  if (it->second != incarnation) {
    return refuse(
        absl::StrCat("its session with this task is from incarnation ", absl::Hex(it->second)));
  }
  const bool fresh = done_.insert(from).second;
  const int remaining = std::max(0, trainers_ - static_cast<int>(done_.size()));
  if (fresh) {
    spdlog::info("{} finished training; {} of {} trainers still running", from.ShortName(),
                 remaining, trainers_);
  }
  cv_.notify_all();
  return remaining;
}

bool TrainerRegistry::WaitAllDone(const std::function<bool()>& stopping) {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return stopping() || static_cast<int>(done_.size()) >= trainers_; });
  return !stopping();
}

void TrainerRegistry::Wake() {
  std::lock_guard lock(mu_);
  cv_.notify_all();
}

}  // namespace trainscope
