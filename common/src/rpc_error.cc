// gRPC failures in words; see rpc_error.h.
#include "trainscope/common/rpc_error.h"

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace trainscope {
namespace {

constexpr int kDeadlineExceeded = 4;
constexpr int kUnavailable = 14;

struct Pattern {
  const char* needle;  // Lower case.
  RpcFailure kind;
  const char* words;
};

// gRPC's messages, most specific first. Matched case-insensitively.
constexpr Pattern kPatterns[] = {
    {"connection refused", RpcFailure::kRefused, "connection refused"},
    {"keepalive", RpcFailure::kLost, "connection lost (no keepalive answer: packets stopped)"},
    {"no route to host", RpcFailure::kUnreachable, "no route to host"},
    {"network is unreachable", RpcFailure::kUnreachable, "network is unreachable"},
    {"host is unreachable", RpcFailure::kUnreachable, "no route to host"},
    {"connection timed out", RpcFailure::kUnreachable, "connection timed out"},
    {"timeout occurred", RpcFailure::kUnreachable, "connection timed out"},
    {"dns resolution failed", RpcFailure::kUnreachable, "cannot resolve host"},
    {"name or service not known", RpcFailure::kUnreachable, "cannot resolve host"},
    {"certificate", RpcFailure::kTls, nullptr},
    {"handshake", RpcFailure::kTls, nullptr},
    {"ssl", RpcFailure::kTls, nullptr},
    {"connection reset", RpcFailure::kLost, "connection reset by peer"},
    {"broken pipe", RpcFailure::kLost, "connection closed by peer"},
    {"socket closed", RpcFailure::kLost, "connection closed by peer"},
    {"goaway", RpcFailure::kLost, "connection closed by peer (GOAWAY)"},
    {"trying to connect an http1.x server", RpcFailure::kApplication,
     "an HTTP/1 server answers there, not gRPC (wrong port?)"},
    {"failed parsing http/2", RpcFailure::kApplication,
     "something that does not speak gRPC answers there (wrong port?)"},
};

}  // namespace

RpcErrorSummary ClassifyRpcError(int code, absl::string_view message, int64_t deadline_ms) {
  const std::string lower = absl::AsciiStrToLower(message.substr(0, 2048));
  for (const Pattern& p : kPatterns) {
    if (!absl::StrContains(lower, p.needle)) continue;
    if (p.kind == RpcFailure::kTls) {
      // Keep gRPC's own words: they say which certificate check failed.
      size_t cut = message.rfind("last error: ");
      absl::string_view tail = cut == absl::string_view::npos ? message : message.substr(cut + 12);
      return {p.kind, absl::StrCat("TLS handshake failed: ", tail.substr(0, 200))};
    }
    return {p.kind, p.words};
  }
  if (code == kDeadlineExceeded) {
    return {RpcFailure::kTimeout, deadline_ms > 0
                                      ? absl::StrCat("no answer within ", deadline_ms, " ms")
                                      : std::string("deadline exceeded")};
  }
  std::string name = absl::StatusCodeToString(static_cast<absl::StatusCode>(code));
  if (name.empty()) name = absl::StrCat("code ", code);
  // Keep the last, most specific part of gRPC's message.
  size_t cut = message.rfind("last error: ");
  absl::string_view tail = cut == absl::string_view::npos ? message : message.substr(cut + 12);
  std::string text(tail.substr(0, 200));
  return {code == kUnavailable ? RpcFailure::kUnavailable : RpcFailure::kApplication,
          text.empty() ? name : absl::StrCat(name, ": ", text)};
}

std::string SummarizeRpcError(int code, absl::string_view message, int64_t deadline_ms) {
  return ClassifyRpcError(code, message, deadline_ms).words;
}

bool IsNetworkFailure(RpcFailure kind) {
  return kind == RpcFailure::kUnreachable || kind == RpcFailure::kLost;
}

}  // namespace trainscope
