#pragma once
// A failed gRPC call in a few words a person can act on ("connection refused", "no answer
// within 200 ms", "connection lost (keepalive)"), from its status code and message. Shared by
// every place that turns a gRPC failure into a reason or an error. No gRPC dependency.

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace trainscope {

// The kind of failure, for decisions (is it the network or the peer?).
enum class RpcFailure {
  kRefused,      // Nothing listens at the address.
  kUnreachable,  // No route, network unreachable, connect timed out, name not resolved.
  kLost,         // An established connection broke (reset, closed, keepalive timeout).
  kTimeout,      // The deadline passed: the peer was slow, or packets are being lost.
  kUnavailable,  // Other UNAVAILABLE.
  kTls,          // TLS handshake or certificate failure.
  kApplication,  // The peer answered with an error of its own.
};

struct RpcErrorSummary {
  RpcFailure kind = RpcFailure::kApplication;
  std::string words;  // "connection refused", "no answer within 200 ms", ...
};

// `code` is grpc::StatusCode's value, `message` grpc::Status's message, `deadline_ms` the
// call's deadline (0 when unknown).
RpcErrorSummary ClassifyRpcError(int code, absl::string_view message, int64_t deadline_ms);
// Just the words.
std::string SummarizeRpcError(int code, absl::string_view message, int64_t deadline_ms);
// True for failures that say the network path, not the peer, is the problem.
bool IsNetworkFailure(RpcFailure kind);

}  // namespace trainscope
