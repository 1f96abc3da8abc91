#pragma once
// A task of a trainscope cluster: what a training program builds first. Start() reads its
// role from TF_CONFIG, binds its server (TaskService on every task, ParameterService on ps
// tasks), and handles SIGTERM/SIGINT. A ps then serves until every worker says it is done; a
// worker or chief creates its session (reaching every ps) and trains through a ParameterClient.
//
//   auto task = Task::Start(options, config);          // config from ParseTfConfig
//   if (task->IsParameterServer()) return task->ServeUntilDone();
//   auto client = task->CreateSession();               // blocks until every ps answers
//   ... client->PullAll / Push ...
//   task->FinishTraining();                            // tells the ps tasks

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "trainscope/common/cluster_spec.h"
#include "trainscope/runtime/options.h"

namespace trainscope {

class ParameterClient;

// Thread-safe where noted; Start/CreateSession/FinishTraining are called from the main thread.
class Task {
 public:
  // Binds the server. Fails at once with "ps:0 cannot listen on 127.0.0.1:2222: address
  // already in use (held by pid N, prog)" when the port is taken.
  static absl::StatusOr<std::unique_ptr<Task>> Start(const RuntimeOptions& options,
                                                     const TfConfig& config);
  ~Task();

  const TaskRef& self() const;
  const ClusterSpec& cluster() const;
  bool IsParameterServer() const;

  // ps: blocks until every worker and chief has called FinishTraining, or a stop signal.
  absl::Status ServeUntilDone();

  // worker/chief: handshakes with every ps (retrying with backoff, logging who it waits for),
  // failing at once on a version or cluster-spec mismatch and after session_timeout_s.
  // The client stays owned by the task.
  absl::StatusOr<ParameterClient*> CreateSession();

  // worker/chief: tells every ps that this task is done.
  absl::Status FinishTraining();

  // True once SIGTERM/SIGINT arrived or Stop() was called (the task leaves: FinishTraining does
  // not tell the ps tasks it is done, they keep serving and expect it back), or SIGUSR1 (finish
  // training now: FinishTraining says it is done). Thread-safe.
  bool stopping() const;
  void Stop();

  // Address of the bound server ("127.0.0.1:2222").
  std::string listen_address() const;
  // Address of the task's /metrics, empty when it has none.
  std::string metrics_address() const;

  // worker/chief: a training step finished. Feeds the heartbeat's progress counter and the
  // training metrics. Thread-safe.
  void RecordStep(double seconds, double loss, int64_t examples);

  class Impl;

 private:
  explicit Task(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Sets up logging (spdlog) for a task: every line carries the task's short name, and the trace
// id when it is about a traced call. `format` is "text" or "json" (JSON lines).
void InitLogging(const std::string& task_name, const std::string& format);

}  // namespace trainscope
