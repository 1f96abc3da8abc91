// A task: its server (TaskService everywhere, ParameterService on ps tasks), CreateSession,
// the end-of-training protocol and signal handling. See task.h.
#include "trainscope/runtime/task.h"

#include <arpa/inet.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <random>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "internal.h"
#include "spdlog/spdlog.h"
#include "telemetry/interceptors.h"
#include "trainscope/common/proc.h"
#include "trainscope/common/rpc_error.h"
#include "trainscope/runtime/net_util.h"
#include "trainscope/runtime/parameter_client.h"
#include "trainscope/runtime/parameter_store.h"
#include "trainscope/runtime/status_macros.h"
#include "trainscope/runtime/task_status.h"
#include "trainscope/runtime/telemetry/context.h"
#include "trainscope/runtime/telemetry/telemetry.h"
#include "trainscope/runtime/telemetry/tracing.h"
#include "trainscope/runtime/version.h"
#include "trainscope/v1/runtime.grpc.pb.h"

namespace trainscope {
namespace {

// Jobs whose tasks train and so must say they are done before the ps tasks exit.
bool IsTrainer(const std::string& role) { return role != "ps" && role != "evaluator"; }

std::string Hostname() {
  char buf[256] = {};
  gethostname(buf, sizeof(buf) - 1);
  return buf;
}

uint64_t NewIncarnation() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd() ^ static_cast<uint64_t>(getpid());
}

void SleepFor(int64_t ms) {
  if (ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

}  // namespace

class Task::Impl {
 public:
  Impl(const RuntimeOptions& options, const TfConfig& config)
      : options_(options),
        cluster_(config.cluster),
        self_(*config.task),
        incarnation_(NewIncarnation()),
        parameter_delay_ms_(options.testing_parameter_delay_ms) {
    for (const TaskRef& t : cluster_.AllTasks()) {
      if (IsTrainer(t.role)) ++trainers_;
    }
  }

  absl::Status Start();
  absl::Status ServeUntilDone();
  absl::StatusOr<ParameterClient*> CreateSession();
  absl::Status FinishTraining();
  void Stop();
  void Shutdown();

  // Who this task is; built once in Start (it never changes), read by every handshake and
  // heartbeat.
  const v1::TaskIdentity& Identity() const { return identity_; }
  v1::TaskIdentity BuildIdentity() const;
  void FillHeartbeat(v1::HeartbeatResponse* response) const;
  // Records that `from` finished; returns the trainers still running.
  int MarkDone(const TaskRef& from);

  const RuntimeOptions options_;
  const ClusterSpec cluster_;
  const TaskRef self_;
  const uint64_t incarnation_;
  int trainers_ = 0;
  std::string listen_address_;
  v1::TaskIdentity identity_;
  std::atomic<bool> stopping_{false};
  std::atomic<int64_t> parameter_delay_ms_;
  std::atomic<int64_t> heartbeat_delay_ms_{0};
  TaskStatus status_;
  // Before everything that records into it, so that it outlives them.
  std::unique_ptr<telemetry::Telemetry> telemetry_;
  std::unique_ptr<ParameterStore> store_;  // ps only.
  std::unique_ptr<Session> session_;
  std::unique_ptr<ParameterClient> client_;

 private:
  void SignalLoop();

  std::unique_ptr<grpc::Service> task_service_;
  std::unique_ptr<grpc::Service> parameter_service_;
  std::unique_ptr<grpc::Server> server_;
  std::thread signal_thread_;
  std::atomic<bool> signal_thread_quit_{false};

  std::mutex mu_;
  std::condition_variable cv_;
  std::set<TaskRef> done_ ABSL_GUARDED_BY(mu_);
};

namespace {

// What a ParameterService handler records: in-flight count, the trace id on its log lines, and
// where its time went (queue, read/apply) as child spans of the call's server span and as
// histograms.
// Counts a ParameterService call in flight for its lifetime.
class Inflight {
 public:
  explicit Inflight(telemetry::Telemetry* t) : t_(t) {
    if (t_) t_->ps_inflight().fetch_add(1, std::memory_order_relaxed);
  }
  ~Inflight() {
    if (t_) t_->ps_inflight().fetch_sub(1, std::memory_order_relaxed);
  }

 private:
  telemetry::Telemetry* t_;
};

class TaskServiceImpl final : public v1::TaskService::Service {
 public:
  explicit TaskServiceImpl(Task::Impl* task) : task_(task) {}

  grpc::Status Handshake(grpc::ServerContext* context, const v1::HandshakeRequest* request,
                         v1::HandshakeResponse* response) override {
    telemetry::ServerCall call(task_->telemetry_.get(), *context,
                               "trainscope.v1.TaskService/Handshake", *request);
    *response->mutable_identity() = task_->Identity();
    const v1::TaskIdentity& from = request->from();
    const v1::TaskIdentity& me = response->identity();
    if (from.protocol_version() != me.protocol_version() ||
        from.cluster_fingerprint() != me.cluster_fingerprint()) {
      spdlog::warn(
          "{} at {} handshakes with protocol {} and cluster fingerprint {}; this task has "
          "protocol {} and fingerprint {}: its CreateSession will fail",
          TaskIdFromProto(from.task()).ShortName(), from.listen_address(), from.protocol_version(),
          from.cluster_fingerprint(), me.protocol_version(), me.cluster_fingerprint());
    }
    return call.Finish(grpc::Status::OK, response);
  }

  grpc::Status Done(grpc::ServerContext* context, const v1::DoneRequest* request,
                    v1::DoneResponse* response) override {
    telemetry::ServerCall call(task_->telemetry_.get(), *context, "trainscope.v1.TaskService/Done",
                               *request);
    response->set_workers_remaining(task_->MarkDone(TaskIdFromProto(request->from())));
    return call.Finish(grpc::Status::OK, response);
  }

  grpc::Status Heartbeat(grpc::ServerContext* context, const v1::HeartbeatRequest* request,
                         v1::HeartbeatResponse* response) override {
    telemetry::ServerCall call(task_->telemetry_.get(), *context,
                               "trainscope.v1.TaskService/Heartbeat", *request);
    SleepFor(task_->heartbeat_delay_ms_.load());
    task_->FillHeartbeat(response);
    return call.Finish(grpc::Status::OK, response);
  }

  grpc::Status InjectFault(grpc::ServerContext* context, const v1::InjectFaultRequest* request,
                           v1::InjectFaultResponse* response) override {
    telemetry::ServerCall call(task_->telemetry_.get(), *context,
                               "trainscope.v1.TaskService/InjectFault", *request);
    if (!task_->options_.enable_fault_injection) {
      return call.Finish(
          grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                       task_->self_.ShortName() + " does not accept injected faults: start it with "
                                                  "--enable_fault_injection"),
          nullptr);
    }
    task_->parameter_delay_ms_.store(std::max<int64_t>(0, request->parameter_delay_ms()));
    task_->heartbeat_delay_ms_.store(std::max<int64_t>(0, request->heartbeat_delay_ms()));
    spdlog::warn("fault injected: parameter calls delayed {} ms, heartbeats delayed {} ms",
                 task_->parameter_delay_ms_.load(), task_->heartbeat_delay_ms_.load());
    response->set_parameter_delay_ms(task_->parameter_delay_ms_.load());
    response->set_heartbeat_delay_ms(task_->heartbeat_delay_ms_.load());
    return call.Finish(grpc::Status::OK, response);
  }

 private:
  Task::Impl* task_;
};

class ParameterServiceImpl final : public v1::ParameterService::Service {
 public:
  explicit ParameterServiceImpl(Task::Impl* task) : task_(task) {}

  grpc::Status CreateVariable(grpc::ServerContext* context,
                              const v1::CreateVariableRequest* request,
                              v1::CreateVariableResponse* response) override {
    telemetry::ServerCall call(task_->telemetry_.get(), *context,
                               "trainscope.v1.ParameterService/CreateVariable", *request);
    Inflight inflight(task_->telemetry_.get());
    SleepFor(task_->parameter_delay_ms_.load());
    const std::string from = TaskIdFromProto(request->from()).ShortName();
    auto existed = task_->store_->Create(request->name(), SpecFromProto(request->initial()),
                                         request->initial().content(), from);
    if (!existed.ok()) {
      spdlog::error("CreateVariable from {} refused: {}", from,
                    std::string(existed.status().message()));
      return call.Finish(ToGrpcStatus(existed.status()), nullptr);
    }
    if (!*existed) {
      spdlog::info("created variable '{}' {} for {}; holding {} in {} variables", request->name(),
                   SpecFromProto(request->initial()).DebugString(), from,
                   HumanBytes(task_->store_->bytes_held()), task_->store_->num_variables());
    }
    response->set_existed(*existed);
    return call.Finish(grpc::Status::OK, response);
  }

  grpc::Status Pull(grpc::ServerContext* context, const v1::PullRequest* request,
                    v1::PullResponse* response) override {
    telemetry::ServerCall call(task_->telemetry_.get(), *context,
                               "trainscope.v1.ParameterService/Pull", *request);
    Inflight inflight(task_->telemetry_.get());
    SleepFor(task_->parameter_delay_ms_.load());
    call.Phase("ps.queue");
    for (const std::string& name : request->names()) {
      v1::Tensor* tensor = response->add_values();
      TensorSpec spec;
      absl::Status st = task_->store_->Read(name, &spec, tensor->mutable_content());
      if (!st.ok()) return call.Finish(ToGrpcStatus(st), nullptr);
      SpecToProto(spec, tensor);
    }
    call.Phase("ps.read");
    response->set_version(task_->store_->updates_applied());
    return call.Finish(grpc::Status::OK, response);
  }

  grpc::Status Push(grpc::ServerContext* context, const v1::PushRequest* request,
                    v1::PushResponse* response) override {
    telemetry::ServerCall call(task_->telemetry_.get(), *context,
                               "trainscope.v1.ParameterService/Push", *request);
    Inflight inflight(task_->telemetry_.get());
    SleepFor(task_->parameter_delay_ms_.load());
    const std::string from = TaskIdFromProto(request->from()).ShortName();
    ParameterStore::Timing timing;
    absl::Status st = task_->store_->ApplyGradient(
        request->name(), SpecFromProto(request->gradient()), request->gradient().content(),
        request->learning_rate(), from, &timing);
    // The injected delay and the wait for the variable are queueing; then the update.
    const double total = call.Elapsed();
    const double queue = std::max(0.0, total - timing.apply_seconds);
    call.Phases({{"ps.queue", queue}, {"ps.apply", timing.apply_seconds}});
    if (telemetry::Telemetry* t = task_->telemetry_.get()) {
      t->ps_queue().Observe(queue);
      t->ps_apply().Observe(timing.apply_seconds);
      t->ps_push_to_apply().Observe(total);
    }
    if (!st.ok()) {
      spdlog::error("Push from {} refused: {}", from, std::string(st.message()));
      return call.Finish(ToGrpcStatus(st), nullptr);
    }
    task_->status_.SetSteps(static_cast<int64_t>(task_->store_->updates_applied()));
    response->set_version(task_->store_->updates_applied());
    return call.Finish(grpc::Status::OK, response);
  }

 private:
  Task::Impl* task_;
};

}  // namespace

v1::TaskIdentity Task::Impl::BuildIdentity() const {
  v1::TaskIdentity id;
  *id.mutable_task() = TaskIdToProto(self_);
  id.set_cluster_name(options_.cluster_name);
  id.set_runtime_version(kRuntimeVersion);
  id.set_protocol_version(options_.testing_protocol_version != 0 ? options_.testing_protocol_version
                                                                 : kProtocolVersion);
  id.set_cluster_fingerprint(cluster_.Fingerprint());
  id.set_incarnation(incarnation_);
  for (const auto& [job, addresses] : cluster_.jobs()) {
    v1::JobSpec* spec = id.add_cluster();
    spec->set_name(job);
    for (const std::string& a : addresses) spec->add_addresses(a);
  }
  id.set_listen_address(listen_address_);
  id.set_pid(getpid());
  static const std::string kHostname = Hostname();
  id.set_hostname(kHostname);
  return id;
}

namespace {

void FillPeerView(const PeerHealth::Snapshot& s, v1::PeerView* view) {
  *view->mutable_peer() = TaskIdToProto(s.peer);
  view->set_address(s.address);
  view->set_connected(s.connected);
  view->set_consecutive_failures(s.consecutive_failures);
  view->set_last_error(s.last_error);
  view->set_seconds_since_success(s.seconds_since_success);
  view->set_peer_incarnation(s.peer_incarnation);
  view->set_peer_listen_address(s.peer_listen_address);
}

}  // namespace

void Task::Impl::FillHeartbeat(v1::HeartbeatResponse* response) const {
  *response->mutable_identity() = Identity();
  TaskStatus::Snapshot s = status_.Read();
  response->set_phase(static_cast<v1::Phase>(s.phase));
  if (s.waiting) {
    v1::Waiting* waiting = response->mutable_waiting();
    waiting->set_what(s.waiting_what);
    waiting->set_since_unix_seconds(s.waiting_since_unix);
    for (const auto& peer : s.waiting_on) FillPeerView(peer, waiting->add_peers());
  }
  response->set_steps(s.steps);
  for (const auto& peer : s.peers) FillPeerView(peer, response->add_peers());
  ResourceUsage usage = ReadResourceUsage();
  v1::ResourceUsage* resources = response->mutable_resources();
  resources->set_cpu_seconds(usage.cpu_seconds);
  resources->set_resident_bytes(usage.resident_bytes);
  resources->set_threads(usage.threads);
  resources->set_open_fds(usage.open_fds);
  response->set_unix_seconds(UnixSeconds());
  response->set_last_step_seconds(s.last_step_seconds);
  response->set_expects_progress(s.expects_progress);
  if (telemetry_) response->set_metrics_address(telemetry_->metrics_address());
}

absl::Status Task::Impl::Start() {
  const std::string name = self_.ShortName();
  TS_ASSIGN_OR_RETURN(std::string spec_address, cluster_.AddressOf(self_));
  listen_address_ = options_.listen_address.empty() ? spec_address : options_.listen_address;
  identity_ = BuildIdentity();
  auto parsed = ParseHostPort(listen_address_);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " cannot listen: ", parsed.status().message()));
  }
  const std::string host = parsed->host;
  const int port = parsed->port;
  // Bind once ourselves first: gRPC reports a failed bind without its cause.
  absl::Status can_listen = CheckCanListen(host, port);
  if (!can_listen.ok()) {
    return absl::Status(can_listen.code(), absl::StrCat(name, " cannot listen on ", listen_address_,
                                                        ": ", can_listen.message()));
  }

  // Signals go to one thread of ours; every thread started from here on inherits the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal_thread_ = std::thread([this] { SignalLoop(); });

  telemetry::TelemetryOptions telemetry_options;
  telemetry_options.enabled = options_.telemetry;
  telemetry_options.tracing = options_.tracing;
  telemetry_options.metrics_port = options_.metrics_port;
  in6_addr ip{};
  if (inet_pton(AF_INET, host.c_str(), &ip) == 1 || inet_pton(AF_INET6, host.c_str(), &ip) == 1) {
    telemetry_options.metrics_host = host;
  }
  auto telemetry = telemetry::Telemetry::Create(
      telemetry_options,
      {options_.cluster_name, self_, cluster_, &status_, nullptr, options_.ps_memory_limit_bytes});
  if (!telemetry.ok()) return telemetry.status();
  telemetry_ = *std::move(telemetry);

  if (self_.role == "ps") {
    store_ = std::make_unique<ParameterStore>(
        ParameterStoreOptions{name, options_.ps_memory_limit_bytes});
    telemetry_->SetStore(store_.get());
    parameter_service_ = std::make_unique<ParameterServiceImpl>(this);
  }
  task_service_ = std::make_unique<TaskServiceImpl>(this);

  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  // No SO_REUSEPORT: a second task on the same port must fail, not share it.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.SetMaxReceiveMessageSize(-1);
  builder.SetMaxSendMessageSize(-1);
  int bound_port = 0;
  builder.AddListeningPort(listen_address_, grpc::InsecureServerCredentials(), &bound_port);
  builder.RegisterService(task_service_.get());
  if (parameter_service_) builder.RegisterService(parameter_service_.get());
  server_ = builder.BuildAndStart();
  if (!server_ || bound_port == 0) {
    return absl::UnavailableError(
        absl::StrCat(name, " cannot listen on ", listen_address_, ": gRPC could not bind it"));
  }
  status_.SetPhase(self_.role == "ps" ? Phase::kServing : Phase::kStarting);
  spdlog::info(
      "{} (incarnation {:016x}, runtime {}, protocol {}) listening on {}{}", self_.FullName(),
      incarnation_, kRuntimeVersion, Identity().protocol_version(), listen_address_,
      telemetry_->metrics_address().empty()
          ? ""
          : absl::StrCat(", metrics on http://", telemetry_->metrics_address(), "/metrics"));
  return absl::OkStatus();
}

