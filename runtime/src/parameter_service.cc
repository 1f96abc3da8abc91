// The ParameterService a ps task serves: CreateVariable, Pull and Push on its ParameterStore,
// with the time of each call split into queue and apply/read for metrics and traces.
#include <algorithm>
#include <string_view>
#include <unordered_set>

#include "spdlog/spdlog.h"
#include "task_impl.h"
#include "trainscope/common/clock.h"
#include "trainscope/runtime/status_macros.h"
#include "trainscope/telemetry/context.h"
#include "trainscope/telemetry/grpc_instrumentation.h"
#include "trainscope/telemetry/telemetry.h"
#include "trainscope/v1/runtime.grpc.pb.h"

namespace trainscope {
namespace {

// A Pull answers each variable once: a request that names one twice, or more variables than
// the ps holds, is refused rather than answered with copies (one request could otherwise make
// the ps build an answer of any size).
absl::Status CheckPullNames(const v1::PullRequest& request, size_t held) {
  const auto& names = request.names();
  auto from = [&] { return TaskIdFromProto(request.from()).ShortName(); };
  if (static_cast<size_t>(names.size()) > held) {
    return absl::InvalidArgumentError(absl::StrCat("a Pull from ", from(), " names ", names.size(),
                                                   " variables; this ps holds ", held));
  }
  auto twice = [&](const std::string& name) {
    return absl::InvalidArgumentError(
        absl::StrCat("a Pull from ", from(), " names variable '", name, "' twice"));
  };
  if (names.size() <= 16) {  // The usual few shards: compare pairwise, no allocation.
    for (int i = 1; i < names.size(); ++i) {
      for (int j = 0; j < i; ++j) {
        if (names[i] == names[j]) return twice(names[i]);
      }
    }
    return absl::OkStatus();
  }
  std::unordered_set<std::string_view> seen;
  for (const std::string& name : names) {
    if (!seen.insert(name).second) return twice(name);
  }
  return absl::OkStatus();
}

// What a ParameterService handler records: in-flight count, the trace id on its log lines, and
// where its time went (queue, read/apply) as child spans of the call's server span and as
// histograms.
// Counts a ParameterService call in flight for its lifetime, and lists it for the heartbeat
// (method, caller, trace, the thread serving it).
class Inflight {
 public:
  Inflight(const ParameterServiceParts& p, const char* method, const v1::TaskId& from)
      : m_(p.metrics), scope_(&p.status->inflight(), Registered(method, from)) {
    m_->ps_inflight().fetch_add(1, std::memory_order_relaxed);
  }
  ~Inflight() { m_->ps_inflight().fetch_sub(1, std::memory_order_relaxed); }

 private:
  static InflightCalls::Call Registered(const char* method, const v1::TaskId& from) {
    InflightCalls::Call c;
    c.method = method;
    c.peer = TaskIdFromProto(from);
    c.start = MonotonicSeconds();
    if (const telemetry::SpanContext* span = telemetry::CurrentSpanContext()) {
      c.traced = span->valid();
      c.trace_id = span->trace_id;
    }
    c.tid = CurrentTid();
    c.served = true;
    return c;
  }

  TaskMetrics* m_;
  InflightScope scope_;
};

class ParameterServiceImpl final : public v1::ParameterService::Service {
 public:
  explicit ParameterServiceImpl(ParameterServiceParts parts) : p_(std::move(parts)) {}

  grpc::Status CreateVariable(grpc::ServerContext* context,
                              const v1::CreateVariableRequest* request,
                              v1::CreateVariableResponse* response) override {
    telemetry::RemoteContext remote;
    telemetry::ServerCall call(p_.telemetry, *context, telemetry::methods::kCreateVariable,
                               p_.callers->Index(request->from()), GetTrace(*request, &remote),
                               MessageBytes(*request));
    Inflight inflight(p_, "CreateVariable", request->from());
    if (absl::Status st = p_.callers->Check(*context, request->from(), "CreateVariable");
        !st.ok()) {
      return call.Finish(ToGrpcStatus(st), 0);
    }
    p_.faults->BeforeParameterCall();
    const std::string from = TaskIdFromProto(request->from()).ShortName();
    auto existed = p_.store->Create(request->name(), SpecFromProto(request->initial()),
                                    request->initial().content(), from);
    if (!existed.ok()) {
      spdlog::error("CreateVariable from {} refused: {}", from,
                    std::string(existed.status().message()));
      return call.Finish(ToGrpcStatus(existed.status()), 0);
    }
    if (!*existed) {
      spdlog::info("created variable '{}' {} for {}; holding {} in {} variables", request->name(),
                   SpecFromProto(request->initial()).DebugString(), from,
                   HumanBytes(p_.store->bytes_held()), p_.store->num_variables());
    }
    response->set_existed(*existed);
    p_.ps_memory->Fill(response->mutable_ps_state());
    return call.Finish(grpc::Status::OK, MessageBytes(*response));
  }

