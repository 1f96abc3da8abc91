#pragma once
// gRPC interceptors that record gRFC A66 call metrics, per-peer counters and deadlines, and a
// span for every call on both sides, linked across processes by W3C `traceparent` metadata.
// The server side hands its span to the handler through call metadata (kServerSpanKey).

#include <grpcpp/grpcpp.h>
#include <grpcpp/support/client_interceptor.h>
#include <grpcpp/support/server_interceptor.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "trainscope/runtime/cluster_spec.h"
#include "trainscope/runtime/telemetry/tracing.h"

namespace trainscope::telemetry {

class Telemetry;

// Metadata a client adds to every call: who calls, "worker:0".
inline constexpr char kCallerKey[] = "x-trainscope-task";
// Metadata the server interceptor adds for the handler: the server span, traceparent-encoded.
inline constexpr char kServerSpanKey[] = "x-trainscope-server-span";

// Interceptors for a channel to `peer` (at `address`), from task `self`.
std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>>
ClientInterceptors(Telemetry* telemetry, const TaskRef& self, const TaskRef& peer,
                   const std::string& address);

// Interceptors for the task's server.
std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
ServerInterceptors(Telemetry* telemetry);

// The server span of the call being handled, when it is traced.
std::optional<SpanContext> ServerSpanContext(const grpc::ServerContext& context);

}  // namespace trainscope::telemetry