void Task::Impl::SignalLoop() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  timespec timeout{0, 200 * 1000 * 1000};
  while (!signal_thread_quit_.load()) {
    int sig = sigtimedwait(&signals, nullptr, &timeout);
    if (sig == SIGTERM || sig == SIGINT) {
      spdlog::warn("{} received {}: shutting down", self_.ShortName(),
                   sig == SIGTERM ? "SIGTERM" : "SIGINT");
      Stop();
    }
  }
}

void Task::Impl::Stop() {
  stopping_.store(true);
  std::lock_guard lock(mu_);
  cv_.notify_all();
}

int Task::Impl::MarkDone(const TaskRef& from) {
  std::lock_guard lock(mu_);
  bool fresh = done_.insert(from).second;
  int remaining = std::max(0, trainers_ - static_cast<int>(done_.size()));
  if (fresh) {
    spdlog::info("{} finished training; {} of {} trainers still running", from.ShortName(),
                 remaining, trainers_);
  }
  cv_.notify_all();
  return remaining;
}

absl::Status Task::Impl::ServeUntilDone() {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return stopping_.load() || static_cast<int>(done_.size()) >= trainers_; });
  if (!stopping_.load()) {
    spdlog::info("all {} trainers are done: {} shutting down", trainers_, self_.ShortName());
  }
  status_.SetPhase(Phase::kDone);
  return absl::OkStatus();
}

