// gRPC failures in words; see rpc_error.h.
#include "trainscope/common/rpc_error.h"

#include <atomic>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace trainscope {
namespace {

constexpr int kDeadlineExceeded = 4;
constexpr int kUnavailable = 14;

struct Pattern {
  const char* needle;  // Lower case.
  RpcFailure kind;
  const char* words;
  bool unavailable_only = false;  // Only in an UNAVAILABLE status (not a peer's own error).
};

// gRPC's messages, most specific first. Matched case-insensitively.
constexpr Pattern kPatterns[] = {
    {"connection refused", RpcFailure::kRefused, "connection refused"},
    {"keepalive", RpcFailure::kLost, "connection lost (no keepalive answer: packets stopped)"},
    {"no route to host", RpcFailure::kUnreachable, "no route to host"},
    // connect() on a blackhole route.
    {"invalid argument", RpcFailure::kUnreachable, "no route (the route to it is blocked)", true},
    {"network is unreachable", RpcFailure::kUnreachable, "network is unreachable"},
    {"host is unreachable", RpcFailure::kUnreachable, "no route to host"},
    {"connection timed out", RpcFailure::kUnreachable, "connection timed out"},
    {"timeout occurred", RpcFailure::kUnreachable, "connection timed out"},
    {"dns resolution failed", RpcFailure::kUnreachable, "cannot resolve host"},
    {"name or service not known", RpcFailure::kUnreachable, "cannot resolve host"},
    {"handshaker shutdown", RpcFailure::kUnreachable, "connection timed out"},
    {"certificate", RpcFailure::kTls, nullptr},
    {"hostname verification", RpcFailure::kTls, nullptr},
    {"wrong version number", RpcFailure::kTls, nullptr},
    {"ssl", RpcFailure::kTls, nullptr},
    {"tls", RpcFailure::kTls, nullptr},
    {"handshake failed", RpcFailure::kTls, nullptr},
    {"connection reset", RpcFailure::kLost, "connection reset by peer"},
    {"broken pipe", RpcFailure::kLost, "connection closed by peer"},
    {"socket closed", RpcFailure::kLost, "connection closed by peer"},
    {"goaway", RpcFailure::kLost, "connection closed by peer (GOAWAY)"},
    {"trying to connect an http1.x server", RpcFailure::kApplication,
     "an HTTP/1 server answers there, not gRPC (wrong port?)"},
    {"failed parsing http/2", RpcFailure::kApplication,
     "something that does not speak gRPC answers there (wrong port?)"},
};

// What follows gRPC's "last error: " (its most specific words), else all of `message`.
absl::string_view LastError(absl::string_view message) {
  size_t cut = message.rfind("last error: ");
  return cut == absl::string_view::npos ? message : message.substr(cut + 12);
}

// OpenSSL's and gRPC's words for TLS failures, most specific first. Matched case-insensitively.
struct TlsPattern {
  const char* needle;  // Lower case.
  const char* words;
};
constexpr TlsPattern kTlsPatterns[] = {
    {"certificate has expired", "certificate expired"},
    {"certificate expired", "certificate expired"},
    {"certificate is not yet valid", "certificate not yet valid"},
    {"peer did not return a certificate", "peer presented no certificate"},
    {"certificate required", "the peer requires a certificate and this task presented none"},
    {"unknown ca",
     "the peer does not trust this task's certificate (signed by a CA it does not know)"},
    {"bad certificate", "the peer refused this task's certificate"},
    {"certificate unknown", "the peer refused this task's certificate"},
    {"certificate verify failed", "certificate signed by an unknown authority (or expired)"},
    {"wrong version number",
     "the peer does not speak TLS (plain text? give both the same --tls_* flags)"},
    {"packet length too long",
     "the peer does not speak TLS (plain text? give both the same --tls_* flags)"},
    {"http request", "the peer does not speak TLS (plain text? give both the same --tls_* flags)"},
    {"no certificate", "peer presented no certificate"},
};

std::atomic<int> tls_client{0};  // A TlsClient.

}  // namespace

std::string TlsFailureWords(absl::string_view text) {
  const std::string lower = absl::AsciiStrToLower(text.substr(0, 2048));
  if (absl::StrContains(lower, "hostname verification") ||
      absl::StrContains(lower, "no match found for server name")) {
    // "ipv4:10.0.0.3:2222: Custom verification check failed ...": name the host.
    size_t at = lower.find("ipv4:");
    if (at == std::string::npos) at = lower.find("ipv6:");
    if (at == std::string::npos) return "certificate does not name the host dialled";
    absl::string_view address = absl::string_view(text).substr(at + 5);
    address = absl::StripSuffix(address.substr(0, address.find_first_of(" ,")), ":");
    address = address.substr(0, address.rfind(':'));  // The port.
    return absl::StrCat("certificate does not name ", address);
  }
  for (const TlsPattern& p : kTlsPatterns) {
    if (absl::StrContains(lower, p.needle)) return p.words;
  }
  return "";
}

void SetTlsClient(TlsClient mode) {
  tls_client.store(static_cast<int>(mode), std::memory_order_relaxed);
}

RpcErrorSummary ClassifyRpcError(int code, absl::string_view message, int64_t deadline_ms) {
  const std::string lower = absl::AsciiStrToLower(message.substr(0, 2048));
  const auto tls = static_cast<TlsClient>(tls_client.load(std::memory_order_relaxed));
  if (tls != TlsClient::kNone && code == kUnavailable &&
      absl::StrContains(lower, "failed to connect") && absl::StrContains(lower, "socket closed")) {
    // A TLS 1.3 client hears of the server's refusal of its certificate only as a closed socket.
    return {RpcFailure::kTls,
            tls == TlsClient::kWithCertificate
                ? "TLS handshake failed: the peer closed the connection during the "
                  "handshake: it refused this task's certificate (signed by a CA it does not "
                  "trust, or expired; its log says which)"
                : "TLS handshake failed: the peer closed the connection during the "
                  "handshake: it wants a client certificate (give --tls_cert_file)"};
  }
  for (const Pattern& p : kPatterns) {
    if (!absl::StrContains(lower, p.needle) || (p.unavailable_only && code != kUnavailable)) {
      continue;
    }
    if (p.kind == RpcFailure::kTls) {
      std::string words = TlsFailureWords(message);
      if (words.empty()) words = std::string(LastError(message).substr(0, 200));
      return {p.kind, absl::StrCat("TLS handshake failed: ", words)};
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
  std::string text(LastError(message).substr(0, 200));
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
