// gRPC failures in words, and whether they blame the network or the peer.
#include "trainscope/common/rpc_error.h"

#include <gtest/gtest.h>

namespace trainscope {
namespace {

TEST(RpcErrorTest, Table) {
  struct Case {
    int code;
    const char* message;
    RpcFailure kind;
    const char* words;
  } cases[] = {
      {14,
       "failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:1: Failed to "
       "connect to remote host: Connection refused",
       RpcFailure::kRefused, "connection refused"},
      {14, "keepalive watchdog timeout", RpcFailure::kLost,
       "connection lost (no keepalive answer: packets stopped)"},
      {14, "failed to connect to all addresses; last error: UNKNOWN: No route to host",
       RpcFailure::kUnreachable, "no route to host"},
      {14, "Socket closed", RpcFailure::kLost, "connection closed by peer"},
      {14, "Connection reset by peer", RpcFailure::kLost, "connection reset by peer"},
      {14, "DNS resolution failed for nohost:1", RpcFailure::kUnreachable, "cannot resolve host"},
      {4, "Deadline Exceeded", RpcFailure::kTimeout, "no answer within 250 ms"},
      // A connect that never completes (packets dropped) ends in gRPC's handshaker shutdown:
      // no TLS involved.
      {14,
       "failed to connect to all addresses; last error: UNKNOWN: ipv4:10.0.0.1:4317: tcp "
       "handshaker shutdown",
       RpcFailure::kUnreachable, "connection timed out"},
      {14, "failed to connect; last error: UNKNOWN: ipv4:10.0.0.1:1: Invalid argument",
       RpcFailure::kUnreachable, "no route (the route to it is blocked)"},
      {3, "bad shape", RpcFailure::kApplication, "INVALID_ARGUMENT: bad shape"},
      {14, "", RpcFailure::kUnavailable, "UNAVAILABLE"},
      {14, "Trying to connect an http1.x server", RpcFailure::kApplication,
       "an HTTP/1 server answers there, not gRPC (wrong port?)"},
      {14, "UNAVAILABLE: ipv4:127.0.0.1:1: Failed parsing HTTP/2", RpcFailure::kApplication,
       "something that does not speak gRPC answers there (wrong port?)"},
  };
  for (const Case& c : cases) {
    RpcErrorSummary s = ClassifyRpcError(c.code, c.message, 250);
    EXPECT_EQ(s.kind, c.kind) << c.message;
    EXPECT_EQ(s.words, c.words) << c.message;
  }
  EXPECT_TRUE(IsNetworkFailure(RpcFailure::kLost));
  EXPECT_TRUE(IsNetworkFailure(RpcFailure::kUnreachable));
  EXPECT_FALSE(IsNetworkFailure(RpcFailure::kTimeout));
  EXPECT_FALSE(IsNetworkFailure(RpcFailure::kRefused));
}

// gRPC 1.51's and OpenSSL 3's messages, as a client sees them.
TEST(RpcErrorTest, TlsInWords) {
  struct Case {
    const char* message;
    const char* words;
  } cases[] = {
      {"failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:39431: Tls "
       "handshake failed: SSL_ERROR_SSL: error:0A000086:SSL routines::certificate verify failed",
       "TLS handshake failed: certificate signed by an unknown authority (or expired)"},
      {"failed to connect to all addresses; last error: UNKNOWN: ipv4:10.0.0.3:2222: Custom "
       "verification check failed with error: UNAUTHENTICATED: Hostname Verification Check "
       "failed.",
       "TLS handshake failed: certificate does not name 10.0.0.3"},
      {"failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:1: Tls handshake "
       "failed: SSL_ERROR_SSL: error:0A00010B:SSL routines::wrong version number",
       "TLS handshake failed: the peer does not speak TLS (plain text? give both the same "
       "--tls_* flags)"},
      {"last error: Handshake failed: sslv3 alert certificate expired",
       "TLS handshake failed: certificate expired"},
      {"last error: Handshake failed: something new",
       "TLS handshake failed: Handshake failed: "
       "something new"},
  };
  for (const Case& c : cases) {
    RpcErrorSummary s = ClassifyRpcError(14, c.message, 0);
    EXPECT_EQ(s.kind, RpcFailure::kTls) << c.message;
    EXPECT_EQ(s.words, c.words) << c.message;
  }
  EXPECT_EQ(TlsFailureWords("Handshake failed with fatal error SSL_ERROR_SSL: "
                            "error:0A0000C7:SSL routines::peer did not return a certificate."),
            "peer presented no certificate");
  EXPECT_EQ(TlsFailureWords("connection refused"), "");
}

// A TLS 1.3 client hears of the refusal of its certificate only as a closed socket.
TEST(RpcErrorTest, ClosedDuringTlsSetUpIsARefusal) {
  const char* closed =
      "failed to connect to all addresses; last error: UNAVAILABLE: ipv4:127.0.0.1:1: Socket "
      "closed";
  EXPECT_EQ(ClassifyRpcError(14, closed, 0).kind, RpcFailure::kLost);
  SetTlsClient(TlsClient::kWithCertificate);
  RpcErrorSummary s = ClassifyRpcError(14, closed, 0);
  EXPECT_EQ(s.kind, RpcFailure::kTls);
  EXPECT_NE(s.words.find("refused this task's certificate"), std::string::npos) << s.words;
  SetTlsClient(TlsClient::kWithoutCertificate);
  EXPECT_NE(ClassifyRpcError(14, closed, 0).words.find("give --tls_cert_file"), std::string::npos);
  // Once connected, a closed socket is a lost connection as ever.
  EXPECT_EQ(ClassifyRpcError(14, "Socket closed", 0).kind, RpcFailure::kLost);
  SetTlsClient(TlsClient::kNone);
}

}  // namespace
}  // namespace trainscope
