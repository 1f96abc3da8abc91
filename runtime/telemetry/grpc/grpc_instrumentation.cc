// Client and server interceptors for call metrics and spans; see interceptors.h.
#include "trainscope/telemetry/grpc_instrumentation.h"

#include <google/protobuf/message_lite.h>

#include <chrono>
#include <string_view>

#include "trainscope/telemetry/context.h"
#include "trainscope/telemetry/telemetry.h"

namespace trainscope::telemetry {
namespace {

using grpc::experimental::InterceptionHookPoints;
using Clock = std::chrono::steady_clock;

int64_t MessageSize(const void* message) {
  // Generated stubs pass the proto message itself; generic calls pass none.
  return message == nullptr
             ? 0
             : static_cast<int64_t>(
                   static_cast<const google::protobuf::MessageLite*>(message)->ByteSizeLong());
}

double Since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Common attributes of an RPC span (OpenTelemetry's rpc.* conventions).
void RpcAttributes(const char* method, SpanData* span) {
  std::string full = method;
  if (!full.empty() && full.front() == '/') full.erase(0, 1);
  const size_t slash = full.find('/');
  span->name = full;
  span->attributes.push_back({"rpc.system", std::string("grpc")});
  if (slash != std::string::npos) {
    span->attributes.push_back({"rpc.service", full.substr(0, slash)});
    span->attributes.push_back({"rpc.method", full.substr(slash + 1)});
  }
}

void EndSpan(Tracer& tracer, SpanData& span, const grpc::Status& status) {
  span.end_unix_nano = NowUnixNanos();
  span.attributes.push_back({"rpc.grpc.status_code", static_cast<int64_t>(status.error_code())});
  if (!status.ok()) {
    span.status_code = 2;
    span.status_message = status.error_message();
  }
  tracer.End(std::move(span));
}

// Calls we do not trace: the watchers' polls and the trace export itself.
bool Traced(int method) {
  const std::string_view name = RpcMetrics::MethodName(method);
  return name != "trainscope.v1.TaskService/Heartbeat" && name != "grpc.health.v1.Health/Check" &&
         name != "grpc.health.v1.Health/Watch" &&
         name != "opentelemetry.proto.collector.trace.v1.TraceService/Export";
}

class ClientInterceptor final : public grpc::experimental::Interceptor {
 public:
  ClientInterceptor(Telemetry* t, grpc::experimental::ClientRpcInfo* info, int peer, int role,
                    const std::string* caller, const std::string* peer_name,
                    const std::string* address)
      : t_(t),
        info_(info),
        method_(RpcMetrics::MethodIndex(info->method())),
        peer_(peer),
        role_(role),
        caller_(caller),
        peer_name_(peer_name),
        address_(address) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* m) override {
    if (m->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      start_ = Clock::now();
      const auto deadline = info_->client_context()->deadline();
      const auto now = std::chrono::system_clock::now();
      if (deadline < now + std::chrono::hours(24 * 365)) {
        deadline_seconds_ = std::chrono::duration<double>(deadline - now).count();
      }
      t_->rpc().ClientAttemptStarted(method_, role_);
      auto* metadata = m->GetSendInitialMetadata();
      metadata->emplace(kCallerKey, *caller_);
      Tracer& tracer = t_->tracer();
      if (tracer.enabled() && Traced(method_)) {
        const SpanContext* parent = CurrentSpanContext();
        span_.context = tracer.NewContext(parent);
        if (parent != nullptr) span_.parent_span_id = parent->span_id;
        span_.kind = SpanKind::kClient;
        span_.start_unix_nano = NowUnixNanos();
        metadata->emplace("traceparent", FormatTraceparent(span_.context));
        if (span_.context.sampled) SetLastClientSpanContext(span_.context);
      }
    }
    if (m->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_MESSAGE)) {
      sent_ += MessageSize(m->GetSendMessage());
    }
    if (m->QueryInterceptionHookPoint(InterceptionHookPoints::POST_RECV_MESSAGE)) {
      rcvd_ += MessageSize(m->GetRecvMessage());
    }
    if (m->QueryInterceptionHookPoint(InterceptionHookPoints::POST_RECV_STATUS)) {
      const grpc::Status& status = *m->GetRecvStatus();
      const double seconds = Since(start_);
      t_->rpc().ClientAttemptEnded(method_, status.error_code(), role_, peer_, seconds, sent_,
                                   rcvd_, deadline_seconds_);
      if (span_.context.sampled) {
        RpcAttributes(info_->method(), &span_);
        span_.attributes.push_back({"net.peer.name", *address_});
        span_.attributes.push_back({"trainscope.peer_task", *peer_name_});
        span_.attributes.push_back({"rpc.request.bytes", sent_});
        span_.attributes.push_back({"rpc.response.bytes", rcvd_});
        if (deadline_seconds_ > 0) {
          span_.attributes.push_back(
              {"rpc.deadline_ms", static_cast<int64_t>(deadline_seconds_ * 1000 + 0.5)});
        }
        EndSpan(t_->tracer(), span_, status);
      }
    }
    m->Proceed();
  }

