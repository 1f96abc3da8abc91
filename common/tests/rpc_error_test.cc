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

TEST(RpcErrorTest, TlsKeepsGrpcsWords) {
  RpcErrorSummary s = ClassifyRpcError(
      14, "failed to connect; last error: Handshake failed: certificate verify failed", 0);
  EXPECT_EQ(s.kind, RpcFailure::kTls);
  EXPECT_EQ(s.words, "TLS handshake failed: Handshake failed: certificate verify failed");
}

}  // namespace
}  // namespace trainscope
