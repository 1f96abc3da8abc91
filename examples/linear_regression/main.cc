// linear_regression: flags -> options -> RunLinearRegression -> exit code.
#include <cstdlib>
#include <iostream>

#include "CLI/CLI.hpp"
#include "linear_regression.h"
#include "trainscope/common/cluster_spec.h"
#include "trainscope/common/tls_flags.h"

int main(int argc, char** argv) {
  trainscope::examples::LinearRegressionOptions o;
  CLI::App app{
      "Linear regression with asynchronous SGD on a trainscope cluster. "
      "TF_CONFIG says which task this process is."};
  app.add_option("--steps", o.steps, "Training steps per worker")->capture_default_str();
  app.add_option("--features", o.features, "Number of input features")->capture_default_str();
  app.add_option("--batch_size", o.batch_size, "Examples per step")->capture_default_str();
  app.add_option("--learning_rate", o.learning_rate, "SGD learning rate")->capture_default_str();
  app.add_option("--seed", o.seed, "Seed of the synthetic data (same on every task)")
      ->capture_default_str();
  app.add_option("--log_every", o.log_every, "Log the loss every N steps")->capture_default_str();
  app.add_option("--step_delay_ms", o.step_delay_ms, "Sleep per step (demos)")
      ->capture_default_str();
  app.add_option("--max_step_failures", o.max_step_failures,
                 "Consecutive steps that may fail with DEADLINE_EXCEEDED or UNAVAILABLE before "
                 "the run fails")
      ->capture_default_str();
  app.add_option("--log_format", o.log_format, "text or json")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  auto& r = o.runtime;
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
  app.add_option("--max_attempts", r.max_attempts, "Attempts of a ps call that is UNAVAILABLE")
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
  app.add_option("--metrics_port", r.metrics_port,
                 "Port of this task's /metrics (0 = any free port, reported in the heartbeat; "
                 "-1 = none)")
      ->capture_default_str();
  app.add_option("--metrics_address", r.metrics_address,
                 "Address /metrics binds (default: this task's host in the spec; 0.0.0.0: every "
                 "interface)");
  bool no_telemetry = false;
  bool no_tracing = false;
  app.add_flag("--disable_telemetry", no_telemetry, "Record no metrics and no spans");
  app.add_flag("--disable_tracing", no_tracing,
               "Export no spans (OTEL_EXPORTER_OTLP_ENDPOINT says where they go otherwise)");
  app.add_option("--trace_slow_ms", r.trace_slow_ms,
                 "A ps call this slow is always traced, both halves (give every task the same)")
      ->check(CLI::Range(1, 3600 * 1000))
      ->capture_default_str();
  app.add_option("--trace_buffer_records", r.trace_buffer_records,
                 "Calls held for deciding afterwards which to trace (88 bytes each)")
      ->check(CLI::Range(1024, 1 << 24))
      ->capture_default_str();
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
  bool check_config = false;
  app.add_flag(
      "--check_config", check_config,
      "Check TF_CONFIG and exit: 0 and a summary when it is valid, 2 and the error when not");
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
  CLI11_PARSE(app, argc, argv);
  r.telemetry = !no_telemetry;
  r.tracing = !no_tracing;

  const char* tf_config = std::getenv("TF_CONFIG");
  if (tf_config == nullptr || *tf_config == '\0') {
    std::cerr << "error: TF_CONFIG is not set: export TF_CONFIG='{\"cluster\": {\"ps\": "
                 "[\"host:2222\"], \"worker\": [\"host:2223\"]}, \"task\": {\"type\": \"ps\", "
                 "\"index\": 0}}'\n";
    return 2;
  }
  o.tf_config = tf_config;
  if (check_config) {
    auto config = trainscope::ParseTfConfig(o.tf_config, /*require_task=*/true);
    if (!config.ok()) {
      std::cerr << "error: " << config.status().message() << "\n";
      return 2;
    }
    std::cout << "TF_CONFIG is valid: this process is " << config->task->FullName() << " at "
              << *config->cluster.FindAddress(*config->task) << " in a cluster of "
              << config->cluster.AllTasks().size() << " tasks\n";
    return 0;
  }
  absl::Status status = trainscope::examples::RunLinearRegression(o);
  if (!status.ok()) {
    std::cerr << "error: " << absl::StatusCodeToString(status.code()) << ": " << status.message()
              << "\n";
    return 1;
  }
  return 0;
}
