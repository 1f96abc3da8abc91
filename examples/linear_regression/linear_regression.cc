// The linear-regression example; see linear_regression.h.
#include "linear_regression.h"

#include <Eigen/Core>
#include <chrono>
#include <optional>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"
#include "trainscope/common/cluster_spec.h"
#include "trainscope/runtime/parameter_client.h"
#include "trainscope/runtime/status_macros.h"
#include "trainscope/runtime/task.h"

namespace trainscope::examples {
namespace {

using Matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Vector = Eigen::VectorXf;

// Synthetic data: y = x . w_true + b_true + noise, x ~ N(0, 1).
class Data {
 public:
  Data(int features, uint64_t model_seed, uint64_t stream_seed)
      : rng_(stream_seed), w_true_(features) {
    std::mt19937_64 model_rng(model_seed);
    std::normal_distribution<float> normal;
    for (int i = 0; i < features; ++i) w_true_[i] = normal(model_rng);
  }
  void Batch(int size, Matrix* x, Vector* y) {
    std::normal_distribution<float> normal;
    x->resize(size, w_true_.size());
    for (Eigen::Index i = 0; i < x->size(); ++i) x->data()[i] = normal(rng_);
    *y = (*x) * w_true_;
    for (int i = 0; i < size; ++i) (*y)[i] += kBiasTrue + 0.01f * normal(rng_);
  }

 private:
  static constexpr float kBiasTrue = 0.5f;
  std::mt19937_64 rng_;
  Vector w_true_;
};

std::string ZeroBytes(int64_t n) {
  return std::string(static_cast<size_t>(n) * sizeof(float), '\0');
}

// The model's variables: the weight vector in one shard per ps, and the bias.
std::vector<VariableDef> ModelVariables(int features, int num_ps) {
  std::vector<VariableDef> vars;
  const int shards = std::max(1, std::min(num_ps, features));
  for (int s = 0; s < shards; ++s) {
    int64_t n = features / shards + (s < features % shards ? 1 : 0);
    vars.push_back({absl::StrCat("linear/w/part_", s), {DType::kFloat, {n}}, ZeroBytes(n)});
  }
  vars.push_back({"linear/b", {DType::kFloat, {1}}, ZeroBytes(1)});
  return vars;
}

float Loss(const Matrix& x, const Vector& y, const Vector& w, float b) {
  return ((x * w).array() + b - y.array()).square().mean();
}

// One SGD step on a fresh batch against the weights last pulled: push each shard's gradient.
absl::Status Step(ParameterClient* client, const LinearRegressionOptions& options, Data& data,
                  Matrix& x, Vector& y, const Vector& w, float b, size_t num_vars, float* loss) {
  data.Batch(options.batch_size, &x, &y);
  const Vector err = ((x * w).array() + b).matrix() - y;
  *loss = err.squaredNorm() / static_cast<float>(err.size());
  const Vector grad_w = (2.0f / options.batch_size) * (x.transpose() * err);
  const float grad_b = 2.0f * err.mean();
  // Every shard's gradient at once: the step waits for the slowest ps, not for all in turn.
  std::vector<std::pair<size_t, std::string>> gradients;
  Eigen::Index offset = 0;
  for (size_t v = 0; v + 1 < num_vars; ++v) {
    const Eigen::Index n = client->variables()[v].spec.shape[0];
    gradients.emplace_back(
        v, std::string(reinterpret_cast<const char*>(grad_w.data() + offset), n * sizeof(float)));
    offset += n;
  }
  gradients.emplace_back(num_vars - 1,
                         std::string(reinterpret_cast<const char*>(&grad_b), sizeof(float)));
  return client->PushAll(std::move(gradients), options.learning_rate);
}

// One worker's training: the model's variables on the ps tasks, its own data stream, and the
// weights it last pulled.
class Trainer {
 public:
  Trainer(Task& task, const LinearRegressionOptions& options, ParameterClient* client)
      : task_(task),
        options_(options),
        client_(client),
        num_vars_(client->variables().size()),
        data_(options.features, options.seed,
              options.seed * 7919 + 1 + task.self().index * 104729ull),
        w_(options.features) {
    Data held_out(options.features, options.seed, options.seed + 999);
    held_out.Batch(1024, &x_eval_, &y_eval_);
  }

  absl::Status Run() {
    // The loss of the model as created (all zeros), whatever other workers did since.
    const float initial_loss = Loss(x_eval_, y_eval_, Vector::Zero(options_.features), 0.0f);
    TS_RETURN_IF_ERROR(Pull());
    spdlog::info("initial loss {:.6f}, loss now {:.6f}", initial_loss, EvalLoss());
    const auto start = std::chrono::steady_clock::now();
    int64_t steps_done = 0;
    TS_RETURN_IF_ERROR(Steps(&steps_done));
    // Stopping: one attempt (the runtime does not wait on a ps for a task that leaves).
    if (absl::Status st = Pull(); !st.ok()) return task_.stopping() ? absl::OkStatus() : st;
    const float final_loss = EvalLoss();
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    spdlog::info("final loss {:.6f} (initial {:.6f}, {:.0f}x lower) after {} steps in {:.1f} s",
                 final_loss, initial_loss, initial_loss / std::max(final_loss, 1e-12f), steps_done,
                 seconds);
    return absl::OkStatus();
  }

