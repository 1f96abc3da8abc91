#pragma once
// The state decision for one watched task: it takes the results of heartbeat polls (plain
// structs, no protobuf) and first-hand facts about the local process (/proc), and says which
// DESIGN.md state the task is in and why. Time is injected, so tests feed synthetic histories.

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "trainscope/common/cluster_spec.h"
#include "trainscope/common/proc.h"
#include "trainscope/sidecar/cgroup_watch.h"
#include "trainscope/sidecar/detector.h"
#include "trainscope/sidecar/edge_watch.h"
#include "trainscope/sidecar/task_view.h"

namespace trainscope::sidecar {

// Thresholds of the state decision. Defaults suit --heartbeat_interval_ms=100.
struct TrackerOptions {
  double interval_s = 0.1;          // Poll interval.
  double hung_after_s = 1.0;        // Silence before hung/unreachable (with phi >= phi_hung).
  double phi_hung = 8;              // Suspicion needed for hung/unreachable.
  double phi_late = 3;              // Suspicion from which an answer counts as late (slow).
  double stall_after_s = 10;        // Steps frozen this long while expecting progress: stalled.
  double blocked_after_s = 1;       // Waiting on peers this long: blocked.
  double slow_latency_factor = 10;  // Latency this many times its usual ...
  double slow_latency_min_s = 0.2;  // ... and at least this much above it: slow.
  double slow_step_factor = 5;      // Step time this many times its usual (or peers'): slow.
  double slow_step_min_s = 0.2;
  double slow_serve_factor = 10;   // A ps's calls take this many times their usual time ...
  double slow_serve_min_s = 0.05;  // ... and at least this much more: the ps is slow.
  double serve_window_s = 1;       // Over this recent window.
  double relearn_s = 1;            // After a sidecar pause, no dead/hung/unreachable this long.
  double min_stddev_s = 0.05;      // Detector floor (see PhiAccrualOptions).
  CgroupWatchOptions cgroup;       // Throttling and memory-limit thresholds.
  bool edges = true;               // Each peer's latency against its own past (EdgeWatch).
};

// A valid heartbeat answer, converted from HeartbeatResponse at the gRPC edge.
// A heartbeat as the poller decoded it: the task's report (task_view.h), and what only the
// tracker reads to decide its state.
struct HeartbeatInfo : TaskReport {
  std::string cluster_name;
  TaskRef task;
  bool waiting = false;
  std::string waiting_what;
  double waiting_since_unix = 0;
  std::vector<PeerInfo> waiting_on;
  // The last step recovered from a failure (retried calls, a restarted ps): its time is no
  // measure of speed.
  bool last_step_recovered = false;
  // ps tasks: ParameterService calls served so far and their time on the ps (cumulative).
  bool serving = false;
  int64_t served_calls = 0;
  double served_seconds = 0;
  double served_queue_seconds = 0;
  double served_work_seconds = 0;
  // ps tasks: the step of the checkpoint it restored its variables from at startup; -1 when it
  // restored none.
  int64_t restored_step = -1;
  // Watched from outside: the task answered gRPC but not trainscope's Heartbeat (UNIMPLEMENTED),
  // so the poller made this answer from the call's round trip and /proc of the process holding
  // the port (pid, resources, `proc_state`; incarnation from its pid and start time). pid is 0
  // when no local process could be seen. It says nothing of steps, phases or peers.
  bool outside = false;
  std::string command;    // The owner's /proc/<pid>/comm.
  std::string log_path;   // The log read for TensorFlow's own words (tf_log.h); "" when none.
  char proc_state = '?';  // Its /proc state letter when it answered.
  // A local task's process as the poller verified it (process_identity.h): then `pid` is the
  // process as this node's /proc names it, `ns_pid` what the task reported (its own PID
  // namespace's), `pid_start_ticks` its start time. A local task that could not be verified has
  // pid 0 and `identity_error` says why: the reported pid is never read as the task.
  bool pid_verified = false;
  int64_t ns_pid = 0;
  // An outside task whose program reported through trainscope's hook (hook_reports.h): its
  // phase, steps, waits and calls are the hook's, so it is judged as a runtime task (outside is
  // then false). `hook_silent_s`: seconds since the last report when the reporter went silent
  // (its steps then stand still), else 0.
  bool hooked = false;
  double hook_silent_s = 0;
};

enum class FailureKind {
  kRefused,        // Nothing listens at the address.
  kTimeout,        // No answer before the deadline.
  kUnavailable,    // Connection failed or broke otherwise.
  kBadAnswer,      // Something answered, but not a heartbeat (garbage, too large, ...).
  kWrongIdentity,  // A heartbeat from another task or cluster.
};

// The result of one heartbeat poll.
struct PollResult {
  double sent_s = 0;      // Monotonic seconds.
  double received_s = 0;  // Monotonic seconds.
  bool ok = false;
  HeartbeatInfo heartbeat;  // When ok.
  FailureKind failure = FailureKind::kUnavailable;
  std::string error;  // When !ok: short words, e.g. "connection refused".
};

// Reads /proc/<pid>; nullopt when there is no such process. The real one is ReadProcStat.
using ProcReader = std::function<std::optional<ProcStat>(int64_t pid)>;

// Per-task bookkeeping the metrics need besides the view.
struct TaskCounters {
  std::array<int64_t, kNumTaskStates> transitions{};  // Entries into each state.
  // Heartbeat latency histogram (cumulative counts per bound of kLatencyBounds, then +Inf).
  std::vector<uint64_t> latency_buckets;
  uint64_t latency_count = 0;
  double latency_sum = 0;
};
// Upper bounds of the latency histogram, seconds.
const std::vector<double>& LatencyBounds();

// The state machine of one task. Not thread-safe: owned by the poll loop; others read the
// TaskView it returns.
class TaskTracker {
 public:
  // `local`: the task's host is this machine, so /proc evidence applies to the process the
  // poller verified as the task's (HeartbeatInfo::pid_verified), whatever host name it reports.
  TaskTracker(std::string cluster, TaskRef task, std::string address, bool local,
              TrackerOptions options, double now_s, double now_unix);

