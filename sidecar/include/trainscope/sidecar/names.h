#pragma once
// Every metric name, label name, state name and HTTP path the sidecar exports, in one place, so
// that dashboards, alert rules and tests can be checked against them. Constants only.

#include <string_view>

namespace trainscope::sidecar::names {

// Labels. Never `job` or `instance`: Prometheus owns those.
inline constexpr std::string_view kLabelCluster = "cluster";
inline constexpr std::string_view kLabelRole = "role";
inline constexpr std::string_view kLabelTask = "task";
inline constexpr std::string_view kLabelState = "state";
inline constexpr std::string_view kLabelPeerRole = "peer_role";
inline constexpr std::string_view kLabelPeerTask = "peer_task";
inline constexpr std::string_view kLabelReason = "reason";
// A node of the exchange: its id, host:port of its sidecar's exchange (NodeView.node).
inline constexpr std::string_view kLabelNode = "node";
inline constexpr std::string_view kLabelStatus = "status";
inline constexpr std::string_view kLabelDirection = "direction";
inline constexpr std::string_view kDirectionSent = "sent";
inline constexpr std::string_view kDirectionReceived = "received";

// Per watched task (local tasks only: a sidecar exports what it has seen first-hand).
// 1 when the task's state is `up`, else 0 (also 0 for `done`: alert on state="dead", not on up).
inline constexpr std::string_view kTaskUp = "trainscope_task_up";
// 1 while the task and a peer are both alive (each answers its own sidecar) but cannot reach
// each other; 0 otherwise. Each sidecar exports it for its own node's tasks only.
inline constexpr std::string_view kTaskPartitioned = "trainscope_task_partitioned";
// 1 per (task, peer) pair of a partition, exported by the sidecar of `task` while it lasts
// (labels peer_role, peer_task).
inline constexpr std::string_view kTaskPartition = "trainscope_task_partition";
// 1 for the task's current state, 0 for every other state (one series per state).
inline constexpr std::string_view kTaskState = "trainscope_task_state";
// Seconds a blocked task has been waiting on each peer (series exist only while waiting).
inline constexpr std::string_view kTaskBlockedSeconds = "trainscope_task_blocked_seconds";
// Seconds since the last valid heartbeat answer (since watching began when never).
inline constexpr std::string_view kTaskHeartbeatAge = "trainscope_task_heartbeat_age_seconds";
// Restarts seen (incarnation changes).
inline constexpr std::string_view kTaskRestarts = "trainscope_task_restarts_total";
// Entries into each state (one series per state); a soak counts false alarms with it.
inline constexpr std::string_view kTaskTransitions = "trainscope_task_state_transitions_total";
// The failure detector's suspicion level (phi; 0 while answers come on time).
inline constexpr std::string_view kTaskSuspicion = "trainscope_task_heartbeat_suspicion";
// Heartbeat round-trip latency (histogram) and the latest one (gauge).
inline constexpr std::string_view kTaskHeartbeatLatency =
    "trainscope_task_heartbeat_latency_seconds";
inline constexpr std::string_view kTaskHeartbeatLastLatency =
    "trainscope_task_heartbeat_last_latency_seconds";
// Progress counter reported by the task (steps or updates applied).
inline constexpr std::string_view kTaskSteps = "trainscope_task_steps_total";
// Duration of the task's last step.
inline constexpr std::string_view kTaskLastStepSeconds = "trainscope_task_last_step_seconds";
// Resource usage the task reports about itself.
inline constexpr std::string_view kTaskCpuSeconds = "trainscope_task_cpu_seconds_total";
inline constexpr std::string_view kTaskResidentBytes = "trainscope_task_resident_memory_bytes";
inline constexpr std::string_view kTaskThreads = "trainscope_task_threads";
inline constexpr std::string_view kTaskOpenFds = "trainscope_task_open_fds";

// The sidecar itself.
inline constexpr std::string_view kSidecarWatchedTasks = "trainscope_sidecar_watched_tasks";
inline constexpr std::string_view kSidecarPauses = "trainscope_sidecar_pauses_total";
inline constexpr std::string_view kSidecarPeerErrors = "trainscope_sidecar_peer_errors_total";
inline constexpr std::string_view kSidecarPeers = "trainscope_sidecar_peers";
// The exchange between sidecars: other sidecars by status (alive, suspect, silent, left),
// messages and payload bytes by direction, node records learned and refused.
inline constexpr std::string_view kSidecarMembers = "trainscope_sidecar_members";
inline constexpr std::string_view kSidecarExchangeMessages =
    "trainscope_sidecar_exchange_messages_total";
inline constexpr std::string_view kSidecarExchangeBytes = "trainscope_sidecar_exchange_bytes_total";
inline constexpr std::string_view kSidecarRecordsLearned =
    "trainscope_sidecar_exchange_records_learned_total";
inline constexpr std::string_view kSidecarRecordsRefused =
    "trainscope_sidecar_exchange_records_refused_total";
// 1 while this node is cut off from every other node.
inline constexpr std::string_view kSidecarIsolated = "trainscope_sidecar_isolated";
// First-hand alerts posted to --alertmanager_url: alerts (firing or resolved) by `status`, ok
// (accepted) or failed (the post failed; each retry counts again); alerts dropped from a full
// queue; alerts this sidecar says are firing now.
inline constexpr std::string_view kSidecarAlertsSent = "trainscope_sidecar_alerts_sent_total";
inline constexpr std::string_view kSidecarAlertsDropped = "trainscope_sidecar_alerts_dropped_total";
inline constexpr std::string_view kSidecarAlertsFiring = "trainscope_sidecar_alerts_firing";
// Snapshots of stuck tasks' threads (stack_keeper.h): taken (automatic and on demand), failed,
// the bytes kept now, and the longest pause of one thread in the last capture.
inline constexpr std::string_view kSidecarSnapshots = "trainscope_sidecar_snapshots_total";
inline constexpr std::string_view kSidecarSnapshotFailures =
    "trainscope_sidecar_snapshot_failures_total";
inline constexpr std::string_view kSidecarSnapshotBytes = "trainscope_sidecar_snapshot_bytes";
inline constexpr std::string_view kSidecarSnapshotPause =
    "trainscope_sidecar_snapshot_last_pause_seconds";
// 1, labelled with this sidecar's cluster, node id (`node`) and `hostname`: what joins a
// scrape target (job, instance) to its node, so an alert on a target can be inhibited by one on
// the node.
inline constexpr std::string_view kSidecarInfo = "trainscope_sidecar_info";
inline constexpr std::string_view kLabelHostname = "hostname";
// 1 per other node (label `node`) this sidecar sees silent: it answers no probe, directly or
// through other nodes (cut off, or its machine down). Series exist only while that lasts, so a
// sidecar's series do not grow with the cluster while all is well.
inline constexpr std::string_view kNodeSilent = "trainscope_node_silent";
// 1 per task (cluster, role, task) of such a node, with its `node`: what lets Alertmanager hold
// back the alerts its tasks' peers raise about them (they name the task, not the node).
inline constexpr std::string_view kTaskNodeSilent = "trainscope_task_node_silent";

// The sidecar as the node's trace agent (OTLP TraceService/Export on its gRPC port).
// Spans received (valid or not) in Export calls.
inline constexpr std::string_view kTracesSpansReceived =
    "trainscope_sidecar_traces_spans_received_total";
// Spans held now (pending a join, slow or failed requests), and their estimated bytes.
inline constexpr std::string_view kTracesSpansKept = "trainscope_sidecar_traces_spans_kept";
inline constexpr std::string_view kTracesKeptBytes = "trainscope_sidecar_traces_kept_bytes";
// Spans not kept or forgotten early, by `reason`: invalid (bad ids), evicted (memory budget),
// trace_full (too many spans in one trace), duplicate (same span id twice).
inline constexpr std::string_view kTracesSpansDropped =
    "trainscope_sidecar_traces_spans_dropped_total";
// Forwarding to --otlp_upstream: spans sent, spans dropped (queue full or refused), failed
// Export calls.
inline constexpr std::string_view kTracesForwardedSpans =
    "trainscope_sidecar_traces_forwarded_spans_total";
inline constexpr std::string_view kTracesForwardDroppedSpans =
    "trainscope_sidecar_traces_forward_dropped_spans_total";
inline constexpr std::string_view kTracesForwardFailures =
    "trainscope_sidecar_traces_forward_failures_total";
inline constexpr std::string_view kReasonInvalid = "invalid";
inline constexpr std::string_view kReasonEvicted = "evicted";
inline constexpr std::string_view kReasonTraceFull = "trace_full";
inline constexpr std::string_view kReasonDuplicate = "duplicate";

// The standard process_* metrics of the sidecar come from the telemetry layer's one process
// collector (telemetry/include/trainscope/telemetry/names.h).

// Task states, as they appear in the API and in the `state` label.
inline constexpr std::string_view kStateMissing = "missing";
inline constexpr std::string_view kStateUp = "up";
inline constexpr std::string_view kStateSlow = "slow";
inline constexpr std::string_view kStateBlocked = "blocked";
inline constexpr std::string_view kStateStalled = "stalled";
inline constexpr std::string_view kStateHung = "hung";
inline constexpr std::string_view kStateUnreachable = "unreachable";
inline constexpr std::string_view kStateDead = "dead";
// Finished: its last heartbeat said phase done, then it exited. Not a problem.
inline constexpr std::string_view kStateDone = "done";

// HTTP paths on --http_port.
inline constexpr std::string_view kPathMetrics = "/metrics";
// ?local=1: this node's tasks only; ?task=ps:0: that task only.
inline constexpr std::string_view kPathTasks = "/api/v1/tasks";
inline constexpr std::string_view kPathSd = "/api/v1/sd";
// Snapshots of a stuck task's threads: ?task=worker:0[&fresh=1][&format=text].
inline constexpr std::string_view kPathStacks = "/api/v1/stacks";
inline constexpr std::string_view kPathHealthz = "/healthz";
inline constexpr std::string_view kPathStatusPage = "/";
// Slow ps requests (?method=&ps=&limit=), failed ones, and one trace (/api/v1/traces/<32 hex>).
inline constexpr std::string_view kPathTracesSlow = "/api/v1/traces/slow";
inline constexpr std::string_view kPathTracesErrors = "/api/v1/traces/errors";
inline constexpr std::string_view kPathTracesPrefix = "/api/v1/traces/";

}  // namespace trainscope::sidecar::names
