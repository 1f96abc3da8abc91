// A task's lifecycle: its identity, Start (bind the server, telemetry, signals), the
// end-of-training protocol (ServeUntilDone, FinishTraining) and Shutdown. The services,
// CreateSession and signal handling live in task_service.cc, parameter_service.cc, session.cc
// and signals.cc. See task.h.
#include "trainscope/runtime/task.h"

#include <arpa/inet.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "net_util.h"
#include "spdlog/spdlog.h"
#include "task_impl.h"
#include "trainscope/common/backoff.h"
#include "trainscope/common/clock.h"
#include "trainscope/common/grpc_channel.h"
#include "trainscope/common/grpc_tls.h"
#include "trainscope/common/resolve.h"
#include "trainscope/common/rpc_error.h"
#include "trainscope/runtime/status_macros.h"
#include "trainscope/runtime/version.h"
#include "trainscope/telemetry/otlp_exporter.h"
#include "trainscope/telemetry/telemetry.h"
#include "trainscope/v1/runtime.grpc.pb.h"

namespace trainscope {
namespace {

std::string Hostname() {
  char buf[256] = {};
  gethostname(buf, sizeof(buf) - 1);
  return buf;
}

uint64_t NewIncarnation() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd() ^ static_cast<uint64_t>(getpid());
}

// The largest message the task server accepts (RuntimeOptions::max_message_bytes).
int MaxReceiveBytes(const TaskRef& self, const RuntimeOptions& o) {
  if (self.role != "ps") return 4 << 20;
  int64_t limit = o.max_message_bytes;
  if (o.ps_memory_limit_bytes > 0) limit = std::min(limit, o.ps_memory_limit_bytes + (1 << 20));
  return static_cast<int>(std::clamp<int64_t>(limit, 1024, std::numeric_limits<int>::max()));
}

}  // namespace

// Ordinary traces when OTEL_TRACES_SAMPLER is not set: 1 in 100, parent-based. (The slow and
// failed calls are kept whatever the sampler says; OpenTelemetry's own default, every trace,
// costs a tight training loop about 15% of its rate: docs/telemetry.md.)
constexpr telemetry::SamplerOptions kDefaultSampler = {.ratio = 0.01, .parent_based = true};

