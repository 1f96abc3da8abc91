#pragma once
// What the sidecar knows and says about one task: its state, the reason in words, and the facts
// behind them. The working type of the trackers and the cluster view; api.h converts it to the
// proto TaskView that /api/v1/tasks, the status page, trainscopectl and the exchange between
// sidecars carry. Value types.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "trainscope/common/cluster_spec.h"

namespace trainscope::sidecar {

// Task states, as DESIGN.md names them, plus `done` (finished training and exited: not a
// problem). Order = severity for sorting (worst last), except kDone, which sorts below kUp.
enum class TaskState {
  kUp,
  kSlow,
  kStalled,
  kBlocked,
  kMissing,
  kUnreachable,
  kHung,
  kDead,
  kDone
};
inline constexpr int kNumTaskStates = 9;

std::string_view StateName(TaskState state);
// Parses a state name; false when unknown.
bool ParseStateName(std::string_view name, TaskState* state);
// How urgent a state is for a person (higher first on the page and in the table); done is -1.
int Severity(TaskState state);
// True for the states that need no attention: up, and done.
bool IsHealthy(TaskState state);
// True for hung, stalled and blocked: a task that waits where it should not, whose threads'
// stacks say where (stack_keeper.h, stuck_explain.h).
bool IsStuck(TaskState state);

// One peer as a task sees it (a PeerView of its heartbeat).
struct PeerInfo {
  TaskRef peer;
  std::string address;  // The address the task uses for the peer.
  bool connected = false;
  int64_t consecutive_failures = 0;
  std::string last_error;
  double seconds_since_success = -1;  // -1 when never.
  uint64_t peer_incarnation = 0;
  std::string peer_listen_address;
  // The failures are the network's (connection lost, no route), not the peer's own answer.
  bool network_failure = false;
  // Recent mean duration of calls to the peer, and the share of the last step spent on it.
  double latency_seconds = 0;
  double step_share = 0;
  // Filled by the sidecar (EdgeWatch): the median latency of the last 10 s, the usual one of
  // this edge (0 while learning it), and how long the recent has been well above the usual.
  double recent_latency_seconds = 0;
  double usual_latency_seconds = 0;
  double raised_seconds = 0;
  // Since the first failure of the current run of failures (0 when none, or not told).
  double seconds_failing = 0;
};

// A raise (raised_seconds, step_raised_seconds) held this long is a fail-slow verdict's first
// half, and news for the cluster: the node's record goes out again with the numbers of that
// moment (node_records.cc).
inline constexpr double kHeldRaiseS = 5;

// The task's calls to this peer fail (not connected, and the last one failed).
inline bool FailsToReach(const PeerInfo& p) { return !p.connected && p.consecutive_failures > 0; }

// How long a task's calls to a peer have been failing, as of its heartbeat: since the first
// failure of the run, or (a task that does not say) since its last success.
double FailingSeconds(const PeerInfo& p);

// A failure to reach a peer over the network is a partition once it has lasted this long, as
// observed (docs/sidecar.md, "Chaos"): time enough for the sidecars' probes to find that one of
// the two nodes is cut off from every node, and for a stopped peer (whose keepalive fails like a
// cut's) to be called hung. Crossing it is news: the node's record goes out again, so that every
// view judges the same failure, as it was observed, never aged by the clock of the reader.
inline constexpr double kPartitionAfterS = 1.2;

// A call in flight, as the task's last heartbeat listed it.
struct CallInFlight {
  std::string method;      // "Pull"
  TaskRef peer;            // The ps called, or (served) the caller.
  double age_seconds = 0;  // When the task answered.
  std::string trace_id;
  int64_t tid = 0;  // The thread waiting for it or serving it.
  bool served = false;
};

// A call a task has waited on this long is worth a look at the callee's node (a probe of its
// sidecar, out of turn).
inline constexpr double kWaitWorthALookS = 0.2;

// The task has waited on this call to a peer for kWaitWorthALookS or more.
inline bool WaitsLong(const CallInFlight& c) {
  return !c.served && c.age_seconds >= kWaitWorthALookS;
}

// A peer a blocked task waits on, with the sidecar's knowledge of that peer.
struct BlockedPeer {
  TaskRef peer;
  std::string address;  // The address the waiter uses.
  double seconds = 0;   // How long the task has been waiting.
  std::string last_error;
};

// How the reason of a task watched from outside (a gRPC server without trainscope's heartbeat)
// begins, in every state: the tracker writes it, the exchange keeps it in the words it gossips.
inline constexpr char kOutsideReasonPrefix[] = "watched from outside (no trainscope heartbeat): ";

// What the cgroup of a local task's process says (common/cgroup.h, detect's CgroupWatch), as its
// node's sidecar last read it; kept after the process is gone. A fact is absent when it was not
// known (no cgroup, a file missing, cgroup v1 has no peak); a limit or quota of 0 is none.
struct TaskCgroup {
  int version = 0;  // 1 or 2; 0: nothing read (not local, or no memory or cpu cgroup).
  std::optional<int64_t> memory_limit_bytes;
  std::optional<int64_t> memory_usage_bytes;
  std::optional<int64_t> memory_working_set_bytes;  // Usage without inactive page cache.
  std::optional<int64_t> oom_kills;                 // The kernel's OOM kills in the cgroup.
  std::optional<double> cpu_quota_cores;
  std::optional<int64_t> cpu_periods;
  std::optional<int64_t> cpu_throttled_periods;
  std::optional<double> cpu_throttled_seconds;
  // The share of the CFS periods of the last throttle window (10 s) it was throttled in, once
  // that window has been sampled.
  std::optional<double> cpu_throttled_ratio;
  // PSI `some avg10` of memory.pressure, 0-1: the share of the last 10 s in which some of its
  // tasks stalled waiting for memory.
  std::optional<double> memory_pressure_ratio;
  // Its process is gone and the cgroup's OOM kill counter rose since it was last seen alive.
  bool oom_killed = false;
};

// A task throttled in this share of the CFS periods of its last throttle window or more is held
// to its pace by its own CPU quota (CgroupWatchOptions::throttle_slow_share).
inline constexpr double kThrottledSlowShare = 0.5;
// Such a task: its calls' time is its own wait for CPU, neither its peers' nor the network's.
inline bool HeldByItsCpuQuota(const TaskCgroup& c) {
  return c.cpu_throttled_ratio && *c.cpu_throttled_ratio >= kThrottledSlowShare;
}

// What a task said of itself in its last valid heartbeat: the one shape a heartbeat has inside
// the sidecar. The poller makes it from the heartbeat proto (poller.cc, the way in), the task's
// view holds it (TaskView derives from it), and api.cc gives it to the API and the exchange (the
// way out). A new fact of the heartbeat touches the proto, this struct, those two edges and what
// uses it.
struct TaskReport {
  std::string phase;
  // A local task's: its process as this node's /proc names it, verified by its listening socket
  // (0 when it could not be: never the pid the task reports), with its start time (a reused pid
  // has another). A remote task's: as its node's sidecar says.
  int64_t pid = 0;
  uint64_t pid_start_ticks = 0;  // Local tasks only (not sent to other nodes).
  std::string identity_error;    // Local tasks: why `pid` is 0 though it answers.
  std::string hostname;
  uint64_t incarnation = 0;
  std::string listen_address;
  std::string runtime_version;
  std::string metrics_address;
  int64_t steps = 0;
  // The last step's duration; 0 when none, or (in a view) when that step recovered from a
  // failure (retried calls, a restarted ps: its time was the recovery's, not the task's speed).
  double last_step_seconds = 0;
  bool expects_progress = false;
  std::vector<PeerInfo> peers;
  double cpu_seconds = 0;
  int64_t resident_bytes = 0;
  int32_t threads = 0;
  int32_t open_fds = 0;
  // The calls in flight at the last heartbeat, and when the task answered it (its clock).
  std::vector<CallInFlight> inflight;
  double inflight_reported_unix = 0;
};

// A task as the sidecar sees it: its report, and the state and reason decided from it.
struct TaskView : TaskReport {
  std::string cluster;
  TaskRef task;
  std::string address;  // From the cluster spec.
  TaskState state = TaskState::kMissing;
  std::string reason;
  double since = 0;                     // Unix seconds when the current state began.
  std::vector<BlockedPeer> blocked_on;  // Non-empty only when blocked.
  std::string source;  // "" when watched by this sidecar; else the node that reported it.
  std::string node;    // The node (sidecar id) that watches it first-hand.
  std::string node_hostname;
  double learned_at = 0;  // Remote tasks: when this sidecar learned the current version.
  std::vector<std::string> partitioned_from;  // Tasks it is partitioned from ("ps:0").