absl::StatusOr<ParameterClient*> Task::Impl::CreateSession() {
  const std::string me = self_.ShortName();
  std::vector<Session::Peer> ps;
  for (int i = 0; i < cluster_.NumTasks("ps"); ++i) {
    TaskRef ref{"ps", i};
    std::string address = *cluster_.AddressOf(ref);
    ps.push_back({ref, address, MakeChannel(address, telemetry_.get(), self_, ref),
                  status_.Peer(ref, address)});
  }
  if (ps.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat(me, " cannot create a session: the cluster spec lists no ps tasks"));
  }

  std::vector<int> pending(ps.size());
  for (size_t i = 0; i < ps.size(); ++i) pending[i] = static_cast<int>(i);
  auto pending_refs = [&] {
    std::vector<TaskRef> refs;
    for (int i : pending) refs.push_back(ps[i].task);
    return refs;
  };
  status_.SetPhase(Phase::kCreatingSession);
  status_.StartWaiting("CreateSession", pending_refs());

  v1::HandshakeRequest request;
  *request.mutable_from() = Identity();
  const double start = MonotonicSeconds();
  double next_log = start + options_.session_log_interval_s;
  int64_t backoff_ms = 100;
  const int64_t attempt_deadline_ms = std::clamp<int64_t>(options_.rpc_deadline_ms, 200, 2000);

  while (!pending.empty()) {
    if (stopping_.load()) return absl::CancelledError(absl::StrCat(me, " stopped by a signal"));
    // One round: handshake with every pending peer at once.
    struct Attempt {
      grpc::ClientContext context;
      v1::HandshakeResponse response;
      grpc::Status status;
    };
    std::vector<std::unique_ptr<Attempt>> attempts;
    std::mutex round_mu;
    std::condition_variable round_cv;
    size_t finished = 0;
    for (int i : pending) {
      auto attempt = std::make_unique<Attempt>();
      attempt->context.set_deadline(std::chrono::system_clock::now() +
                                    std::chrono::milliseconds(attempt_deadline_ms));
      v1::TaskService::Stub stub(ps[i].channel);
      Attempt* a = attempt.get();
      stub.async()->Handshake(&a->context, &request, &a->response, [&, a](grpc::Status s) {
        std::lock_guard lock(round_mu);
        a->status = std::move(s);
        ++finished;
        round_cv.notify_all();
      });
      attempts.push_back(std::move(attempt));
    }
    {
      std::unique_lock lock(round_mu);
      round_cv.wait(lock, [&] { return finished == attempts.size(); });
    }

    std::vector<int> still_pending;
    for (size_t k = 0; k < pending.size(); ++k) {
      const Session::Peer& peer = ps[pending[k]];
      Attempt& a = *attempts[k];
      if (!a.status.ok()) {
        peer.health->RecordFailure(SummarizeRpcError(
            a.status.error_code(), a.status.error_message(), attempt_deadline_ms));
        still_pending.push_back(pending[k]);
        continue;
      }
      const v1::TaskIdentity& theirs = a.response.identity();
      const std::string them = absl::StrCat(peer.task.ShortName(), " at ", peer.address);
      const TaskRef their_ref = TaskIdFromProto(theirs.task());
      if (their_ref != peer.task) {
        return absl::FailedPreconditionError(
            absl::StrCat("CreateSession failed: ", me, " expected ", peer.task.ShortName(), " at ",
                         peer.address, " but found ", their_ref.ShortName(),
                         " there: the cluster specs list different addresses for the same task"));
      }
      if (theirs.protocol_version() != request.from().protocol_version() ||
          theirs.runtime_version() != kRuntimeVersion) {
        return absl::FailedPreconditionError(absl::StrCat(
            "CreateSession failed: version mismatch: ", me, " runs runtime ", kRuntimeVersion,
            " with protocol version ", request.from().protocol_version(), " but ", them,
            " runs runtime ", theirs.runtime_version(), " with protocol version ",
            theirs.protocol_version(), "; run the same trainscope build on every task"));
      }
      if (theirs.cluster_fingerprint() != cluster_.Fingerprint()) {
        std::map<std::string, std::vector<std::string>> jobs;
        for (const v1::JobSpec& job : theirs.cluster()) {
          jobs[job.name()].assign(job.addresses().begin(), job.addresses().end());
        }
        auto their_spec = ClusterSpec::FromJobs(std::move(jobs));
        std::string how = their_spec.ok() ? DescribeSpecDifference(cluster_, me, *their_spec,
                                                                   peer.task.ShortName())
                                          : std::string(their_spec.status().message());
        return absl::FailedPreconditionError(absl::StrCat(
            "CreateSession failed: the cluster specs differ between ", me, " and ", them,
            " (fingerprints ", cluster_.Fingerprint(), " and ", theirs.cluster_fingerprint(),
            "): ", how, "; give every task the same TF_CONFIG \"cluster\""));
      }
      if (theirs.cluster_name() != options_.cluster_name) {
        return absl::FailedPreconditionError(
            absl::StrCat("CreateSession failed: ", me, " belongs to cluster '",
                         options_.cluster_name, "' but ", them, " belongs to cluster '",
                         theirs.cluster_name(), "': two training runs share these addresses"));
      }
      peer.health->SetIdentity(theirs.incarnation(), theirs.listen_address());
      peer.health->RecordSuccess();
      spdlog::info("CreateSession: reached {} at {} after {:.1f} s", peer.task.FullName(),
                   peer.address, MonotonicSeconds() - start);
    }
    pending = std::move(still_pending);
    status_.UpdateWaiting(pending_refs());
    if (pending.empty()) break;

    const double now = MonotonicSeconds();
    const double waited = now - start;
    if (options_.session_timeout_s > 0 && waited >= options_.session_timeout_s) {
      std::vector<std::string> missing;
      for (int i : pending) {
        missing.push_back(absl::StrCat(ps[i].task.ShortName(), " at ", ps[i].address, " (",
                                       ps[i].health->Read().last_error, ")"));
      }
      return absl::DeadlineExceededError(absl::StrCat(
          me, " gave up on CreateSession after ", options_.session_timeout_s,
          " s (--session_timeout_s); still missing ", absl::StrJoin(missing, ", "),
          ": is that task running, and listening on the address the cluster spec gives?"));
    }
    if (now >= next_log) {
      for (int i : pending) {
        spdlog::warn("CreateSession still waiting for {} at {} after {:.0f} s (last error: {})",
                     ps[i].task.FullName(), ps[i].address, waited, ps[i].health->Read().last_error);
      }
      next_log = now + options_.session_log_interval_s;
    }
    SleepFor(backoff_ms);
    backoff_ms = std::min<int64_t>(backoff_ms * 3 / 2, 1000);
  }
  status_.StopWaiting();
  status_.SetPhase(Phase::kTraining);
  status_.SetExpectsProgress(true);
  spdlog::info("CreateSession: {} reached all {} ps tasks in {:.1f} s", me, ps.size(),
               MonotonicSeconds() - start);
  session_ = std::make_unique<Session>(std::move(ps), telemetry_.get());
  client_ = std::make_unique<ParameterClient>(session_.get(), self_, options_.rpc_deadline_ms,
                                              options_.max_attempts);
  return client_.get();
}

