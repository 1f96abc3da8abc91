#pragma once
// Snapshots of this node's stuck tasks: every thread's state, stack and wait, with the calls in
// flight. Taken once per incident when a task enters hung or stalled (blocked after a while),
// and on demand; the last few per task are kept within a memory bound. Captures run on the
// keeper's own thread (ptrace ties a tracee to the thread that attached it). At most one capture
// a second per task (per process): demands at once share one capture, and a demand whose asker
// left or whose deadline passed before its capture began is dropped.

#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "trainscope/forensics/capture.h"
#include "trainscope/sidecar/api.h"
#include "trainscope/sidecar/task_view.h"

namespace trainscope::sidecar {

struct KeeperOptions {
  std::string node;                // This sidecar's id, put in every snapshot.
  int per_task = 4;                // Snapshots kept per task.
  int64_t memory_bytes = 8 << 20;  // All snapshots together.
  double auto_min_interval_s = 2;  // Between automatic snapshots of one task.
  // Between two captures of one process (any trigger): a fresh one on demand within this gets the
  // result of the last one (the newest kept, or its error).
  double demand_min_interval_s = 1;
  double blocked_after_s = 2;  // A blocked task is captured after this long.
  double tick_s = 0.1;
  forensics::CaptureOptions capture;
  // A snapshot's summary, where it is stuck in words (the diagnosis' ExplainStuck without its
  // peers' states, given by the wiring); null: none.
  std::function<std::string(const TaskView& view, const pb::StackSnapshot& snapshot)> summarize;
};

struct KeeperStats {
  int64_t captures = 0;  // Snapshots taken (automatic and on demand).
  int64_t automatic = 0;
  int64_t failures = 0;  // Captures that failed (no process, ...).
  int64_t kept = 0;
  int64_t bytes_kept = 0;
  double last_pause_ms = 0;  // The longest thread pause of the last capture.
  // Demands for a fresh snapshot, by what answered them (names.h, kSidecarSnapshotDemands).
  int64_t demands_captured = 0;  // Its own capture.
  int64_t demands_shared = 0;    // Joined a capture that another demand made.
  int64_t demands_recent = 0;    // The result of a capture younger than demand_min_interval_s.
  int64_t demands_dropped = 0;   // Its asker left or its deadline passed first.
};

// How long a demand for a fresh snapshot may wait, and whether its asker is still there.
struct DemandOptions {
  double timeout_s = 10;
  std::function<bool()> cancelled;  // Polled while waiting; null: never.
};

// Thread-safe.
class StackKeeper {
 public:
  using Views = std::function<std::vector<TaskView>()>;
  // Captures a local task's process (view.pid, verified with view.pid_start_ticks).
  using Capturer = std::function<absl::StatusOr<forensics::ProcessSnapshot>(const TaskView& view)>;

  // `local`: this node's tasks (the watcher's views). `capture` defaults to forensics::Capture
  // with options.capture.
  StackKeeper(KeeperOptions options, Views local, Capturer capture = nullptr);
  ~StackKeeper();
  void Start();
  // Returns once the keeper's thread has stopped (a capture in progress finishes first).
  void Stop();

  // The snapshots kept of local `task`, newest first. With `fresh`, takes one first (or returns
  // the result of the last capture when it is younger than demand_min_interval_s; demands made
  // while one waits share it). NotFound when `task` is not watched here; FailedPrecondition (in
  // words) when a fresh one cannot be taken: the task never answered (no pid) or has exited;
  // DeadlineExceeded or Cancelled when `demand` gives up first.
  absl::StatusOr<pb::StackList> Stacks(const std::string& task, bool fresh,
                                       const DemandOptions& demand = {});
  // The newest snapshot of each task, a value the diagnosis reads (cluster_view.h); a new one
  // each time a snapshot is kept or dropped.
  std::shared_ptr<const NewestStacks> Newest() const;
  KeeperStats stats() const;

 private:
  struct Demand {
    std::string task;
    int64_t pid = 0;
    int waiters = 0;  // Askers still waiting; none left before it starts: dropped.
    bool done = false;
    absl::Status status;
  };
  // The last capture tried of a task, by any trigger.
  struct Attempt {
    int64_t pid = 0;
    double at = -1e300;  // MonotonicSeconds() when it began.
    bool done = false;   // Finished: `status` is its result.
    absl::Status status;
  };
  struct Incident {
    double since = 0;    // The state's start (TaskView.since).
    bool taken = false;  // Captured for this incident.
    double last_auto = -1e300;
  };

  void Loop();
  void Tick();
  void ServeDemands();
  void Finish(const std::shared_ptr<Demand>& d, absl::Status status);
  // The result of a capture of `pid` begun within demand_min_interval_s, if any.
  std::optional<absl::Status> Recent(const std::string& task, int64_t pid) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status AwaitCapture(const TaskView& view, const DemandOptions& options);
  absl::Status Take(const TaskView& view, const std::string& trigger);
  pb::StackSnapshot ToProto(const TaskView& view, const forensics::ProcessSnapshot& s,
                            const std::string& trigger) const;
  void Keep(const std::string& task, pb::StackSnapshot snapshot);
  void PublishNewest() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const KeeperOptions options_;
  const Views local_;
  const Capturer capture_;

  mutable std::mutex mu_;  // Guards everything below.
  std::condition_variable cv_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<std::shared_ptr<Demand>> demands_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::shared_ptr<Demand>> pending_ ABSL_GUARDED_BY(mu_);  // Per task.
  std::map<std::string, Attempt> attempts_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::deque<pb::StackSnapshot>> kept_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<const NewestStacks> newest_ ABSL_GUARDED_BY(mu_) =
      std::make_shared<NewestStacks>();
  KeeperStats stats_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Incident> incidents_;  // The keeper's thread only.
  std::thread thread_;
};

}  // namespace trainscope::sidecar