  // Facts from the last valid heartbeat are the TaskReport's (zero/empty when none); these the
  // sidecar adds.
  int64_t restarts = 0;
  // Filled by the sidecar (StepPace, RaisedWatch): its seconds per step over the last 10 s (from
  // its step counter), the usual (0 while learning it), and how long the recent has been well
  // above the usual.
  double recent_step_seconds = 0;
  double usual_step_seconds = 0;
  double step_raised_seconds = 0;
  // ps tasks: the recent mean time of a ParameterService call on the ps itself, and its parts.
  double serve_seconds = 0;
  double serve_queue_seconds = 0;
  double serve_work_seconds = 0;
  // A stuck task of this node: where it is stuck (also at the end of `reason`), from its
  // snapshot and calls in flight; its words (not its numbers) changing is news for the exchange.
  std::string stuck_where;
  // Its cgroup's limits and what they did (local tasks; remote ones as their node said).
  TaskCgroup cgroup;

  // Detector facts.
  double heartbeat_age_seconds = -1;  // -1 when never answered.
  double latency_seconds = 0;         // Last round trip.
  double phi = 0;
  double observed_at = 0;  // Unix seconds of this view.

  // "waiting_on" in JSON: the names of blocked_on.
  std::vector<std::string> WaitingOn() const;
};

// True when `v` waits on a peer's answer for kWaitWorthALookS or more, or fails to reach one:
// news for the exchange (it probes that peer's node at once), though the state may not change.
bool HeldUpByAPeer(const TaskView& v);

// The view of `task` ("worker:0") in `views`; null when none.
const TaskView* FindTask(const std::vector<TaskView>& views, std::string_view task);

// Problems first (by severity), then by role and index.
void SortForPeople(std::vector<TaskView>& views);

}  // namespace trainscope::sidecar