absl::Status Task::Impl::FinishTraining() {
  status_.SetExpectsProgress(false);
  status_.SetPhase(Phase::kDone);
  if (!session_) return absl::OkStatus();
  v1::DoneRequest request;
  *request.mutable_from() = TaskIdToProto(self_);
  request.set_incarnation(incarnation_);
  absl::Status result;
  for (int i = 0; i < session_->num_ps(); ++i) {
    const Session::Peer& peer = session_->ps(i);
    v1::TaskService::Stub stub(peer.channel);
    grpc::Status st;
    for (int attempt = 0; attempt < options_.max_attempts; ++attempt) {
      grpc::ClientContext context;
      context.set_deadline(std::chrono::system_clock::now() +
                           std::chrono::milliseconds(options_.rpc_deadline_ms));
      v1::DoneResponse response;
      st = stub.Done(&context, request, &response);
      if (st.error_code() != grpc::StatusCode::UNAVAILABLE) break;
      SleepFor(100 << attempt);
    }
    if (!st.ok()) {
      result = absl::UnavailableError(absl::StrCat(
          "could not tell ", peer.task.ShortName(), " at ", peer.address, " that ",
          self_.ShortName(), " is done: ",
          SummarizeRpcError(st.error_code(), st.error_message(), options_.rpc_deadline_ms)));
      spdlog::warn("{}", std::string(result.message()));
    }
  }
  return result;
}