  grpc::Status Pull(grpc::ServerContext* context, const v1::PullRequest* request,
                    v1::PullResponse* response) override {
    telemetry::RemoteContext remote;
    telemetry::ServerCall call(p_.telemetry, *context, telemetry::methods::kPull,
                               p_.callers->Index(request->from()), GetTrace(*request, &remote),
                               MessageBytes(*request));
    Inflight inflight(p_, "Pull", request->from());
    const double start = MonotonicSeconds();
    p_.faults->BeforeParameterCall();
    call.Phase("ps.queue");
    const double queued = MonotonicSeconds();
    if (absl::Status st = CheckPullNames(*request, static_cast<size_t>(p_.store->num_variables()));
        !st.ok()) {
      return call.Finish(ToGrpcStatus(st), 0);
    }
    for (const std::string& name : request->names()) {
      v1::Tensor* tensor = response->add_values();
      TensorSpec spec;
      absl::Status st = p_.store->Read(name, &spec, tensor->mutable_content());
      if (!st.ok()) return call.Finish(ToGrpcStatus(st), 0);
      SpecToProto(spec, tensor);
    }
    call.Phase("ps.read");
    const double end = MonotonicSeconds();
    p_.status->RecordServed(end - start, queued - start, end - queued);
    response->set_version(p_.store->updates_applied());
    p_.ps_memory->FillIncarnation(response->mutable_ps_state());
    return call.Finish(grpc::Status::OK, MessageBytes(*response));
  }

  grpc::Status Push(grpc::ServerContext* context, const v1::PushRequest* request,
                    v1::PushResponse* response) override {
    telemetry::RemoteContext remote;
    telemetry::ServerCall call(p_.telemetry, *context, telemetry::methods::kPush,
                               p_.callers->Index(request->from()), GetTrace(*request, &remote),
                               MessageBytes(*request));
    Inflight inflight(p_, "Push", request->from());
    const double start = MonotonicSeconds();
    if (absl::Status st = p_.callers->Check(*context, request->from(), "Push"); !st.ok()) {
      return call.Finish(ToGrpcStatus(st), 0);
    }
    p_.faults->BeforeParameterCall();
    const std::string from = TaskIdFromProto(request->from()).ShortName();
    p_.ps_memory->FillIncarnation(response->mutable_ps_state());
    // At most once: a retry of a Push this ps applied (its answer lost) is answered, not applied.
    const uint64_t sequence = request->sequence();
    if (sequence != 0 && !p_.recent_pushes->Insert(from, request->sender_incarnation(), sequence)) {
      spdlog::warn(
          "Push from {} (request {:x}/{}) was applied already: answering OK, not "
          "applying it twice",
          from, request->sender_incarnation(), sequence);
      response->set_duplicate(true);
      response->set_version(p_.store->updates_applied());
      return call.Finish(grpc::Status::OK, MessageBytes(*response));
    }
    ParameterStore::Timing timing;
    absl::Status st = p_.store->ApplyGradient(request->name(), SpecFromProto(request->gradient()),
                                              request->gradient().content(),
                                              request->learning_rate(), from, &timing);
    if (!st.ok() && sequence != 0) p_.recent_pushes->Erase(from, sequence);
    // The injected delay and the wait for the variable are queueing; then the update.
    const double total = call.Elapsed();
    const double queue = std::max(0.0, total - timing.apply_seconds);
    call.Phases({{"ps.queue", queue}, {"ps.apply", timing.apply_seconds}});
    TaskMetrics& m = *p_.metrics;
    m.ps_queue().Observe(queue);
    m.ps_apply().Observe(timing.apply_seconds);
    m.ps_push_to_apply().Observe(total);
    const double served = MonotonicSeconds() - start;
    p_.status->RecordServed(served, std::max(0.0, served - timing.apply_seconds),
                            timing.apply_seconds);
    if (!st.ok()) {
      spdlog::error("Push from {} refused: {}", from, std::string(st.message()));
      return call.Finish(ToGrpcStatus(st), 0);
    }
    p_.status->SetSteps(static_cast<int64_t>(p_.store->updates_applied()));
    response->set_version(p_.store->updates_applied());
    if (p_.faults->TakeDroppedPushAnswer()) {
      spdlog::warn("test hook: Push from {} applied, its answer dropped (UNAVAILABLE)", from);
      return call.Finish(
          grpc::Status(grpc::StatusCode::UNAVAILABLE, "test hook: answer dropped after applying"),
          0);
    }
    return call.Finish(grpc::Status::OK, MessageBytes(*response));
  }

 private:
  const ParameterServiceParts p_;
};

}  // namespace

std::unique_ptr<grpc::Service> NewParameterService(ParameterServiceParts parts) {
  return std::make_unique<ParameterServiceImpl>(std::move(parts));
}

}  // namespace trainscope
