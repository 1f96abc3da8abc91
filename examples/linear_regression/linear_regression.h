#pragma once
// Linear regression trained with asynchronous SGD across the workers of a cluster, its weights
// sharded over the ps tasks. One program for every role: TF_CONFIG decides what it does.

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace trainscope {

class Task;

}  // namespace trainscope

namespace trainscope::examples {

struct LinearRegressionOptions {
  int64_t steps = 300;
  int features = 16;
  int batch_size = 64;
  float learning_rate = 0.05f;
  uint64_t seed = 42;  // Same on every task: it draws the true weights.
  int log_every = 50;
  int step_delay_ms = 0;  // Sleep per step, to keep a demo cluster training for longer.
  // Consecutive steps (or attempts at creating the variables, the first or the last pull) that
  // may fail with DEADLINE_EXCEEDED or UNAVAILABLE before the run fails.
  int max_step_failures = 10;
};

// Trains on a worker's or chief's started task (see training_main.h): creates the session and
// the model's variables, then runs the steps. OK on success; otherwise the one-line cause.
absl::Status RunLinearRegression(Task& task, const LinearRegressionOptions& options);

}  // namespace trainscope::examples