 private:
  float EvalLoss() const { return Loss(x_eval_, y_eval_, w_, b_); }

  // The weights as the ps tasks hold them now.
  absl::Status Pull() {
    TS_RETURN_IF_ERROR(client_->PullAll(&values_));
    Eigen::Index offset = 0;
    for (size_t v = 0; v + 1 < num_vars_; ++v) {
      const Eigen::Index n = static_cast<Eigen::Index>(values_[v].size() / sizeof(float));
      w_.segment(offset, n) =
          Eigen::Map<const Vector>(reinterpret_cast<const float*>(values_[v].data()), n);
      offset += n;
    }
    b_ = *reinterpret_cast<const float*>(values_[num_vars_ - 1].data());
    return absl::OkStatus();
  }

  // Steps until options_.steps (from a checkpoint's step when the ps tasks restored one) or a
  // stop. The runtime waits out a ps that is stopped, restarting or cut off; an error that
  // reaches here ends the run (unless the task was told to stop while it waited).
  absl::Status Steps(int64_t* steps_done) {
    bool pulled = true;
    int64_t first_step = 1;
    if (std::optional<int64_t> resumed = client_->TakeResume()) {
      // The ps tasks restored a checkpoint (the whole cluster restarted): go on from its step.
      *steps_done = *resumed;
      first_step = *resumed + 1;
      spdlog::info("resuming at step {} from a checkpoint", first_step);
    }
    for (int64_t step = first_step; step <= options_.steps; ++step) {
      if (task_.stopping()) {
        spdlog::warn("stopping at step {} of {}: finishing cleanly", *steps_done, options_.steps);
        break;
      }
      const auto step_start = std::chrono::steady_clock::now();
      absl::Status st = pulled ? absl::OkStatus() : Pull();
      pulled = false;
      if (std::optional<int64_t> resumed = client_->TakeResume(); st.ok() && resumed) {
        // A ps restarted and restored a checkpoint: the steps since it are lost; redo them.
        spdlog::warn("going on from step {} (was at step {})", *resumed + 1, step);
        step = *resumed + 1;
      }
      float loss = 0;
      if (st.ok()) st = Step(client_, options_, data_, x_, y_, w_, b_, num_vars_, &loss);
      if (!st.ok()) {
        if (!task_.stopping()) return st;
        spdlog::warn("stopping at step {} of {} while waiting: {}", *steps_done, options_.steps,
                     std::string(st.message()));
        break;
      }
      Finished(step, step_start, loss);
      *steps_done = step;
    }
    return absl::OkStatus();
  }

  // A step ended well: the demo's delay, the task's progress, the log line.
  void Finished(int64_t step, std::chrono::steady_clock::time_point step_start, float loss) {
    if (options_.step_delay_ms > 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(options_.step_delay_ms));
    }
    task_.RecordStep(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - step_start).count(), loss,
        options_.batch_size);
    if (options_.log_every > 0 && (step % options_.log_every == 0 || step == options_.steps)) {
      spdlog::info("step {}/{} loss {:.6f}", step, options_.steps, loss);
    }
  }

  Task& task_;
  const LinearRegressionOptions& options_;
  ParameterClient* client_;
  const size_t num_vars_;
  Data data_;
  Matrix x_eval_, x_;
  Vector y_eval_, y_;
  std::vector<std::string> values_;
  Vector w_;
  float b_ = 0;
};

absl::Status Train(Task& task, const LinearRegressionOptions& options) {
  TS_ASSIGN_OR_RETURN(ParameterClient * client, task.CreateSession());
  const std::vector<VariableDef> variables =
      ModelVariables(options.features, task.cluster().NumTasks("ps"));
  TS_RETURN_IF_ERROR(client->CreateVariables(variables));
  spdlog::info("training: {} features in {} variables over {} ps tasks, {} steps", options.features,
               client->variables().size(), task.cluster().NumTasks("ps"), options.steps);
  return Trainer(task, options, client).Run();
}

}  // namespace

absl::Status RunLinearRegression(Task& task, const LinearRegressionOptions& options) {
  if (options.features < 1 || options.batch_size < 1 || options.steps < 0) {
    return absl::InvalidArgumentError("--features and --batch_size must be >= 1, --steps >= 0");
  }
  return Train(task, options);
}

}  // namespace trainscope::examples
