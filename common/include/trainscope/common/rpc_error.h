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
// gRPC's and OpenSSL's words for a failed TLS handshake ("CERTIFICATE_VERIFY_FAILED", "peer did
// not return a certificate", ...) as a person would say them ("certificate signed by an unknown
// authority"); empty when `text` is not about TLS.
std::string TlsFailureWords(absl::string_view text);
// What this process's channels are: plain text (the default), TLS without or with a client
// certificate. Under TLS a connection the peer closes while it is being set up is its refusal
// of this process's certificate, or of its lack of one (a TLS 1.3 client hears of it no other
// way), and the summary says so. Process-wide: every channel of a trainscope process uses the
// same --tls_* files. Thread-safe.
enum class TlsClient { kNone, kWithoutCertificate, kWithCertificate };
void SetTlsClient(TlsClient mode);
// True for failures that say the network path, not the peer, is the problem.
bool IsNetworkFailure(RpcFailure kind);

}  // namespace trainscope
