// Bind checks name the holder of a port; gRPC errors are summarized in a few words.
#include "net_util.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "process.h"

namespace trainscope {
namespace {

TEST(NetUtilTest, PortInUseNamesTheHolder) {
  int port = testing::FreePort();
  ASSERT_TRUE(CheckCanListen("127.0.0.1", port).ok());
  testing::ListeningSocket holder(port);
  ASSERT_GE(holder.fd(), 0);
  absl::Status st = CheckCanListen("127.0.0.1", port);
  EXPECT_EQ(st.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_NE(st.message().find("address already in use (held by pid " + std::to_string(getpid())),
            std::string::npos)
      << st.message();
  auto listener = FindListener(port);
  ASSERT_TRUE(listener.has_value());
  EXPECT_EQ(listener->first, getpid());
}

TEST(NetUtilTest, ForeignAddressIsNotAvailable) {
  absl::Status st = CheckCanListen("192.0.2.1", testing::FreePort());  // TEST-NET-1
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("not available on this machine"), std::string::npos);
}

// InjectFault is accepted only from this machine: which gRPC peers are.
TEST(NetUtilTest, IsLocalPeerTellsThisMachineFromOthers) {
  EXPECT_TRUE(IsLocalPeer("ipv4:127.0.0.1:5000"));
  EXPECT_TRUE(IsLocalPeer("ipv4:127.3.4.5:1"));
  EXPECT_TRUE(IsLocalPeer("ipv6:[::1]:5000"));
  EXPECT_TRUE(IsLocalPeer("ipv6:[::ffff:127.0.0.1]:5000"));
  EXPECT_TRUE(IsLocalPeer("unix:/tmp/sock"));
  EXPECT_FALSE(IsLocalPeer("ipv4:192.0.2.7:5000"));  // TEST-NET-1: never this machine's
  EXPECT_FALSE(IsLocalPeer("ipv6:[2001:db8::1]:5000"));
  EXPECT_FALSE(IsLocalPeer(""));
  EXPECT_FALSE(IsLocalPeer("ipv4:"));
  EXPECT_FALSE(IsLocalPeer("ipv6:[nonsense"));
  EXPECT_FALSE(IsLocalPeer("dns:example.com:80"));
}

}  // namespace
}  // namespace trainscope