void SleepFor(int64_t ms) {
  if (ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> Task::Impl::SetUpTls() {
  const std::string name = self_.ShortName();
  auto refuse = [&](const absl::Status& st) {
    return absl::InvalidArgumentError(absl::StrCat(name, " cannot use TLS: ", st.message()));
  };
  auto server = MakeServerCredentials(options_.tls);
  if (!server.ok()) return refuse(server.status());
  auto channel = MakeChannelCredentials(options_.tls);
  if (!channel.ok()) return refuse(channel.status());
  channel_credentials_ = *channel;
  if (options_.tls.enabled()) {
    LogTlsRefusalsAs(absl::StrCat(name, " at ", listen_address_),
                     [](const std::string& line) { spdlog::warn("{}", line); });
    spdlog::info("{}: TLS on its server and channels ({}), certificates re-read every {} s", name,
                 options_.tls.mutual() ? "mutual: peers must present a certificate of the CA"
                                       : "no client certificates",
                 kTlsRefreshSeconds);
  }
  return server;
}

Task::Impl::Impl(const RuntimeOptions& options, const TfConfig& config)
    : options_(options),
      cluster_(config.cluster),
      self_(*config.task),
      incarnation_(NewIncarnation()),
      trainers_(cluster_, self_),
      faults_(options.testing_parameter_delay_ms, options.testing_drop_push_answers),
      metrics_(std::make_unique<TaskMetrics>(options.cluster_name, self_, &status_,
                                             options.ps_memory_limit_bytes)) {}

Task::Impl::~Impl() = default;

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

absl::Status Task::Impl::StartTelemetry(const std::string& host) {
  telemetry::TelemetryOptions o;
  o.enabled = options_.telemetry;
  o.name = self_.ShortName();
  o.peers = cluster_.AllTasks();
  for (const TaskRef& peer : o.peers) o.peer_addresses.push_back(*cluster_.AddressOf(peer));
  o.trace_buffer_records = options_.trace_buffer_records;
  o.tail.slow_seconds = options_.trace_slow_ms / 1000.0;
  o.metrics_port = options_.metrics_port;
  // /metrics listens where the task server does (its host in the spec), not on every
  // interface, unless --metrics_address says otherwise. The server binds addresses, not names.
  o.metrics_host = options_.metrics_address.empty() ? NumericAddress(host)
                                                    : NumericAddress(options_.metrics_address);
  if (o.metrics_host.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(o.name, " cannot serve /metrics: cannot resolve ",
                     options_.metrics_address.empty() ? host : options_.metrics_address));
  }
  o.tls = options_.tls;
  o.log = [name = o.name](const std::string& m) { spdlog::info("{} /metrics: {}", name, m); };
  // Others reach this task at its host in the cluster spec (unless /metrics is elsewhere).
  const std::string& m = options_.metrics_address;
  const std::string* address = cluster_.FindAddress(self_);
  if (address != nullptr && (m.empty() || m == "0.0.0.0" || m == "::")) {
    if (auto spec = ParseHostPort(*address); spec.ok()) o.advertised_host = spec->host;
  }
  std::unique_ptr<telemetry::SpanExporter> exporter;
  if (options_.telemetry && options_.tracing) {
    std::string warning;
    const char* sampler = std::getenv("OTEL_TRACES_SAMPLER");
    if (sampler == nullptr || *sampler == '\0') {
      o.sampler = kDefaultSampler;
    } else {
      o.sampler = telemetry::Tracer::SamplerFromEnv(&warning);
      if (!warning.empty()) spdlog::warn("{}", warning);
    }
    o.batch = telemetry::BatchSpanProcessorOptionsFromEnv(&warning);
    if (!warning.empty()) spdlog::warn("{}", warning);
    telemetry::OtlpExporterOptions exporter_options =
        telemetry::OtlpOptionsFromEnv(options_.cluster_name, self_.role, self_.index, &warning);
    if (!warning.empty()) spdlog::warn("{}", warning);
    exporter_options.tls = options_.tls;
    auto otlp = telemetry::OtlpGrpcExporter::Create(exporter_options);
    if (!otlp.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(o.name, " cannot export traces: ", otlp.status().message()));
    }
    exporter = *std::move(otlp);
  }
  TS_ASSIGN_OR_RETURN(telemetry_, telemetry::Telemetry::Create(std::move(o), std::move(exporter)));
  telemetry_->AddCollector(
      [m = metrics_.get()](std::vector<prometheus::MetricFamily>* out) { m->Collect(out); });
  return absl::OkStatus();
}

// Before any thread of ours starts, so that they all inherit the blocked signals.
// Stopping is not finishing: a task stopped by a signal (an eviction, a node drain) says it
// is leaving, and a worker does not tell the ps tasks it is done, so they keep serving and
// keep its place for when it comes back.
void Task::Impl::WatchSignals() {
  signals_ = std::make_unique<SignalWatcher>([this](const char* signal) {
    if (std::string_view(signal) == "SIGUSR1") {  // Asked to finish: the job ends, done.
      spdlog::info("{} received SIGUSR1: finishing training now", self_.ShortName());
      finish_requested_.store(true);
      return;
    }
    spdlog::warn("{} received {}: leaving (stopped, not done{})", self_.ShortName(), signal,
                 self_.role == "ps" ? "" : ": the ps tasks are not told it finished");
    status_.SetPhase(Phase::kLeaving);
    Stop();
  });
}

