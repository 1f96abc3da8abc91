#pragma once
// gRPC call instrumentation: a client interceptor and a server-side call scope that record
// gRFC A66 call metrics, per-peer counters and deadlines, and a span for every call on both
// sides, linked across processes by W3C `traceparent` metadata. The server side is a scope in
// each handler rather than a server interceptor: gRPC's server interception costs several
// microseconds a call (see docs/telemetry.md), the scope a few hundred nanoseconds.

#include <grpcpp/grpcpp.h>
#include <grpcpp/support/client_interceptor.h>

#include <chrono>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "trainscope/common/cluster_spec.h"
#include "trainscope/telemetry/context.h"
#include "trainscope/telemetry/tracing.h"

namespace google::protobuf {
class MessageLite;
}

namespace trainscope::telemetry {

class Telemetry;

// Metadata a client adds to every call: who calls, "worker:0".
inline constexpr char kCallerKey[] = "x-trainscope-task";

// Interceptors for a channel to `peer` (at `address`), from task `self`.
std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>>
ClientInterceptors(Telemetry* telemetry, const TaskRef& self, const TaskRef& peer,
                   const std::string& address);

// One server call, from its handler's start to the status it returns: A66 server metrics, the
// server span (child of the caller's, from `traceparent`) as the thread's current span, and
// events for the phases of the call. Not thread-safe: one handler thread uses it.
class ServerCall {
 public:
  // `method`: full name, "trainscope.v1.ParameterService/Pull". `telemetry` may be null.
  ServerCall(Telemetry* telemetry, const grpc::ServerContext& context, const char* method,
             const google::protobuf::MessageLite& request);
  ~ServerCall();
  ServerCall(const ServerCall&) = delete;
  ServerCall& operator=(const ServerCall&) = delete;

  // Records the call and returns the status to send. A call that finished after its caller's
  // deadline is DEADLINE_EXCEEDED on this side too, so the server's metrics show who was slow.
  grpc::Status Finish(grpc::Status status, const google::protobuf::MessageLite* response);

  // Ends a phase that began where the previous one ended (or at the call's start): an event on
  // the span with its duration.
  void Phase(const char* name);
  // Adds phases of known lengths, back to back from where the last phase ended.
  void Phases(std::initializer_list<std::pair<const char*, double>> seconds);
  // Seconds since the call began.
  double Elapsed() const;

 private:
  Telemetry* t_;
  const grpc::ServerContext& context_;
  const char* method_name_;
  int method_;
  int role_;
  std::chrono::steady_clock::time_point start_;
  uint64_t mark_unix_ = 0;
  int64_t rcvd_ = 0;
  std::string caller_;
  bool finished_ = false;
  SpanData span_;
  std::optional<ScopedSpanContext> scope_;
};

}  // namespace trainscope::telemetry
