#pragma once
// What every training program's main() would otherwise write the same way: the runtime's
// flags, TF_CONFIG read from the environment and checked, logging, starting the task, a ps
// serving until the workers are done, and the outcome as an exit code. A program adds only the
// flags of its model and its training function:
//
//   int main(int argc, char** argv) {
//     MyModelOptions m;
//     trainscope::RuntimeOptions runtime;
//     CLI::App app{"My model on a trainscope cluster"};
//     app.add_option("--steps", m.steps, "Training steps");
//     return trainscope::RunTrainingMain(app, argc, argv, runtime, [&](trainscope::Task& task) {
//       return TrainMyModel(task, m);  // CreateSession, pull, push; FinishTraining comes after
//     });
//   }

#include <functional>
#include <string>

#include "absl/status/status.h"
#include "trainscope/runtime/options.h"

namespace CLI {
class App;
}  // namespace CLI

namespace trainscope {

class Task;

// A worker's or chief's training, given its started task. Runs on the main thread; returns OK
// when done (then FinishTraining tells the ps tasks) or the one-line cause of a failure.
using TrainFunction = std::function<absl::Status(Task& task)>;

// Adds the runtime's flags to `app` (--cluster_name, --session_timeout_s, --rpc_deadline_ms,
// --tls_*, --metrics_port, tracing, checkpoints, --log_format, test hooks, ...), writing into
// `options`. RunTrainingMain calls it; use it alone to parse flags your own way.
void AddRuntimeFlags(CLI::App& app, RuntimeOptions& options);

// Runs this process's role to the end with TF_CONFIG (the JSON): starts the task, then a ps
// serves until every worker is done, and a worker or chief runs `train` and FinishTraining.
absl::Status RunTask(const RuntimeOptions& options, const std::string& tf_config,
                     const TrainFunction& train);

// The whole main(): AddRuntimeFlags and --check_config, parses argv, reads $TF_CONFIG, RunTask.
// Returns the exit code: 0 done, 1 failed (the cause on stderr), 2 bad flags or TF_CONFIG;
// --help and --check_config print and return 0.
int RunTrainingMain(CLI::App& app, int argc, char** argv, RuntimeOptions& options,
                    const TrainFunction& train);

}  // namespace trainscope
