#pragma once
// gRPC call instrumentation, as scopes a program puts around its calls: gRFC A66 call metrics,
// per-peer counters and deadlines, and a flight record of every traced call on both sides (the
// tail sampler then decides which become spans). No interceptor and no metadata per call: gRPC's
// interception machinery and one metadata header cost more than all the rest (docs/telemetry.md).
// The trace context travels in the request (the program copies ClientCall::context() into it and
// hands what arrived to ServerCall); calls whose messages have no room for it use W3C
// `traceparent` metadata instead.

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <vector>

#include "trainscope/telemetry/context.h"
#include "trainscope/telemetry/tail_sampler.h"
#include "trainscope/telemetry/tracing.h"

namespace trainscope::telemetry {

class Telemetry;

// What a request carried about tracing.
struct RemoteContext {
  SpanContext parent;        // The caller's span; invalid when it sent none.
  std::vector<CallId> kept;  // Earlier calls to us that the caller kept.
};

// One attempt of a client call, from before the stub call to End. Not thread-safe: one thread
// makes the call. Costs a few relaxed atomic adds when telemetry is on, nothing when it is off.
class ClientCall {
 public:
  // An attempt of `method` (methods::kPull, ...) to `peer` (RpcMetrics::PeerIndex; -1 when not a
  // task of the cluster), with a deadline of `deadline_ms` (0: none). `telemetry` may be null.
  ClientCall(Telemetry* telemetry, int method, int peer, int64_t deadline_ms);
  // Ends the call as CANCELLED when End was not called.
  ~ClientCall();
  ClientCall(const ClientCall&) = delete;
  ClientCall& operator=(const ClientCall&) = delete;

  // The context to send with the request; invalid when the call is not traced.
  const SpanContext& context() const { return context_; }
  // Moves into `*out` the earlier calls to this peer that were kept, to send with the request so
  // that the peer keeps its half. Usually there are none, and this is one relaxed load.
  void TakeKept(std::vector<CallId>* out) const;
  // For requests with no room for the context: sends it as `traceparent` metadata.
  void AddTraceparent(grpc::ClientContext* context) const;
  // Records the attempt; sizes are the messages' bytes.
  void End(const grpc::Status& status, int64_t request_bytes, int64_t response_bytes);

 private:
  Telemetry* const t_;
  const int method_;
  const int peer_;
  const int64_t deadline_ms_;
  int role_ = 0;
  bool traced_ = false;
  bool ended_ = false;
  std::chrono::steady_clock::time_point start_;
  SpanContext context_;
  std::array<uint8_t, 8> parent_span_id_{};
};

// One server call, from its handler's start to the status it returns: A66 server metrics, the
// server span's context as the thread's current span (so log lines carry the trace id), and the
// phases of the call. Not thread-safe: one handler thread uses it.
class ServerCall {
 public:
  // `caller`: the calling task's peer index (-1: unknown). `remote`: what the request carried;
  // null reads `traceparent` metadata instead. `telemetry` may be null.
  ServerCall(Telemetry* telemetry, const grpc::ServerContext& context, int method, int caller,
             const RemoteContext* remote, int64_t request_bytes);
  ~ServerCall();
  ServerCall(const ServerCall&) = delete;
  ServerCall& operator=(const ServerCall&) = delete;

  // Records the call and returns the status to send. A call that finished after its caller's
  // deadline is DEADLINE_EXCEEDED on this side too, so the server's metrics show who was slow.
  grpc::Status Finish(grpc::Status status, int64_t response_bytes);

  // Ends a phase that began where the previous one ended (or at the call's start). `name` must
  // have static storage. The first two phases are recorded (events of the span).
  void Phase(const char* name);
  // Adds phases of known lengths, back to back from where the last phase ended.
  void Phases(std::initializer_list<std::pair<const char*, double>> seconds);
  // Seconds since the call began.
  double Elapsed() const;

 private:
  void AddPhase(const char* name, uint64_t nanos);

  Telemetry* const t_;
  const grpc::ServerContext& context_;
  const int method_;
  const int caller_;
  int role_ = 0;
  bool traced_ = false;
  bool finished_ = false;
  const std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point mark_;
  const int64_t rcvd_;
  int phases_ = 0;
  const char* phase_names_[2] = {nullptr, nullptr};
  uint64_t phase_nanos_[2] = {0, 0};
  SpanContext span_;
  std::array<uint8_t, 8> parent_span_id_{};
  std::optional<ScopedSpanContext> scope_;
};

// Whether calls of `method` are traced (heartbeats, health checks and span exports are not).
bool Traced(int method);

}  // namespace trainscope::telemetry