// The task's gRPC server on listen_address_, serving its services.
absl::Status Task::Impl::StartServer(std::shared_ptr<grpc::ServerCredentials> credentials) {
  const std::string name = self_.ShortName();
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  // No SO_REUSEPORT: a second task on the same port must fail, not share it.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.SetMaxReceiveMessageSize(MaxReceiveBytes(self_, options_));
  builder.SetMaxSendMessageSize(-1);
  // Bounds on what clients can make this server hold: 64 calls at once on one connection (more
  // wait in the client, they do not fail) and 1024 threads serving calls (more are refused
  // with RESOURCE_EXHAUSTED). No memory quota: a ps must take max_message_bytes gradients from
  // many workers at once, and under a quota a burst would fail instead of queueing.
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, 64);
  grpc::ResourceQuota quota(absl::StrCat("trainscope-", name));
  quota.SetMaxThreads(1024);
  builder.SetResourceQuota(quota);
  // gRPC's default keeps at most 2 threads waiting for calls: a worker's Pull and Pushes arrive
  // together, so at every step the server started a thread and ended another (300 a second,
  // ~55 us each). Up to 16 waiting threads are kept instead; they are started only when needed.
  builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::MIN_POLLERS, 2);
  builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::MAX_POLLERS, 16);
  int bound_port = 0;
  builder.AddListeningPort(listen_address_, credentials, &bound_port);
  AcceptKeepalive(&builder, PeerChannelOptions());
  builder.RegisterService(task_service_.get());
  if (parameter_service_) builder.RegisterService(parameter_service_.get());
  server_ = builder.BuildAndStart();
  if (!server_ || bound_port == 0) {
    return absl::UnavailableError(
        absl::StrCat(name, " cannot listen on ", listen_address_, ": gRPC could not bind it"));
  }
  return absl::OkStatus();
}

ParameterServiceParts Task::Impl::ParameterServicePartsOf() {
  return {store_.get(), telemetry_.get(), metrics_.get(), &status_,
          &faults_,     &recent_pushes_,  callers_.get(), &ps_memory_};
}

TaskServiceParts Task::Impl::TaskServicePartsOf() {
  const PsMemory* ps_memory = store_ ? &ps_memory_ : nullptr;
  return {
      self_,
      options_.enable_fault_injection,
      telemetry_.get(),
      &trainers_,
      &faults_,
      Identity(),
      callers_.get(),
      Heartbeat(&status_, Identity(), telemetry_ ? telemetry_->metrics_address() : "", ps_memory),
      ps_memory};
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

  WatchSignals();

  TS_ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> credentials, SetUpTls());
  TS_RETURN_IF_ERROR(StartTelemetry(host));
  callers_ = std::make_unique<Callers>(cluster_, self_, options_.tls.mutual(), telemetry_.get(),
                                       metrics_.get());
  if (self_.role == "ps") {
    store_ = std::make_unique<ParameterStore>(
        ParameterStoreOptions{name, options_.ps_memory_limit_bytes});
    metrics_->SetStore(store_.get());
    TS_RETURN_IF_ERROR(RestoreFromCheckpoint());
    parameter_service_ = NewParameterService(ParameterServicePartsOf());
  }
  task_service_ = NewTaskService(TaskServicePartsOf());

  TS_RETURN_IF_ERROR(StartServer(credentials));
  status_.SetPhase(self_.role == "ps" ? Phase::kServing : Phase::kStarting);
  spdlog::info(
      "{} (incarnation {:016x}, runtime {}, protocol {}) listening on {}{}", self_.FullName(),
      incarnation_, kRuntimeVersion, Identity().protocol_version(), listen_address_,
      telemetry_->metrics_address().empty()
          ? ""
          : absl::StrCat(", metrics on ", options_.tls.cert_file.empty() ? "http" : "https", "://",
                         telemetry_->metrics_address(), "/metrics"));
  return absl::OkStatus();
}

void Task::Impl::Stop() {
  stopping_.store(true);
  faults_.Release();
  trainers_.Wake();
}

absl::Status Task::Impl::ServeUntilDone() {
  if (!trainers_.WaitAllDone([this] { return stopping_.load(); })) {
    status_.SetPhase(Phase::kLeaving);
    return absl::OkStatus();
  }
  spdlog::info("all {} trainers are done: {} shutting down after applying {} updates",
               trainers_.trainers(), self_.ShortName(), store_ ? store_->updates_applied() : 0);
  status_.SetPhase(Phase::kDone);
  return absl::OkStatus();
}

