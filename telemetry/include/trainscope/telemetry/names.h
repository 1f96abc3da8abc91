#pragma once
// Every metric and label name a task or a sidecar exports on its /metrics, in one place, so that
// dashboards, alert rules and tests can be checked against them. gRPC call metrics follow gRFC
// A66 as Prometheus renders it; process metrics follow Prometheus' standard names. Constants only.

namespace trainscope::telemetry::names {

// Labels. `cluster`, `role`, `task` identify the exporting task (added by the scrape config
// from the sidecar's service discovery, and also exported as target info).
inline constexpr char kLabelCluster[] = "cluster";
inline constexpr char kLabelRole[] = "role";
inline constexpr char kLabelTask[] = "task";
inline constexpr char kLabelMethod[] = "grpc_method";      // "trainscope.v1.ParameterService/Pull"
inline constexpr char kLabelGrpcStatus[] = "grpc_status";  // "OK", "DEADLINE_EXCEEDED", ...
inline constexpr char kLabelPeerRole[] = "peer_role";
inline constexpr char kLabelPeerTask[] = "peer_task";
inline constexpr char kLabelPhase[] = "phase";
inline constexpr char kLabelMode[] = "mode";
inline constexpr char kLabelGpu[] = "gpu";

// gRFC A66 client metrics (per attempt and per call, labels method/status/peer_role).
inline constexpr char kClientAttemptStarted[] = "grpc_client_attempt_started_total";
inline constexpr char kClientAttemptDuration[] = "grpc_client_attempt_duration_seconds";
inline constexpr char kClientAttemptSentBytes[] =
    "grpc_client_attempt_sent_total_compressed_message_size_bytes";
inline constexpr char kClientAttemptRcvdBytes[] =
    "grpc_client_attempt_rcvd_total_compressed_message_size_bytes";
inline constexpr char kClientCallDuration[] = "grpc_client_call_duration_seconds";
// gRFC A66 server metrics.
inline constexpr char kServerCallStarted[] = "grpc_server_call_started_total";
inline constexpr char kServerCallDuration[] = "grpc_server_call_duration_seconds";
inline constexpr char kServerCallSentBytes[] =
    "grpc_server_call_sent_total_compressed_message_size_bytes";
inline constexpr char kServerCallRcvdBytes[] =
    "grpc_server_call_rcvd_total_compressed_message_size_bytes";

// Deadlines: the deadline each client call was given, and the share of it the call used
// (a call near 1.0 came close to DEADLINE_EXCEEDED).
inline constexpr char kClientDeadline[] = "trainscope_rpc_client_deadline_seconds";
inline constexpr char kClientDeadlineUsed[] = "trainscope_rpc_client_deadline_used_ratio";

// Per peer, without buckets (bounded by the cluster's size, one series per peer and method).
inline constexpr char kPeerCalls[] = "trainscope_rpc_peer_calls_total";
inline constexpr char kPeerErrors[] = "trainscope_rpc_peer_errors_total";
inline constexpr char kPeerDeadlineExceeded[] = "trainscope_rpc_peer_deadline_exceeded_total";
inline constexpr char kPeerLatencySum[] = "trainscope_rpc_peer_latency_seconds_total";

// Training (workers and chief).
inline constexpr char kSteps[] = "trainscope_training_steps_total";
inline constexpr char kStepDuration[] = "trainscope_training_step_duration_seconds";
inline constexpr char kLoss[] = "trainscope_training_loss";
inline constexpr char kExamples[] = "trainscope_training_examples_total";
inline constexpr char kExamplesPerSecond[] = "trainscope_training_examples_per_second";

// Parameter servers.
inline constexpr char kPsVariables[] = "trainscope_ps_variables";
inline constexpr char kPsBytesHeld[] = "trainscope_ps_bytes_held";
inline constexpr char kPsMemoryLimit[] = "trainscope_ps_memory_limit_bytes";
inline constexpr char kPsUpdates[] = "trainscope_ps_updates_applied_total";
inline constexpr char kPsQueueSeconds[] = "trainscope_ps_queue_seconds";
inline constexpr char kPsApplySeconds[] = "trainscope_ps_apply_seconds";
inline constexpr char kPsPushToApplySeconds[] = "trainscope_ps_push_to_apply_seconds";
inline constexpr char kPsInflight[] = "trainscope_ps_inflight_requests";

// Checkpoints: the checkpointing task (chief, or worker:0) saves them; a ps restores one.
inline constexpr char kCheckpointAge[] = "trainscope_checkpoint_age_seconds";
inline constexpr char kCheckpointDuration[] = "trainscope_checkpoint_duration_seconds";
inline constexpr char kCheckpointSize[] = "trainscope_checkpoint_size_bytes";
inline constexpr char kCheckpointSaves[] = "trainscope_checkpoint_saves_total";
inline constexpr char kCheckpointFailures[] = "trainscope_checkpoint_failures_total";
inline constexpr char kCheckpointRestores[] = "trainscope_checkpoint_restores_total";
// Calls refused because the caller's certificate does not name the task it claims to be.
inline constexpr char kIdentityRefused[] = "trainscope_tls_identity_refused_total";

// CreateSession.
inline constexpr char kSessionPhase[] = "trainscope_session_phase";  // 1 for the current phase
inline constexpr char kSessionWaitingSeconds[] = "trainscope_session_waiting_seconds";

// Tracing pipeline.
inline constexpr char kSpansStarted[] = "trainscope_trace_spans_started_total";
inline constexpr char kSpansExported[] = "trainscope_trace_spans_exported_total";
inline constexpr char kSpansDropped[] = "trainscope_trace_spans_dropped_total";
inline constexpr char kExportFailures[] = "trainscope_trace_export_failures_total";
// Flight recorder and tail sampler: calls recorded and read, lost to the ring before they were
// read, kept by reason (error, deadline, slow, slowest, requested, dropped: over the rate
// limit), callers' requests to keep our half (matched or missed), and the rings' memory.
inline constexpr char kTraceCallsRecorded[] = "trainscope_trace_calls_recorded_total";
inline constexpr char kTraceCallsOverwritten[] = "trainscope_trace_calls_overwritten_total";
inline constexpr char kTraceCallsKept[] = "trainscope_trace_calls_kept_total";
inline constexpr char kTraceKeepRequests[] = "trainscope_trace_keep_requests_total";
inline constexpr char kTraceBufferBytes[] = "trainscope_trace_buffer_bytes";
inline constexpr char kLabelReason[] = "reason";
inline constexpr char kLabelResult[] = "result";

// Process (Prometheus standard names) and node.
inline constexpr char kProcessCpuSeconds[] = "process_cpu_seconds_total";
inline constexpr char kProcessResidentBytes[] = "process_resident_memory_bytes";
inline constexpr char kProcessVirtualBytes[] = "process_virtual_memory_bytes";
inline constexpr char kProcessOpenFds[] = "process_open_fds";
inline constexpr char kProcessMaxFds[] = "process_max_fds";
inline constexpr char kProcessStartTime[] = "process_start_time_seconds";
inline constexpr char kProcessThreads[] = "process_threads";
inline constexpr char kNodeCpuSeconds[] = "trainscope_node_cpu_seconds_total";  // by mode
inline constexpr char kNodeMemoryTotal[] = "trainscope_node_memory_total_bytes";
inline constexpr char kNodeMemoryAvailable[] = "trainscope_node_memory_available_bytes";
inline constexpr char kGpuUtilization[] = "trainscope_gpu_utilization_ratio";
inline constexpr char kGpuMemoryUsed[] = "trainscope_gpu_memory_used_bytes";
inline constexpr char kGpuMemoryTotal[] = "trainscope_gpu_memory_total_bytes";

// Identity of the exporting task: value 1, labels cluster/role/task/version.
inline constexpr char kTaskInfo[] = "trainscope_task_info";

// ---- The sidecar's /metrics: what it decides about the tasks it watches, and itself.

// Labels of the sidecar's families besides cluster, role, task, peer_role, peer_task (above).
// Never `job` or `instance`: Prometheus owns those.
inline constexpr char kLabelState[] = "state";
// A node of the exchange: its id, host:port of its sidecar's exchange (NodeView.node).
inline constexpr char kLabelNode[] = "node";
inline constexpr char kLabelStatus[] = "status";
inline constexpr char kLabelDirection[] = "direction";
inline constexpr char kDirectionSent[] = "sent";
inline constexpr char kDirectionReceived[] = "received";

// Per watched task (local tasks only: a sidecar exports what it has seen first-hand).
// 1 when the task's state is `up`, else 0 (also 0 for `done`: alert on state="dead", not on up).
inline constexpr char kTaskUp[] = "trainscope_task_up";
// 1 while the task and a peer are both alive (each answers its own sidecar) but cannot reach
// each other; 0 otherwise. Each sidecar exports it for its own node's tasks only.
inline constexpr char kTaskPartitioned[] = "trainscope_task_partitioned";
// 1 per (task, peer) pair of a partition, exported by the sidecar of `task` while it lasts
// (labels peer_role, peer_task; and incident, the link's incident, once it is open).
inline constexpr char kTaskPartition[] = "trainscope_task_partition";
// The worker x ps map, for this node's callers: the recent latency (10 s median) of their
// slowest edges to a ps, at most 5 series (labels peer_role, peer_task).
inline constexpr char kTaskPeerLatency[] = "trainscope_task_peer_latency_seconds";
// 1 per slow link (caller, ps) of this node's callers, while it lasts (labels peer_role,
// peer_task): the edge is far above its row and its column, and above its own past.
inline constexpr char kTaskSlowLink[] = "trainscope_task_slow_link";
// 1 for the task's current state, 0 for every other state (one series per state).
inline constexpr char kTaskState[] = "trainscope_task_state";
// Seconds a blocked task has been waiting on each peer (series exist only while waiting).
inline constexpr char kTaskBlockedSeconds[] = "trainscope_task_blocked_seconds";
// Seconds since the last valid heartbeat answer (since watching began when never).
inline constexpr char kTaskHeartbeatAge[] = "trainscope_task_heartbeat_age_seconds";
// Restarts seen (incarnation changes).
inline constexpr char kTaskRestarts[] = "trainscope_task_restarts_total";
// Entries into each state (one series per state); a soak counts false alarms with it.
inline constexpr char kTaskTransitions[] = "trainscope_task_state_transitions_total";
// The failure detector's suspicion level (phi; 0 while answers come on time).
inline constexpr char kTaskSuspicion[] = "trainscope_task_heartbeat_suspicion";
// Heartbeat round-trip latency (histogram) and the latest one (gauge).
inline constexpr char kTaskHeartbeatLatency[] = "trainscope_task_heartbeat_latency_seconds";
inline constexpr char kTaskHeartbeatLastLatency[] =
    "trainscope_task_heartbeat_last_latency_seconds";
// Progress counter reported by the task (steps or updates applied).
inline constexpr char kTaskSteps[] = "trainscope_task_steps_total";
// Duration of the task's last step.
inline constexpr char kTaskLastStepSeconds[] = "trainscope_task_last_step_seconds";
// Resource usage the task reports about itself.
inline constexpr char kTaskCpuSeconds[] = "trainscope_task_cpu_seconds_total";
inline constexpr char kTaskResidentBytes[] = "trainscope_task_resident_memory_bytes";
inline constexpr char kTaskThreads[] = "trainscope_task_threads";
inline constexpr char kTaskOpenFds[] = "trainscope_task_open_fds";
// What the cgroup of a local task's process says (docs/sidecar.md, "Cgroup facts"), v1 or v2;
// a series exists only while its fact is known. Memory: the limit (only when there is one), the
// usage, the working set (usage without inactive page cache), the kernel's OOM kills in the
// cgroup (v1 memory.oom_control, v2 memory.events oom_kill), PSI `some avg10` of memory.pressure
// as a ratio. CPU: the quota in cores (only when there is one), CFS periods and the periods and
// seconds it was throttled (cpu.stat).
inline constexpr char kTaskMemoryLimitBytes[] = "trainscope_task_memory_limit_bytes";
inline constexpr char kTaskMemoryUsageBytes[] = "trainscope_task_memory_usage_bytes";
inline constexpr char kTaskMemoryWorkingSetBytes[] = "trainscope_task_memory_working_set_bytes";
inline constexpr char kTaskOomKills[] = "trainscope_task_oom_kills_total";
inline constexpr char kTaskMemoryPressure[] = "trainscope_task_memory_pressure_ratio";
inline constexpr char kTaskCpuQuotaCores[] = "trainscope_task_cpu_quota_cores";
inline constexpr char kTaskCpuPeriods[] = "trainscope_task_cpu_periods_total";
inline constexpr char kTaskCpuThrottledPeriods[] = "trainscope_task_cpu_throttled_periods_total";
inline constexpr char kTaskCpuThrottledSeconds[] = "trainscope_task_cpu_throttled_seconds_total";

// The sidecar itself.
inline constexpr char kSidecarWatchedTasks[] = "trainscope_sidecar_watched_tasks";
inline constexpr char kSidecarPauses[] = "trainscope_sidecar_pauses_total";
inline constexpr char kSidecarPeerErrors[] = "trainscope_sidecar_peer_errors_total";
inline constexpr char kSidecarPeers[] = "trainscope_sidecar_peers";
// The exchange between sidecars: other sidecars by status (alive, suspect, silent, left),
// messages and payload bytes by direction, node records learned and refused.
inline constexpr char kSidecarMembers[] = "trainscope_sidecar_members";
inline constexpr char kSidecarExchangeMessages[] = "trainscope_sidecar_exchange_messages_total";
inline constexpr char kSidecarExchangeBytes[] = "trainscope_sidecar_exchange_bytes_total";
inline constexpr char kSidecarRecordsLearned[] =
    "trainscope_sidecar_exchange_records_learned_total";
inline constexpr char kSidecarRecordsRefused[] =
    "trainscope_sidecar_exchange_records_refused_total";
inline constexpr char kSidecarExchangeRefused[] = "trainscope_sidecar_exchange_refused_total";
inline constexpr char kSidecarExchangeAuthenticated[] = "trainscope_sidecar_exchange_authenticated";
inline constexpr char kSidecarExchangeClosed[] = "trainscope_sidecar_exchange_closed";
// 1 while this node is cut off from every other node.
inline constexpr char kSidecarIsolated[] = "trainscope_sidecar_isolated";
// First-hand alerts posted to --alertmanager_url: alerts (firing or resolved) by `status`, ok
// (accepted) or failed (the post failed; each retry counts again); alerts dropped from a full
// queue; alerts this sidecar says are firing now.
inline constexpr char kSidecarAlertsSent[] = "trainscope_sidecar_alerts_sent_total";
inline constexpr char kSidecarAlertsDropped[] = "trainscope_sidecar_alerts_dropped_total";
inline constexpr char kSidecarAlertsFiring[] = "trainscope_sidecar_alerts_firing";
// Snapshots of stuck tasks' threads (stack_keeper.h): taken (automatic and on demand), failed,
// the bytes kept now, and the longest pause of one thread in the last capture.
inline constexpr char kSidecarSnapshots[] = "trainscope_sidecar_snapshots_total";
inline constexpr char kSidecarSnapshotFailures[] = "trainscope_sidecar_snapshot_failures_total";
inline constexpr char kSidecarSnapshotBytes[] = "trainscope_sidecar_snapshot_bytes";
inline constexpr char kSidecarSnapshotPause[] = "trainscope_sidecar_snapshot_last_pause_seconds";
// Demands for a fresh snapshot (/api/v1/stacks?fresh=1, or relayed by another node's sidecar) by
// `result`: captured (this demand's own capture), shared (joined a capture other demands made),
// recent (answered with a capture younger than a second: at most one a second per task), dropped
// (its asker left or its deadline passed before the capture began).
inline constexpr char kSidecarSnapshotDemands[] = "trainscope_sidecar_snapshot_demands_total";
// Requests to the sidecar's HTTP API refused, by `reason`: no_credential (an action without
// a bearer token or client certificate: 401), bad_token (a wrong token: 401), no_token_file (an
// action while no --api_token_file is set: 403).
inline constexpr char kSidecarApiRefused[] = "trainscope_sidecar_api_refused_total";
// 1, labelled with this sidecar's cluster, node id (`node`) and `hostname`: what joins a
// scrape target (job, instance) to its node, so an alert on a target can be inhibited by one on
// the node.
inline constexpr char kSidecarInfo[] = "trainscope_sidecar_info";
inline constexpr char kLabelHostname[] = "hostname";
// 1 per other node (label `node`) this sidecar sees silent: it answers no probe, directly or
// through other nodes (cut off, or its machine down). Series exist only while that lasts, so a
// sidecar's series do not grow with the cluster while all is well.
inline constexpr char kNodeSilent[] = "trainscope_node_silent";
// 1 per task (cluster, role, task) of such a node, with its `node`: what lets Alertmanager hold
// back the alerts its tasks' peers raise about them (they name the task, not the node).
inline constexpr char kTaskNodeSilent[] = "trainscope_task_node_silent";

// The ledger (sidecar/diagnose/ledger.h): every second of each worker and chief of this node,
// by `outcome`: productive, waiting (held by an incident), down (itself dead or gone quiet),
// redone (steps done again after a checkpoint restore), idle (before its session, or done).
// Counted from the sidecar's start; the store keeps the totals across restarts (the API's).
inline constexpr char kTrainingSeconds[] = "trainscope_training_seconds_total";
inline constexpr char kLabelOutcome[] = "outcome";
// Training seconds lost (waiting and down) to incidents, by the incident's `kind` (dead, hung,
// partition, slow, ...), over the whole cluster as this sidecar sees it.
inline constexpr char kIncidentLostSeconds[] = "trainscope_incident_lost_seconds_total";
inline constexpr char kLabelKind[] = "kind";
// Incidents open now (one per root cause), as this sidecar sees the cluster.
inline constexpr char kIncidentsOpen[] = "trainscope_incidents_open";
// Per task of this node that is the cause of an open incident (cluster, role, task), with its
// `incident` id; the value is when the incident started (Unix seconds). The rules join it into the
// dead and hung alerts, so that they carry the same `incident` label as the sidecar's own.
inline constexpr char kTaskIncident[] = "trainscope_task_incident";
inline constexpr char kLabelIncident[] = "incident";
// With --state_dir: 1 while the sidecar's writes to its state store succeed, 0 while they fail
// (a full disk): what it holds in memory is not lost, and is written once they succeed again.
inline constexpr char kStateStoreOk[] = "trainscope_state_store_ok";

// The sidecar as the node's trace agent (OTLP TraceService/Export on its gRPC port).
// Spans received (valid or not) in Export calls.
inline constexpr char kTracesSpansReceived[] = "trainscope_sidecar_traces_spans_received_total";
// Spans held now (pending a join, slow or failed requests), and their estimated bytes.
inline constexpr char kTracesSpansKept[] = "trainscope_sidecar_traces_spans_kept";
inline constexpr char kTracesKeptBytes[] = "trainscope_sidecar_traces_kept_bytes";
// Spans not kept or forgotten early, by `reason`: invalid (bad ids), evicted (memory budget),
// trace_full (too many spans in one trace), duplicate (same span id twice).
inline constexpr char kTracesSpansDropped[] = "trainscope_sidecar_traces_spans_dropped_total";
// Forwarding to --otlp_upstream: spans sent, spans dropped (queue full or refused), failed
// Export calls.
inline constexpr char kTracesForwardedSpans[] = "trainscope_sidecar_traces_forwarded_spans_total";
inline constexpr char kTracesForwardDroppedSpans[] =
    "trainscope_sidecar_traces_forward_dropped_spans_total";
inline constexpr char kTracesForwardFailures[] = "trainscope_sidecar_traces_forward_failures_total";
inline constexpr char kReasonInvalid[] = "invalid";
inline constexpr char kReasonEvicted[] = "evicted";
inline constexpr char kReasonTraceFull[] = "trace_full";
inline constexpr char kReasonDuplicate[] = "duplicate";

// gRFC A66 latency bucket bounds, in seconds.
inline constexpr double kLatencyBuckets[] = {
    0,     0.00001, 0.00005, 0.0001, 0.0003, 0.0006, 0.0008, 0.001, 0.002, 0.003, 0.004,
    0.005, 0.006,   0.008,   0.01,   0.013,  0.016,  0.02,   0.025, 0.03,  0.04,  0.05,
    0.065, 0.08,    0.1,     0.13,   0.16,   0.2,    0.25,   0.3,   0.4,   0.5,   0.65,
    0.8,   1,       2,       5,      10,     20,     50,     100};
// gRFC A66 message size bucket bounds, in bytes.
inline constexpr double kSizeBuckets[] = {0,        1024,      2048,       4096,      16384,
                                          65536,    262144,    1048576,    4194304,   16777216,
                                          67108864, 268435456, 1073741824, 4294967296};

}  // namespace trainscope::telemetry::names
