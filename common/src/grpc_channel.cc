// Keepalive and reconnection settings of channels and servers; see grpc_channel.h.
#include "trainscope/common/grpc_channel.h"

#include <algorithm>

#include "grpcpp/create_channel.h"
#include "grpcpp/security/server_credentials.h"

namespace trainscope {

grpc::ChannelArguments MakeChannelArguments(const ChannelOptions& o) {
  grpc::ChannelArguments args;
  if (o.keepalive_time_ms > 0) {
    args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, o.keepalive_time_ms);
    args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, o.keepalive_timeout_ms);
    args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, o.keepalive_without_calls ? 1 : 0);
    args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  }
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, o.min_reconnect_ms);
  // gRPC's "minimum reconnect backoff" is the least time a connection attempt is given.
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS,
              std::max(o.min_reconnect_ms, o.connect_timeout_ms));
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, o.max_reconnect_ms);
  args.SetInt(GRPC_ARG_ENABLE_RETRIES, 0);
  if (o.own_connection) args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  args.SetMaxReceiveMessageSize(o.max_receive_bytes);
  return args;
}

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& target, const ChannelOptions& o,
                                           std::shared_ptr<grpc::ChannelCredentials> credentials) {
  if (!credentials) credentials = grpc::InsecureChannelCredentials();
  return grpc::CreateCustomChannel(target, credentials, MakeChannelArguments(o));
}

void AcceptKeepalive(grpc::ServerBuilder* builder, const ChannelOptions& o) {
  builder->AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
                              o.keepalive_time_ms / 2);
  builder->AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  builder->AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, o.server_keepalive_time_ms);
  builder->AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, o.keepalive_timeout_ms);
}

}  // namespace trainscope