  // Feeds one poll result (results may arrive out of order; older ones are ignored for liveness).
  void OnResult(const PollResult& result);
  // The sidecar's own loop stalled: forget gap history and re-learn.
  void OnSidecarPause(double now_s);
  // Adaptive polling. True when this task may skip its poll at `now_s`: it is up, on this
  // machine (its process checkable in /proc), not waiting on peers, not done, has answered on
  // time with its usual latency for a while, and /proc (read now, cheap) shows its process
  // alive and not stopped. Any anomaly answers false, so the task is polled at the full rate.
  bool MaySkipPoll(double now_s, const ProcReader& proc);
  // The poll of this tick was skipped on purpose: the next answer comes one interval later,
  // which is not silence (the detector and the silence thresholds discount it).
  void OnPollSkipped();
  // Decides the state at `now_s` (monotonic) / `now_unix` (wall clock).
  const TaskView& Evaluate(double now_s, double now_unix, const ProcReader& proc);
  // Reads the cgroup of the task's process with `reader` from now on, in Evaluate (at most every
  // TrackerOptions::cgroup.sample_every_s, and once at its death): its facts go to the view, and
  // an OOM kill, sustained throttling and a memory limit nearly reached to the reason. Without
  // one (the default) the tracker reads no cgroup.
  void SetCgroupReader(CgroupReader reader);

  const TaskView& view() const { return view_; }
  const TaskCounters& counters() const { return counters_; }
  const TaskRef& task() const { return view_.task; }
  const std::string& address() const { return view_.address; }
  // Events worth logging since the last call (restarts, state changes).
  std::vector<std::string> TakeEvents();

