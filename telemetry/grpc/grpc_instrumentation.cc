// Client and server call scopes: metrics and flight records; see grpc_instrumentation.h.
#include "trainscope/telemetry/grpc_instrumentation.h"

#include <algorithm>
#include <string>

#include "trainscope/telemetry/flight_recorder.h"
#include "trainscope/telemetry/telemetry.h"

namespace trainscope::telemetry {
namespace {

using Clock = std::chrono::steady_clock;

uint64_t Nanos(Clock::duration d) {
  return static_cast<uint64_t>(
      std::max<int64_t>(0, std::chrono::duration_cast<std::chrono::nanoseconds>(d).count()));
}

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// A non-negative count in a record's 32 bits.
uint32_t Bytes(int64_t n) { return Saturate32(static_cast<uint64_t>(std::max<int64_t>(0, n))); }

// What both sides record of a call.
CallRecord Record(CallKind kind, const SpanContext& span, const std::array<uint8_t, 8>& parent,
                  Clock::time_point start, Clock::duration took, int method,
                  const grpc::Status& status, int peer, int64_t request_bytes,
                  int64_t response_bytes) {
  CallRecord r;
  r.trace_id = span.trace_id;
  r.span_id = span.span_id;
  r.parent_span_id = parent;
  r.start_unix_nano = UnixNanosAt(start);
  r.duration_nano = Nanos(took);
  r.request_bytes = Bytes(request_bytes);
  r.response_bytes = Bytes(response_bytes);
  r.peer = peer >= 0 ? static_cast<uint16_t>(peer) : kNoPeer;
  r.method = static_cast<uint8_t>(method);
  r.status = static_cast<uint8_t>(status.error_code());
  r.kind = kind;
  r.flags = span.sampled ? kRecordSampled : 0;
  return r;
}

}  // namespace

bool Traced(int method) {
  // Not the watchers' polls, the health checks, the trace export itself or unknown methods.
  return method >= 0 && method < methods::kHealthCheck && method != methods::kHeartbeat;
}

ClientCall::ClientCall(Telemetry* telemetry, int method, int peer, int64_t deadline_ms)
    : t_(telemetry != nullptr && telemetry->enabled() ? telemetry : nullptr),
      method_(method),
      peer_(peer),
      deadline_ms_(deadline_ms) {
  if (t_ == nullptr) return;
  start_ = Clock::now();
  role_ = t_->rpc().PeerRoleIndex(peer);
  t_->rpc().ClientAttemptStarted(method, role_);
  if (t_->recorder() == nullptr || !Traced(method)) return;
  traced_ = true;
  const SpanContext* parent = CurrentSpanContext();
  context_ = t_->tracer().NewContext(parent);
  if (parent != nullptr) parent_span_id_ = parent->span_id;
  SetLastClientSpanContext(context_);
}

ClientCall::~ClientCall() {
  if (!ended_) End(grpc::Status(grpc::StatusCode::CANCELLED, "call abandoned"), 0, 0);
}

void ClientCall::TakeKept(std::vector<CallId>* out) const {
  if (traced_ && t_->tail()->HasKept(peer_)) t_->tail()->TakeKept(peer_, out);
}

void ClientCall::AddTraceparent(grpc::ClientContext* context) const {
  if (traced_) context->AddMetadata(kTraceparentKey, FormatTraceparent(context_));
}

void ClientCall::End(const grpc::Status& status, int64_t request_bytes, int64_t response_bytes) {
  if (ended_) return;
  ended_ = true;
  if (t_ == nullptr) return;
  const Clock::duration took = Clock::now() - start_;
  t_->rpc().ClientAttemptEnded(method_, status.error_code(), role_, peer_, Seconds(took),
                               request_bytes, response_bytes,
                               static_cast<double>(deadline_ms_) / 1000.0);
  if (!traced_) return;
  CallRecord r = Record(CallKind::kClient, context_, parent_span_id_, start_, took, method_, status,
                        peer_, request_bytes, response_bytes);
  r.deadline_ms = Bytes(deadline_ms_);
  if (!status.ok()) r.error = t_->recorder()->AddError(status.error_message());
  t_->recorder()->Record(r);
}

ServerCall::ServerCall(Telemetry* telemetry, const grpc::ServerContext& context, int method,
                       int caller, const RemoteContext* remote, int64_t request_bytes)
    : t_(telemetry != nullptr && telemetry->enabled() ? telemetry : nullptr),
      context_(context),
      method_(method),
      caller_(caller),
      start_(Clock::now()),
      mark_(start_),
      rcvd_(request_bytes) {
  if (t_ == nullptr) return;
  role_ = t_->rpc().PeerRoleIndex(caller);
  t_->rpc().ServerCallStarted(method, role_);
  if (t_->recorder() == nullptr || !Traced(method)) return;
  traced_ = true;
  std::optional<SpanContext> parent;
  if (remote != nullptr) {
    if (remote->parent.valid()) parent = remote->parent;
    if (!remote->kept.empty()) t_->tail()->KeepRequested(remote->kept);
  } else {
    const auto& metadata = context.client_metadata();
    if (auto it = metadata.find(kTraceparentKey); it != metadata.end()) {
      parent = ParseTraceparent(absl::string_view(it->second.data(), it->second.size()));
    }
  }
  span_ = t_->tracer().NewContext(parent ? &*parent : nullptr);
  if (parent) parent_span_id_ = parent->span_id;
  scope_.emplace(span_);
}

ServerCall::~ServerCall() {
  if (!finished_) Finish(grpc::Status(grpc::StatusCode::UNKNOWN, "handler ended early"), 0);
}

double ServerCall::Elapsed() const { return Seconds(Clock::now() - start_); }

void ServerCall::AddPhase(const char* name, uint64_t nanos) {
  if (phases_ < 2) {
    phase_names_[phases_] = name;
    phase_nanos_[phases_] = nanos;
  }
  ++phases_;
}

void ServerCall::Phase(const char* name) {
  if (!traced_) return;
  const Clock::time_point now = Clock::now();
  AddPhase(name, Nanos(now - mark_));
  mark_ = now;
}

void ServerCall::Phases(std::initializer_list<std::pair<const char*, double>> seconds) {
  if (!traced_) return;
  for (const auto& [name, s] : seconds) {
    const auto d = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
    AddPhase(name, Nanos(d));
    mark_ += d;
  }
}

grpc::Status ServerCall::Finish(grpc::Status status, int64_t response_bytes) {
  finished_ = true;
  const auto now_system = std::chrono::system_clock::now();
  const auto deadline = context_.deadline();
  const auto late = now_system - deadline;
  if (status.ok() && late > std::chrono::system_clock::duration::zero()) {
    status = grpc::Status(
        grpc::StatusCode::DEADLINE_EXCEEDED,
        std::string(RpcMetrics::MethodName(method_)) + " finished " +
            std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(late).count()) +
            " ms after the caller's deadline");
  }
  if (t_ == nullptr) return status;
  const Clock::duration took = Clock::now() - start_;
  const int64_t sent = status.ok() ? response_bytes : 0;
  t_->rpc().ServerCallEnded(method_, status.error_code(), role_, Seconds(took), sent, rcvd_);
  if (!traced_) return status;
  scope_.reset();
  CallRecord r = Record(CallKind::kServer, span_, parent_span_id_, start_, took, method_, status,
                        caller_, rcvd_, sent);
  // The time the call had from its arrival to its caller's deadline.
  const auto had = deadline - now_system + took;
  if (had < std::chrono::hours(24 * 365)) {
    r.deadline_ms = Saturate32(static_cast<uint64_t>(
        std::max<int64_t>(0, std::chrono::duration_cast<std::chrono::milliseconds>(had).count())));
  }
  for (int i = 0; i < std::min(phases_, 2); ++i) {
    r.phase_name[i] = FlightRecorder::PhaseIndex(phase_names_[i]);
    r.phase_nano[i] = Saturate32(phase_nanos_[i]);
  }
  if (!status.ok()) r.error = t_->recorder()->AddError(status.error_message());
  t_->recorder()->Record(r);
  return status;
}

}  // namespace trainscope::telemetry
