#pragma once
// How every long-lived gRPC channel and server of trainscope is set up: keepalive pings so that
// a connection that silently stops carrying packets (a cut route, a peer's machine gone) fails
// within about two seconds instead of when TCP gives up, servers that accept those pings, and
// quick reconnection once the path is back. Shared by the runtime and the sidecar.

#include <memory>
#include <string>

#include "grpcpp/channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/server_builder.h"
#include "grpcpp/support/channel_arguments.h"

namespace trainscope {

struct ChannelOptions {
  // A ping after this long without one, and the connection is dropped when its answer takes
  // longer than keepalive_timeout_ms: a silent connection fails within about their sum.
  // 0: no pings (gRPC's default), for channels whose every call has a short deadline anyway.
  int keepalive_time_ms = 1000;
  int keepalive_timeout_ms = 1000;
  // Ping also while no call is in flight. Off for channels that are mostly idle between short
  // calls with deadlines (the sidecars' exchange: one channel per peer, pinged every second
  // each, would cost in proportion to the cluster).
  bool keepalive_without_calls = true;
  // A server pings its own clients this often (it mostly only answers theirs).
  int server_keepalive_time_ms = 10000;
  // Reconnection backoff after a failure. gRPC also gives each connection attempt at least
  // min_reconnect_ms, and at most the current backoff: an attempt begun while the network was
  // down (its SYN lost) holds the calls made after the network is back for up to that long.
  int min_reconnect_ms = 100;
  int max_reconnect_ms = 1000;
  // The least time one connection attempt is given (TCP, TLS, the server's first HTTP/2
  // frame), when longer than min_reconnect_ms; 0: min_reconnect_ms. For one-shot calls an
  // operator waits on, whose peer may be busy: a first attempt cut short fails the call.
  int connect_timeout_ms = 0;
  // A connection of its own, not shared with other channels to the same address: a new channel
  // then means a new connection attempt (gRPC's local subchannel pool).
  bool own_connection = false;
  // Largest message accepted (-1: no limit).
  int max_receive_bytes = 4 << 20;
};

// Channel arguments for `options`; retries off (callers retry with their own policy).
grpc::ChannelArguments MakeChannelArguments(const ChannelOptions& options = {});

// A channel to `target` (host:port) with `options`.
std::shared_ptr<grpc::Channel> MakeChannel(
    const std::string& target, const ChannelOptions& options = {},
    std::shared_ptr<grpc::ChannelCredentials> credentials = nullptr);

// Lets a server accept its clients' keepalive pings (gRPC's defaults refuse pings more often
// than every 5 minutes and then drop the connection), and ping its own clients the same way.
void AcceptKeepalive(grpc::ServerBuilder* builder, const ChannelOptions& options = {});

}  // namespace trainscope