void Task::Impl::Shutdown() {
  // A task that finished answers a little longer, so that its watchers see a clean end (phase
  // done) rather than a process that vanished.
  if (status_.phase() == Phase::kDone) SleepFor(300);
  Stop();
  if (server_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  signal_thread_quit_.store(true);
  if (signal_thread_.joinable()) signal_thread_.join();
}

absl::StatusOr<std::unique_ptr<Task>> Task::Start(const RuntimeOptions& options,
                                                  const TfConfig& config) {
  if (!config.task) {
    return absl::InvalidArgumentError(
        "TF_CONFIG has no \"task\": every task must be told its role and index");
  }
  auto impl = std::make_unique<Impl>(options, config);
  TS_RETURN_IF_ERROR(impl->Start());
  return std::unique_ptr<Task>(new Task(std::move(impl)));
}

Task::Task(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Task::~Task() { impl_->Shutdown(); }
const TaskRef& Task::self() const { return impl_->self_; }
const ClusterSpec& Task::cluster() const { return impl_->cluster_; }
bool Task::IsParameterServer() const { return impl_->self_.role == "ps"; }
TaskStatus& Task::status() { return impl_->status_; }
absl::Status Task::ServeUntilDone() { return impl_->ServeUntilDone(); }
absl::StatusOr<ParameterClient*> Task::CreateSession() { return impl_->CreateSession(); }
absl::Status Task::FinishTraining() { return impl_->FinishTraining(); }
void Task::RecordStep(double seconds, double loss, int64_t examples) {
  impl_->status_.RecordStep(seconds);
  if (impl_->telemetry_) impl_->telemetry_->RecordStep(seconds, loss, examples);
}
std::string Task::metrics_address() const {
  return impl_->telemetry_ ? impl_->telemetry_->metrics_address() : "";
}
bool Task::stopping() const { return impl_->stopping_.load(); }
void Task::Stop() { impl_->Stop(); }
std::string Task::listen_address() const { return impl_->listen_address_; }

}  // namespace trainscope
