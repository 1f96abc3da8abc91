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
};

// Trains on a worker's or chief's started task (see training_main.h): creates the session and
// the model's variables, then runs the steps. A ps stopped, restarting or cut off is waited out
// by the runtime (--ps_patience_s); a checkpoint a restarted ps restored is gone on from. OK on
// success (or a stop); otherwise the one-line cause.
absl::Status RunLinearRegression(Task& task, const LinearRegressionOptions& options);

}  // namespace trainscope::examples
