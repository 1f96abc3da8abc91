// The shared main() of training programs; see training_main.h.
#include "trainscope/runtime/training_main.h"

#include <cstdlib>
#include <iostream>
#include <memory>

#include "CLI/CLI.hpp"
#include "trainscope/common/cluster_spec.h"
#include "trainscope/common/tls_flags.h"
#include "trainscope/runtime/status_macros.h"
#include "trainscope/runtime/task.h"

namespace trainscope {
namespace {

constexpr char kTfConfigExample[] =
    R"({"cluster": {"ps": ["host:2222"], "worker": ["host:2223"]}, )"
    R"("task": {"type": "ps", "index": 0}})";

void AddSessionFlags(CLI::App& app, RuntimeOptions& r) {
  app.add_option("--cluster_name", r.cluster_name, "Name of this training run")
      ->envname("TRAINSCOPE_CLUSTER")
      ->capture_default_str();
  app.add_option("--session_timeout_s", r.session_timeout_s,
                 "Give up CreateSession after this long (0 = wait forever)")
      ->capture_default_str();
  app.add_option("--session_log_interval_s", r.session_log_interval_s,
                 "Log who CreateSession waits for this often")
      ->capture_default_str();
  app.add_option("--rpc_deadline_ms", r.rpc_deadline_ms, "Deadline of every ps call")
      ->capture_default_str();
  app.add_option("--ps_patience_s", r.ps_patience_s,
                 "Wait out a ps that is stopped, restarting or cut off this long, retrying, before "
                 "giving up (one outage, across calls)")
      ->check(CLI::Range(0.0, 7.0 * 24 * 3600))
      ->capture_default_str();
  app.add_option("--ps_memory_limit_bytes", r.ps_memory_limit_bytes,
                 "A ps refuses variables past this many bytes (0 = no budget)")
      ->capture_default_str();
  app.add_option("--max_message_bytes", r.max_message_bytes,
                 "Largest message a ps accepts (a variable or gradient); with a memory budget, "
                 "at most the budget plus 1 MiB")
      ->check(CLI::Range(1024, 2147483647))
      ->capture_default_str();
  app.add_option("--listen_address", r.listen_address,
                 "Bind this address instead of the task's address in the spec (e.g. 0.0.0.0:2222)");
  AddTlsFlags(app, r.tls);
}

void AddTelemetryFlags(CLI::App& app, RuntimeOptions& r) {
  app.add_option("--log_format", r.log_format, "text or json")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  app.add_option("--metrics_port", r.metrics_port,
                 "Port of this task's /metrics (0 = any free port, reported in the heartbeat; "
                 "-1 = none)")
      ->capture_default_str();
  app.add_option("--metrics_address", r.metrics_address,
                 "Address /metrics binds (default: this task's host in the spec; 0.0.0.0: every "
                 "interface)");
  app.add_flag_callback(
      "--disable_telemetry", [&r] { r.telemetry = false; }, "Record no metrics and no spans");
  app.add_flag_callback(
      "--disable_tracing", [&r] { r.tracing = false; },
      "Export no spans (OTEL_EXPORTER_OTLP_ENDPOINT says where they go otherwise)");
  app.add_option("--trace_slow_ms", r.trace_slow_ms,
                 "A ps call this slow is always traced, both halves (give every task the same)")
      ->check(CLI::Range(1, 3600 * 1000))
      ->capture_default_str();
  app.add_option("--trace_buffer_records", r.trace_buffer_records,
                 "Calls held for deciding afterwards which to trace (88 bytes each)")
      ->check(CLI::Range(1024, 1 << 24))
      ->capture_default_str();
}

void AddCheckpointAndTestFlags(CLI::App& app, RuntimeOptions& r) {
  app.add_option("--checkpoint_dir", r.checkpoint_dir,
                 "Save checkpoints here (chief, or worker:0) and restore a ps from the newest one "
                 "at startup; give every task the same directory (empty = no checkpoints)");
  app.add_option("--checkpoint_every_s", r.checkpoint_every_s,
                 "Seconds between checkpoints (0 = not by time)")
      ->capture_default_str();
  app.add_option("--checkpoint_every_steps", r.checkpoint_every_steps,
                 "Steps between checkpoints (0 = not by steps)")
      ->capture_default_str();
  app.add_option("--checkpoints_to_keep", r.checkpoints_to_keep, "Newest checkpoints kept")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  app.add_flag("--enable_fault_injection", r.enable_fault_injection,
               "Accept TaskService.InjectFault (tests and drills)");
  app.add_option("--testing_ps_delay_ms", r.testing_parameter_delay_ms,
                 "Test hook: delay every ps call by this much")
      ->group("Testing");
  app.add_option("--testing_protocol_version", r.testing_protocol_version,
                 "Test hook: announce this protocol version")
      ->group("Testing");
  app.add_option("--testing_drop_push_answers", r.testing_drop_push_answers,
                 "Test hook (ps): fail the first N Push answers with UNAVAILABLE after applying")
      ->group("Testing");
}

// --check_config: 0 and a summary when TF_CONFIG is valid, 2 and the error when not.
int CheckConfig(const std::string& tf_config) {
  auto config = ParseTfConfig(tf_config, /*require_task=*/true);
  if (!config.ok()) {
    std::cerr << "error: " << config.status().message() << "\n";
    return 2;
  }
  std::cout << "TF_CONFIG is valid: this process is " << config->task->FullName() << " at "
            << *config->cluster.FindAddress(*config->task) << " in a cluster of "
            << config->cluster.AllTasks().size() << " tasks\n";
  return 0;
}

}  // namespace

void AddRuntimeFlags(CLI::App& app, RuntimeOptions& options) {
  AddSessionFlags(app, options);
  AddTelemetryFlags(app, options);
  AddCheckpointAndTestFlags(app, options);
}

absl::Status RunTask(const RuntimeOptions& options, const std::string& tf_config,
                     const TrainFunction& train) {
  TS_ASSIGN_OR_RETURN(TfConfig config, ParseTfConfig(tf_config, /*require_task=*/true));
  InitLogging(config.task->ShortName(), options.log_format);
  TS_ASSIGN_OR_RETURN(std::unique_ptr<Task> task, Task::Start(options, config));
  if (task->IsParameterServer()) return task->ServeUntilDone();
  TS_RETURN_IF_ERROR(train(*task));
  return task->FinishTraining();
}

int RunTrainingMain(CLI::App& app, int argc, char** argv, RuntimeOptions& options,
                    const TrainFunction& train) {
  AddRuntimeFlags(app, options);
  bool check_config = false;
  app.add_flag(
      "--check_config", check_config,
      "Check TF_CONFIG and exit: 0 and a summary when it is valid, 2 and the error when not");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }
  const char* tf_config = std::getenv("TF_CONFIG");
  if (tf_config == nullptr || *tf_config == '\0') {
    std::cerr << "error: TF_CONFIG is not set: export TF_CONFIG='" << kTfConfigExample << "'\n";
    return 2;
  }
  if (check_config) return CheckConfig(tf_config);
  const absl::Status status = RunTask(options, tf_config, train);
  if (!status.ok()) {
    std::cerr << "error: " << absl::StatusCodeToString(status.code()) << ": " << status.message()
              << "\n";
    return 1;
  }
  return 0;
}

}  // namespace trainscope