 private:
  struct Decision {
    TaskState state;
    std::string reason;
  };
  Decision Decide(double now_s, double now_unix, const ProcReader& proc);
  Decision DecideSilent(double now_s, double silence, double phi, const ProcReader& proc);
  // What a silence means, as DecideSilent measured it.
  struct Silence {
    double now_s = 0;
    double seconds = 0;
    double phi = 0;
    bool late = false;
    bool long_silence = false;
    bool refused = false;
    std::string err_note;  // " (last error: ...)" or "".
  };
  // The verdict the task's own process gives (gone, a zombie, stopped, busy, silent), or none.
  std::optional<Decision> DecideByProcess(const Silence& silence, const ProcReader& proc);
  // The reason of an outside task that is up: its round trip and its process's /proc facts.
  std::string OutsideUpReason() const;
  // `lead` + "N on host" of the last answer's pid; "" when it gave none (an outside task seen
  // from another host).
  std::string WhereItRan(absl::string_view lead) const;
  Decision DecideAnswering(double now_s, double now_unix);
  // The verdicts DecideAnswering tries in turn; `age`: seconds since the last answer.
  std::optional<Decision> DecideBlocked(double age);
  std::optional<Decision> DecideStalled(double now_s, double age) const;
  std::optional<Decision> DecideSlowLatency() const;
  std::optional<Decision> DecideSlowStep() const;
  // The reason of an answering task that is up (its phase, answers, latency, step, restarts).
  std::string AnsweringUpReason() const;
  void ApplyHeartbeat(const HeartbeatInfo& hb, double received_s);
  double UsualLatency() const;
  // /proc evidence applies: local, pid known, and the task's hostname is ours.
  bool CanCheckProcess() const;
  // The task's process now (CanCheckProcess() first), or nullopt when it is gone; `*reused`: its
  // pid names a process started later (the task's died).
  std::optional<ProcStat> ReadOwnProcess(const ProcReader& proc, bool* reused) const;
  // "process 9486", or "process 9486 (pid 1 in its own PID namespace)".
  std::string ProcessWords() const;
  // Why this sidecar does not read the task's process, for a reason ("; cannot check ...").
  std::string CannotCheckWords() const;
  // Its process is stopped by a signal (state T in /proc): it cannot answer until continued.
  bool StoppedBySignal(const ProcReader& proc) const;
  // Reads its cgroup when due and says what it adds to `d`: dead by an OOM kill, slow by CPU
  // throttling (evidence appended to other states), near its memory limit (a warning).
  void AddCgroupEvidence(double now_s, Decision* d);
  // Its pace and its edges to each peer against their own past (edge_watch.h), into the view.
  void ObservePace(const HeartbeatInfo& hb, double t);

  TrackerOptions options_;
  bool local_;
  double watch_start_s_;
  double watch_start_unix_;
  PhiAccrualDetector detector_;
  TaskView view_;
  TaskCounters counters_;
  std::vector<std::string> events_;
  CgroupReader cgroup_reader_;
  CgroupWatch cgroup_;
  EdgeWatch edges_;                     // Its calls to each peer against their own past.
  StepPace pace_;                       // Its seconds per step, from its step counter,
  RaisedWatch steps_{kStepRaisedMinS};  // against its own past.

  bool answered_ = false;
  HeartbeatInfo last_hb_;
  double last_answer_s_ = 0;                // Monotonic time of the last valid answer.
  double silence_origin_s_ = 0;             // Silence is counted from max(last answer, this).
  std::optional<PollResult> last_failure_;  // Newer than the last answer, if any.
  std::string last_error_;                  // Last failure ever, for the missing reason.
  FailureKind last_failure_kind_ = FailureKind::kUnavailable;
  double relearn_until_s_ = 0;
  // Adaptive polling: time of the polls skipped on purpose since the last answer.
  double skipped_s_ = 0;
  int on_time_answers_ = 0;  // Consecutive valid answers, each on time.

  // Latency: recent values and a slowly adapting usual value.
  std::vector<double> recent_latency_;
  double usual_latency_ = -1;
  int latency_samples_ = 0;
  // The last incarnation known (an answer from outside may have none for a moment).
  bool known_incarnation_ = false;
  uint64_t last_known_incarnation_ = 0;
  int64_t last_known_pid_ = 0;
  // Steps.
  int64_t last_steps_ = -1;
  double last_progress_s_ = 0;
  bool expecting_ = false;
  double usual_step_ = -1;
  // What a ps served: the counters of the last heartbeat, recent per-call samples (time, calls,
  // seconds, queue, work), and the usual time per call.
  struct ServeSample {
    double t, calls, seconds, queue, work;
  };
  void ApplyServing(const HeartbeatInfo& hb, double t);
  std::optional<Decision> DecideServing(double now_s);
  std::optional<HeartbeatInfo> last_serving_;
  std::vector<ServeSample> serve_samples_;
  double usual_serve_ = -1;
  int64_t serve_calls_seen_ = 0;
  // Late-answer CPU check: process CPU time when the answer first became late.
  std::optional<double> late_cpu_;
  double late_since_s_ = 0;
};

}  // namespace trainscope::sidecar
