// linear_regression: the model's flags, then the runtime's shared main (training_main.h).
#include "CLI/CLI.hpp"
#include "linear_regression.h"
#include "trainscope/runtime/training_main.h"

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
  trainscope::RuntimeOptions runtime;
  return trainscope::RunTrainingMain(app, argc, argv, runtime, [&](trainscope::Task& task) {
    return trainscope::examples::RunLinearRegression(task, o);
  });
}
