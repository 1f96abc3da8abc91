#pragma once
// Options of a task, as a training program's flags set them. Plain struct; see task.h.

#include <cstdint>
#include <string>

#include "trainscope/common/tls.h"

namespace trainscope {

struct RuntimeOptions {
  // A name for the training run, shown in every label and heartbeat.
  std::string cluster_name = "default";
  // Log lines as "text" or "json" (one JSON object a line), each with the task's name.
  std::string log_format = "text";
  // CreateSession gives up after this long; 0 = wait forever (as TensorFlow does).
  int session_timeout_s = 0;
  // How often CreateSession logs who it still waits for.
  int session_log_interval_s = 10;
  // Deadline of every Pull/Push/CreateVariable call (one attempt of it).
  int rpc_deadline_ms = 5000;
  // How long a worker waits out ps tasks that fail for a transient reason (stopped, restarting,
  // cut off, slower than the deadline), retrying with backoff, before it gives up: one outage,
  // across calls, from the first failure until a call gets through (docs/runtime.md, "Riding
  // through"). Errors that retrying cannot mend (a shape, a version) end the task at once.
  double ps_patience_s = 600;
  // A ps refuses variables past this many bytes; 0 = no budget.
  int64_t ps_memory_limit_bytes = 0;
  // Largest message a ps accepts (a variable's initial value or a gradient); with a memory
  // budget, at most the budget plus 1 MiB (a larger one could never be held). Other tasks
  // serve only small control calls and accept 4 MiB.
  int max_message_bytes = 256 << 20;
  // Address the task server binds; empty = the task's address in the cluster spec.
  std::string listen_address;
  // Port of the task's /metrics: 0 = any free port (the heartbeat reports it), -1 = none.
  int metrics_port = 0;
  // Address /metrics binds; empty = the host of listen_address (the task's host in the spec),
  // resolved; "0.0.0.0" = every interface.
  std::string metrics_address;
  // Record metrics and spans; off, calls pass no interceptor (for overhead comparisons).
  bool telemetry = true;
  // Export spans over OTLP (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_TRACES_SAMPLER, ...): every ps
  // call is recorded, and the failed, slow and near-deadline ones become spans, both halves.
  bool tracing = true;
  // A ps call that takes at least this long is slow: kept as a span whatever the sampler says.
  // Give every task the same value, so that both halves of a call agree.
  int trace_slow_ms = 100;
  // Calls held in the trace buffer (88 bytes each), for deciding afterwards which to keep.
  int trace_buffer_records = 32768;
  // Checkpoints (docs/runtime.md): the chief, or worker:0 when there is none, saves every
  // variable of every ps here every checkpoint_every_s seconds and/or checkpoint_every_steps
  // steps (0 = not by that measure), keeping the newest checkpoints_to_keep; a ps that starts
  // loads its variables from the newest one that reads whole. Give every task the same dir.
  std::string checkpoint_dir;
  double checkpoint_every_s = 60;
  int64_t checkpoint_every_steps = 0;
  int checkpoints_to_keep = 3;
  // TLS on the task server, its channels to peers, OTLP export and /metrics (docs/security.md).
  TlsFiles tls;
  // Answer TaskService.InjectFault (tests and drills only).
  bool enable_fault_injection = false;
  // Test hooks: a delay on every ParameterService call, and a protocol version other than ours.
  int64_t testing_parameter_delay_ms = 0;
  int testing_protocol_version = 0;
  // Test hook (ps): the first N Push answers fail with UNAVAILABLE after the gradient was
  // applied, as when the answer is lost on the way back.
  int testing_drop_push_answers = 0;
};

}  // namespace trainscope
