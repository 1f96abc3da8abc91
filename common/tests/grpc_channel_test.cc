// The channel arguments every channel of trainscope is made with (grpc_channel.h): keepalive on
// by default and off at 0, the reconnection backoff, retries off, an own connection when asked.
#include "trainscope/common/grpc_channel.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

namespace trainscope {
namespace {

// The integer arguments of `args`, by name.
std::map<std::string, int> Ints(const grpc::ChannelArguments& args) {
  std::map<std::string, int> out;
  const grpc_channel_args c = args.c_channel_args();
  for (size_t i = 0; i < c.num_args; ++i) {
    if (c.args[i].type == GRPC_ARG_INTEGER) out[c.args[i].key] = c.args[i].value.integer;
  }
  return out;
}

TEST(GrpcChannel, DefaultsPingAndReconnectQuicklyWithoutRetries) {
  const std::map<std::string, int> a = Ints(MakeChannelArguments());
  EXPECT_EQ(a.at(GRPC_ARG_KEEPALIVE_TIME_MS), 1000);
  EXPECT_EQ(a.at(GRPC_ARG_KEEPALIVE_TIMEOUT_MS), 1000);
  EXPECT_EQ(a.at(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS), 1000);
  EXPECT_EQ(a.at(GRPC_ARG_ENABLE_RETRIES), 0);
  EXPECT_EQ(a.count(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL), 0u);
}

TEST(GrpcChannel, KeepaliveZeroSetsNoPingsAndTheRestStays) {
  const std::map<std::string, int> a = Ints(MakeChannelArguments({.keepalive_time_ms = 0,
                                                                  .min_reconnect_ms = 500,
                                                                  .max_reconnect_ms = 5000,
                                                                  .own_connection = true,
                                                                  .max_receive_bytes = 1 << 20}));
  EXPECT_EQ(a.count(GRPC_ARG_KEEPALIVE_TIME_MS), 0u);
  EXPECT_EQ(a.count(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS), 0u);
  EXPECT_EQ(a.at(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS), 500);
  EXPECT_EQ(a.at(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS), 5000);
  EXPECT_EQ(a.at(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL), 1);
  EXPECT_EQ(a.at(GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH), 1 << 20);
}

}  // namespace
}  // namespace trainscope