 private:
  Telemetry* t_;
  grpc::experimental::ClientRpcInfo* info_;
  const int method_;
  const int peer_;
  const int role_;
  const std::string* caller_;
  const std::string* peer_name_;
  const std::string* address_;
  Clock::time_point start_;
  double deadline_seconds_ = 0;
  int64_t sent_ = 0;
  int64_t rcvd_ = 0;
  SpanData span_;
};

class ClientFactory final : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  ClientFactory(Telemetry* t, const TaskRef& self, const TaskRef& peer, std::string address)
      : t_(t),
        peer_index_(t->rpc().PeerIndex(peer)),
        role_(t->rpc().RoleIndex(peer.role)),
        caller_(self.ShortName()),
        peer_name_(peer.ShortName()),
        address_(std::move(address)) {}

  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo* info) override {
    return new ClientInterceptor(t_, info, peer_index_, role_, &caller_, &peer_name_, &address_);
  }

 private:
  Telemetry* t_;
  const int peer_index_;
  const int role_;
  const std::string caller_;
  const std::string peer_name_;
  const std::string address_;
};

}  // namespace

std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>>
ClientInterceptors(Telemetry* telemetry, const TaskRef& self, const TaskRef& peer,
                   const std::string& address) {
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> out;
  if (telemetry != nullptr && telemetry->enabled()) {
    out.push_back(std::make_unique<ClientFactory>(telemetry, self, peer, address));
  }
  return out;
}

ServerCall::ServerCall(Telemetry* telemetry, const grpc::ServerContext& context, const char* method,
                       const google::protobuf::MessageLite& request)
    : t_(telemetry != nullptr && telemetry->enabled() ? telemetry : nullptr),
      context_(context),
      method_name_(method),
      start_(Clock::now()) {
  if (t_ == nullptr) return;
  method_ = RpcMetrics::MethodIndex(method);
  rcvd_ = static_cast<int64_t>(request.ByteSizeLong());
  const auto& metadata = context.client_metadata();
  std::optional<SpanContext> parent;
  if (auto it = metadata.find(kCallerKey); it != metadata.end()) {
    caller_.assign(it->second.data(), it->second.size());
  }
  role_ = t_->rpc().RoleIndex(absl::string_view(caller_).substr(0, caller_.find(':')));
  t_->rpc().ServerCallStarted(method_, role_);
  Tracer& tracer = t_->tracer();
  if (!tracer.enabled() || !Traced(method_)) return;
  if (auto it = metadata.find("traceparent"); it != metadata.end()) {
    parent = ParseTraceparent(absl::string_view(it->second.data(), it->second.size()));
  }
  span_.context = tracer.NewContext(parent ? &*parent : nullptr);
  if (parent) span_.parent_span_id = parent->span_id;
  span_.kind = SpanKind::kServer;
  span_.start_unix_nano = mark_unix_ = NowUnixNanos();
  scope_.emplace(span_.context);
}

ServerCall::~ServerCall() {
  if (!finished_) Finish(grpc::Status(grpc::StatusCode::UNKNOWN, "handler ended early"), nullptr);
}

double ServerCall::Elapsed() const { return Since(start_); }

void ServerCall::Phase(const char* name) {
  if (!span_.context.sampled) return;
  const uint64_t now = NowUnixNanos();
  span_.events.push_back({name, now, {{"duration_ns", static_cast<int64_t>(now - mark_unix_)}}});
  mark_unix_ = now;
}

void ServerCall::Phases(std::initializer_list<std::pair<const char*, double>> seconds) {
  if (!span_.context.sampled) return;
  for (const auto& [name, s] : seconds) {
    const int64_t ns = static_cast<int64_t>(s * 1e9);
    mark_unix_ += ns;
    span_.events.push_back({name, mark_unix_, {{"duration_ns", ns}}});
  }
}

grpc::Status ServerCall::Finish(grpc::Status status,
                                const google::protobuf::MessageLite* response) {
  finished_ = true;
  const auto late = std::chrono::system_clock::now() - context_.deadline();
  if (status.ok() && late > std::chrono::system_clock::duration::zero()) {
    status = grpc::Status(
        grpc::StatusCode::DEADLINE_EXCEEDED,
        std::string(method_name_) + " finished " +
            std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(late).count()) +
            " ms after the caller's deadline");
  }
  if (t_ == nullptr) return status;
  const int64_t sent =
      response != nullptr && status.ok() ? static_cast<int64_t>(response->ByteSizeLong()) : 0;
  t_->rpc().ServerCallEnded(method_, status.error_code(), role_, Since(start_), sent, rcvd_);
  if (span_.context.sampled) {
    RpcAttributes(method_name_, &span_);
    if (!caller_.empty()) span_.attributes.push_back({"trainscope.peer_task", caller_});
    span_.attributes.push_back({"rpc.request.bytes", rcvd_});
    span_.attributes.push_back({"rpc.response.bytes", sent});
    scope_.reset();
    EndSpan(t_->tracer(), span_, status);
  }
  return status;
}

}  // namespace trainscope::telemetry
