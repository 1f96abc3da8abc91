#pragma once
// Task::Impl, the state of a task that its parts share: the lifecycle (task.cc), the TaskService
// and ParameterService handlers (task_service.cc, parameter_service.cc), CreateSession
// (session.cc) and signal handling (signals.cc). The services get what they need as small
// objects and values (Callers, PsMemory, Heartbeat, the identity), never callbacks into it.
// Private to the runtime.

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "callers.h"
#include "checkpoint.h"
#include "fault_injector.h"
#include "heartbeat.h"
#include "internal.h"
#include "parameter_store.h"
#include "ps_memory.h"
#include "signals.h"
#include "task_metrics.h"
#include "task_status.h"
#include "trainer_registry.h"
#include "trainscope/common/cluster_spec.h"
#include "trainscope/runtime/options.h"
#include "trainscope/runtime/parameter_client.h"
#include "trainscope/runtime/task.h"
#include "trainscope/v1/runtime.pb.h"

namespace trainscope {

namespace telemetry {
class Telemetry;
}

// Sleeps `ms` milliseconds when positive.
void SleepFor(int64_t ms);

// The longest delay InjectFault adds at random to one call.
inline constexpr int64_t kMaxInjectedDelayMs = 60000;

// What a ps's ParameterService uses; the task owns each and outlives the service.
struct ParameterServiceParts {
  ParameterStore* store;
  telemetry::Telemetry* telemetry;  // May be null (--disable_telemetry).
  TaskMetrics* metrics;
  TaskStatus* status;
  FaultInjector* faults;
  RecentRequests* recent_pushes;  // Push ids applied lately: a retried Push is applied once.
  const Callers* callers;         // Their peer indexes; under mutual TLS, their certificates.
  const PsMemory* ps_memory;      // What the ps tells its callers of its memory.
};

// What a task's TaskService uses; the task owns each pointed to and outlives the service.
struct TaskServiceParts {
  TaskRef self;
  bool accepts_faults;              // --enable_fault_injection.
  telemetry::Telemetry* telemetry;  // May be null (--disable_telemetry).
  TrainerRegistry* trainers;
  FaultInjector* faults;
  v1::TaskIdentity identity;  // Built in Start, never changing.
  const Callers* callers;
  Heartbeat heartbeat;
  const PsMemory* ps_memory;  // ps only; null elsewhere.
};

// Thread-safe where its members are (atomics, the registry); Start, CreateSession, FinishTraining
// and Shutdown run on the program's main thread.
class Task::Impl {
 public:
  Impl(const RuntimeOptions& options, const TfConfig& config);
  ~Impl();

  absl::Status Start();
  // Builds telemetry_ (and its OTLP exporter, from the OTEL_* variables) and registers the
  // task's collector; /metrics binds `host` when it is an IP address.
  absl::Status StartTelemetry(const std::string& host);
  absl::Status ServeUntilDone();
  absl::StatusOr<ParameterClient*> CreateSession();
  absl::Status FinishTraining();
  // Tells `peer` this task is done, waiting out a ps that is stopped, restarting or cut off for
  // up to ps_patience_s; the failure in words.
  absl::Status TellDone(const Session::Peer& peer, const v1::DoneRequest& request);
  void Stop();
  void Shutdown();

  // Who this task is; built once in Start (it never changes), read by every handshake and
  // heartbeat.
  const v1::TaskIdentity& Identity() const { return identity_; }
  v1::TaskIdentity BuildIdentity() const;
  // What this ps's ParameterService is built from.
  ParameterServiceParts ParameterServicePartsOf();
  // What this task's TaskService is built from.
  TaskServiceParts TaskServicePartsOf();
  // SIGINT/SIGTERM: the task leaves; SIGUSR1: it finishes (signals.h).
  void WatchSignals();
  // The gRPC server on listen_address_ with the task's services; fails naming the address.
  absl::Status StartServer(std::shared_ptr<grpc::ServerCredentials> credentials);
  // Credentials from options_.tls: sets channel_credentials_ and returns the server's. TLS
  // handshake failures are then logged as this task's (LogTlsRefusalsAs).
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> SetUpTls();

  // ps: loads this task's variables from the newest checkpoint in --checkpoint_dir that reads
  // whole (before it serves, so no worker sees it empty when there is one to restore).
  // What it restored goes into ps_memory_.
  absl::Status RestoreFromCheckpoint();
  // The checkpointing task: saves the values a PullAll just brought when a checkpoint is due.
  void MaybeCheckpoint(const std::vector<std::string>& values);
  // Called by CreateSession: makes this task the checkpointing one when it is (chief, or worker:0
  // without a chief) and --checkpoint_dir is set.
  void StartCheckpointSaver();

 private:
  friend class Task;  // Its facade (task.h) reads its state.

  const RuntimeOptions options_;
  const ClusterSpec cluster_;
  const TaskRef self_;
  const uint64_t incarnation_;
  // The trainers' handshakes and Done: a ps serves until all are done.
  TrainerRegistry trainers_;
  std::string listen_address_;
  // Of every channel to a peer: plain text, or TLS from options_.tls.
  std::shared_ptr<grpc::ChannelCredentials> channel_credentials_;
  v1::TaskIdentity identity_;
  std::atomic<bool> stopping_{false};          // A stop signal: leaving, not done.
  std::atomic<bool> finish_requested_{false};  // SIGUSR1: finish training now, done.
  FaultInjector faults_;  // What InjectFault arms: delays, lost answers, wedges.
  TaskStatus status_;
  // Before everything that records into them, so that they outlive it; the task's collector
  // before the telemetry that calls it.
  std::unique_ptr<TaskMetrics> metrics_;
  std::unique_ptr<telemetry::Telemetry> telemetry_;
  std::unique_ptr<ParameterStore> store_;  // ps only.
  std::unique_ptr<Session> session_;
  std::unique_ptr<ParameterClient> client_;
  // ps: its incarnation and the checkpoint it restored at startup, if any.
  PsMemory ps_memory_{incarnation_};
  // Who calls the services: built in Start, once telemetry is.
  std::unique_ptr<Callers> callers_;
  RecentRequests recent_pushes_{4096};
  // The checkpointing task (chief, or worker:0 without one) with --checkpoint_dir.
  std::unique_ptr<CheckpointSaver> saver_;

  std::unique_ptr<grpc::Service> task_service_;
  std::unique_ptr<grpc::Service> parameter_service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<SignalWatcher> signals_;
};

// The services a task serves.
std::unique_ptr<grpc::Service> NewTaskService(TaskServiceParts parts);
std::unique_ptr<grpc::Service> NewParameterService(ParameterServiceParts parts);

}  // namespace trainscope