absl::Status Task::Impl::FinishTraining() {
  status_.SetExpectsProgress(false);
  saver_.reset();  // Finishes the checkpoint being written, if any.
  if (stopping_.load()) {
    status_.SetPhase(Phase::kLeaving);
    spdlog::warn("{} leaves without saying it is done: the ps tasks keep serving and expect it",
                 self_.ShortName());
    return absl::OkStatus();
  }
  status_.SetPhase(Phase::kDone);
  if (!session_) return absl::OkStatus();
  v1::DoneRequest request;
  *request.mutable_from() = TaskIdToProto(self_);
  request.set_incarnation(incarnation_);
  absl::Status result;
  for (int i = 0; i < session_->num_ps(); ++i) {
    if (absl::Status st = TellDone(session_->ps(i), request); !st.ok()) {
      result = st;
      spdlog::warn("{}", std::string(st.message()));
    }
  }
  return result;
}

absl::Status Task::Impl::TellDone(const Session::Peer& peer, const v1::DoneRequest& request) {
  v1::TaskService::Stub stub(peer.channel);
  Backoff backoff({.initial_s = 0.1, .max_s = 1, .multiplier = 2, .jitter = 0.2});
  const double start = MonotonicSeconds();
  grpc::Status st;
  bool transient = false;
  for (;;) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::milliseconds(options_.rpc_deadline_ms));
    telemetry::ClientCall call(telemetry_.get(), telemetry::methods::kDone, peer.index,
                               options_.rpc_deadline_ms);
    call.AddTraceparent(&context);
    v1::DoneResponse response;
    st = stub.Done(&context, request, &response);
    call.End(st, request.GetCachedSize(), MessageBytes(response));
    // A ps stopped, restarting or cut off is waited out as during training; a refusal is final.
    transient = st.error_code() == grpc::StatusCode::UNAVAILABLE ||
                st.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED;
    if (!transient || stopping_.load() || MonotonicSeconds() - start >= options_.ps_patience_s) {
      break;
    }
    SleepFor(backoff.NextDelayMs());
  }
  if (st.ok()) return absl::OkStatus();
  const std::string tried =
      transient ? absl::StrCat(" (tried for ", HumanDuration(MonotonicSeconds() - start), ")") : "";
  return absl::Status(
      transient ? absl::StatusCode::kUnavailable : static_cast<absl::StatusCode>(st.error_code()),
      absl::StrCat(
          "could not tell ", peer.task.ShortName(), " at ", peer.address, " that ",
          self_.ShortName(), " is done", tried, ": ",
          SummarizeRpcError(st.error_code(), st.error_message(), options_.rpc_deadline_ms)));
}

void Task::Impl::Shutdown() {
  // A task that finished answers a little longer, so that its watchers see a clean end (phase
  // done) rather than a process that vanished.
  if (status_.phase() == Phase::kDone || status_.phase() == Phase::kLeaving) SleepFor(300);
  Stop();
  if (server_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  signals_.reset();
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
absl::Status Task::ServeUntilDone() { return impl_->ServeUntilDone(); }
absl::StatusOr<ParameterClient*> Task::CreateSession() { return impl_->CreateSession(); }
absl::Status Task::FinishTraining() { return impl_->FinishTraining(); }
void Task::RecordStep(double seconds, double loss, int64_t examples) {
  impl_->status_.RecordStep(seconds);
  impl_->metrics_->RecordStep(seconds, loss, examples);
}
std::string Task::metrics_address() const {
  return impl_->telemetry_ ? impl_->telemetry_->metrics_address() : "";
}
bool Task::stopping() const { return impl_->stopping_.load() || impl_->finish_requested_.load(); }
void Task::Stop() { impl_->Stop(); }
std::string Task::listen_address() const { return impl_->listen_address_; }

}  // namespace trainscope
