#pragma once
// Linear regression trained with asynchronous SGD across the workers of a cluster, its weights
// sharded over the ps tasks. One program for every role: TF_CONFIG decides what it does.

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "trainscope/runtime/options.h"

namespace trainscope::examples {

struct LinearRegressionOptions {
  RuntimeOptions runtime;
  std::string tf_config;  // The TF_CONFIG JSON.
  int64_t steps = 300;
  int features = 16;
  int batch_size = 64;
  float learning_rate = 0.05f;
  uint64_t seed = 42;  // Same on every task: it draws the true weights.
  int log_every = 50;
  int step_delay_ms = 0;  // Sleep per step, to keep a demo cluster training for longer.
  // Consecutive steps that may fail with DEADLINE_EXCEEDED or UNAVAILABLE before the run fails.
  int max_step_failures = 10;
  std::string log_format = "text";
};

// Runs this process's role to the end. OK on success; otherwise the one-line cause.
absl::Status RunLinearRegression(const LinearRegressionOptions& options);

}  // namespace trainscope::examples
