// The channel arguments every channel of trainscope is made with (grpc_channel.h): keepalive on
// by default and off at 0, the reconnection backoff, retries off, an own connection when asked.
#include "trainscope/common/grpc_channel.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "grpcpp/generic/async_generic_service.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"

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

TEST(GrpcChannel, AConnectTimeoutLongerThanTheBackoffIsTheLeastAnAttemptGets) {
  const std::map<std::string, int> a =
      Ints(MakeChannelArguments({.min_reconnect_ms = 100, .connect_timeout_ms = 2000}));
  EXPECT_EQ(a.at(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS), 100);
  EXPECT_EQ(a.at(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS), 2000);
  EXPECT_EQ(Ints(MakeChannelArguments({.min_reconnect_ms = 300, .connect_timeout_ms = 50}))
                .at(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS),
            300);
}

// A loopback port whose connections say nothing for `hold` and then carry bytes to and from
// `target_port`: a server too busy to answer at once.
class SlowToAnswer {
 public:
  SlowToAnswer(int target_port, std::chrono::milliseconds hold) : target_(target_port) {
    listener_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (bind(listener_, reinterpret_cast<sockaddr*>(&addr), len) != 0 ||
        listen(listener_, 16) != 0 ||
        getsockname(listener_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      ADD_FAILURE() << "no loopback listener";
    }
    port_ = ntohs(addr.sin_port);
    acceptor_ = std::thread([this, hold] {
      while (!stop_) {
        pollfd p{listener_, POLLIN, 0};
        if (poll(&p, 1, 50) <= 0) continue;
        const int in = accept(listener_, nullptr, nullptr);
        if (in < 0) continue;
        pumps_.emplace_back([this, in, hold] { Carry(in, hold); });
      }
    });
  }
  ~SlowToAnswer() {
    stop_ = true;
    acceptor_.join();
    for (std::thread& t : pumps_) t.join();
    close(listener_);
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

 private:
  void Carry(int in, std::chrono::milliseconds hold) {
    const auto until = std::chrono::steady_clock::now() + hold;
    while (!stop_ && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    const int out = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(target_));
    if (connect(out, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
      pollfd p[2] = {{in, POLLIN, 0}, {out, POLLIN, 0}};
      char buf[16384];
      while (!stop_) {
        if (poll(p, 2, 50) < 0) break;
        bool closed = false;
        for (int i = 0; i < 2; ++i) {
          if ((p[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
          const ssize_t n = read(p[i].fd, buf, sizeof(buf));
          if (n <= 0 || write(p[1 - i].fd, buf, static_cast<size_t>(n)) != n) closed = true;
        }
        if (closed) break;
      }
    }
    close(out);
    close(in);
  }

  int target_;
  int listener_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread acceptor_;
  std::vector<std::thread> pumps_;  // Only the acceptor adds to it.
};

// What the first connection attempt to a server that takes `hold` to answer comes to, on a
// channel made with `options`: READY, or TRANSIENT_FAILURE when the attempt was cut short.
grpc_connectivity_state FirstAttempt(const ChannelOptions& options,
                                     std::chrono::milliseconds hold) {
  int port = 0;
  grpc::CallbackGenericService no_methods;  // A server needs one service to start.
  grpc::ServerBuilder builder;
  builder.RegisterCallbackGenericService(&no_methods);
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  SlowToAnswer slow(port, hold);
  std::shared_ptr<grpc::Channel> channel = MakeChannel(slow.address(), options);
  grpc_connectivity_state state = channel->GetState(/*try_to_connect=*/true);
  const auto give_up = std::chrono::system_clock::now() + std::chrono::seconds(20);
  while (state != GRPC_CHANNEL_READY && state != GRPC_CHANNEL_TRANSIENT_FAILURE &&
         channel->WaitForStateChange(state, give_up)) {
    state = channel->GetState(false);
  }
  server->Shutdown(std::chrono::system_clock::now());
  return state;
}

TEST(GrpcChannel, AServerSlowToAnswerIsReachedWithinTheConnectTimeoutNotTheBackoff) {
  const std::chrono::milliseconds hold(600);
  EXPECT_EQ(FirstAttempt({.min_reconnect_ms = 100}, hold), GRPC_CHANNEL_TRANSIENT_FAILURE);
  EXPECT_EQ(FirstAttempt({.min_reconnect_ms = 100, .connect_timeout_ms = 5000}, hold),
            GRPC_CHANNEL_READY);
}

}  // namespace
}  // namespace trainscope
