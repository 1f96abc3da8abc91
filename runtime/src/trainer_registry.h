#pragma once
// Which trainers (workers and the chief) have created a session with this task, and which of
// them are done: a ps serves until all are. A Done is taken only from a trainer the cluster spec
// lists that handshook with this task at that incarnation: a forged or stale Done must not end
// a ps and lose its variables. Thread-safe.

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "trainscope/common/cluster_spec.h"

namespace trainscope {

// Jobs whose tasks train and so must say they are done before the ps tasks exit.
inline bool IsTrainer(const std::string& role) { return role != "ps" && role != "evaluator"; }

class TrainerRegistry {
 public:
  // The trainers are those of `cluster`; `self` names this task in what it logs and refuses.
  TrainerRegistry(const ClusterSpec& cluster, TaskRef self);

  // A task's handshake at `incarnation` (the last one counts).
  void RecordHandshake(const TaskRef& from, uint64_t incarnation);
  // `from` (at `incarnation`) finished; the trainers still running. PERMISSION_DENIED, saying
  // why, unless `from` is a trainer of the spec that handshook with this task at that
  // incarnation. A second Done from the same trainer counts once.
  absl::StatusOr<int> MarkDone(const TaskRef& from, uint64_t incarnation);
  // Blocks until every trainer is done (true), or `stopping` says so after a Wake (false).
  bool WaitAllDone(const std::function<bool()>& stopping);
  // Makes WaitAllDone look at `stopping` again.
  void Wake();
  int trainers() const { return trainers_; }

 private:
  const ClusterSpec& cluster_;
  const TaskRef self_;
  int trainers_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  std::set<TaskRef> done_ ABSL_GUARDED_BY(mu_);
  std::map<TaskRef, uint64_t> handshakes_ ABSL_GUARDED_BY(mu_);  // Incarnation by task.
};

}  // namespace trainscope
