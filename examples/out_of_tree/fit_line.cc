// fit_line: fits y = w x + b to noisy points of the line y = 2 x - 1 with SGD, w and b held by
// the ps tasks. One program for every task: TF_CONFIG says which one this process is.
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "trainscope/runtime/parameter_client.h"
#include "trainscope/runtime/status_macros.h"
#include "trainscope/runtime/task.h"
#include "trainscope/runtime/training_main.h"

namespace {

std::string FloatBytes(float value) {
  return std::string(reinterpret_cast<const char*>(&value), sizeof(value));
}

float FloatOf(const std::string& bytes) {
  float value = 0;
  std::memcpy(&value, bytes.data(), sizeof(value));
  return value;
}

absl::Status FitLine(trainscope::Task& task, int steps) {
  TS_ASSIGN_OR_RETURN(trainscope::ParameterClient * client, task.CreateSession());
  const trainscope::TensorSpec scalar{trainscope::DType::kFloat, {}};
  TS_RETURN_IF_ERROR(client->CreateVariables(
      {{"line/w", scalar, FloatBytes(0)}, {"line/b", scalar, FloatBytes(0)}}));
  std::mt19937 rng(task.self().index + 1);
  std::uniform_real_distribution<float> uniform(-1, 1);
  std::vector<std::string> values;
  for (int step = 1; step <= steps && !task.stopping(); ++step) {
    TS_RETURN_IF_ERROR(client->PullAll(&values));
    const float w = FloatOf(values[0]), b = FloatOf(values[1]);
    const float x = uniform(rng), y = 2 * x - 1 + 0.01f * uniform(rng);
    const float error = w * x + b - y;
    TS_RETURN_IF_ERROR(client->PushAll({{0, FloatBytes(2 * error * x)}, {1, FloatBytes(2 * error)}},
                                       /*learning_rate=*/0.1f));
    task.RecordStep(0, error * error, 1);
  }
  TS_RETURN_IF_ERROR(client->PullAll(&values));
  std::printf("fit_line: y = %.3f x + %.3f (want y = 2 x - 1)\n", FloatOf(values[0]),
              FloatOf(values[1]));
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 500;
  CLI::App app{"fit_line: fits a line with SGD on a trainscope cluster (TF_CONFIG)."};
  app.add_option("--steps", steps, "Training steps of each worker")->capture_default_str();
  trainscope::RuntimeOptions runtime;
  return trainscope::RunTrainingMain(app, argc, argv, runtime,
                                     [&](trainscope::Task& task) { return FitLine(task, steps); });
}
