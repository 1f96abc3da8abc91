// Local-host matching.
#include "trainscope/sidecar/local_hosts.h"

#include <gtest/gtest.h>

namespace trainscope::sidecar {
namespace {

TEST(LocalHosts, LoopbackHostnameAndInterfaces) {
  LocalHosts hosts("node7", {"10.1.2.3", "fe80::1"});
  EXPECT_TRUE(hosts.IsLocal("127.0.0.1"));
  EXPECT_TRUE(hosts.IsLocal("127.8.9.1"));
  EXPECT_TRUE(hosts.IsLocal("localhost"));
  EXPECT_TRUE(hosts.IsLocal("::1"));
  EXPECT_TRUE(hosts.IsLocal("node7"));
  EXPECT_TRUE(hosts.IsLocal("10.1.2.3"));
  EXPECT_FALSE(hosts.IsLocal("10.1.2.4"));
  EXPECT_FALSE(hosts.IsLocal("no-such-host.invalid"));
}

TEST(LocalHosts, BoundToOneAddressOnlyThatCounts) {
  LocalHosts hosts = LocalHosts::Bound("127.0.0.5");
  EXPECT_TRUE(hosts.IsLocal("127.0.0.5"));
  EXPECT_FALSE(hosts.IsLocal("127.0.0.6"));
  EXPECT_FALSE(hosts.IsLocal("127.0.0.1"));
  EXPECT_FALSE(hosts.IsLocal("localhost"));
  EXPECT_FALSE(hosts.IsLocal(hosts.hostname()));
}

TEST(DefaultBindAddresses, TheTasksAddressesThenLoopbackElseEveryInterface) {
  EXPECT_EQ(DefaultBindAddresses({"127.0.0.2", "127.0.0.2", "localhost"}),
            (std::vector<std::string>{"127.0.0.2", "127.0.0.1"}));
  EXPECT_EQ(DefaultBindAddresses({"127.0.0.1"}), (std::vector<std::string>{"127.0.0.1"}));
  EXPECT_EQ(DefaultBindAddresses({"::1"}), (std::vector<std::string>{"::1", "127.0.0.1"}));
  EXPECT_EQ(DefaultBindAddresses({}), (std::vector<std::string>{"0.0.0.0"}));
  EXPECT_EQ(DefaultBindAddresses({"no-such-host.invalid"}), (std::vector<std::string>{"0.0.0.0"}));
}

}  // namespace
}  // namespace trainscope::sidecar
