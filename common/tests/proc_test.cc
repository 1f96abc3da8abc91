// The /proc reader on this very process, and on one that does not exist.
#include "trainscope/common/proc.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "trainscope/common/clock.h"

namespace trainscope {
namespace {

TEST(ProcTest, ReadsThisProcess) {
  auto self = ReadProcStat();
  ASSERT_TRUE(self.has_value());
  EXPECT_EQ(self->state, 'R');
  EXPECT_GT(self->resident_bytes, 0);
  EXPECT_GE(self->threads, 1);
  EXPECT_GT(self->start_time_unix, 1.6e9);
  EXPECT_LE(self->start_time_unix, UnixSeconds() + 1);
  auto by_pid = ReadProcStat(getpid());
  ASSERT_TRUE(by_pid.has_value());
  EXPECT_NEAR(by_pid->start_time_unix, self->start_time_unix, 0.02);
  ResourceUsage usage = ReadResourceUsage();
  EXPECT_GT(usage.resident_bytes, 0);
  EXPECT_GE(usage.threads, 1);
  EXPECT_GE(usage.open_fds, 3);
  EXPECT_GT(usage.max_fds, 0);
  EXPECT_NEAR(usage.start_time_unix, self->start_time_unix, 0.02);
}

TEST(ProcTest, NoSuchProcess) {
  EXPECT_FALSE(ReadProcStat(999999999).has_value());
  EXPECT_FALSE(ReadProcStat(-5).has_value());
}

// A real listening socket of this process: its port's owner is this process; once closed, no one.
TEST(ProcTest, FindsThePortOwnerAndCountsFds) {
  int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(s, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(s, 1), 0);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(getsockname(s, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const int port = ntohs(addr.sin_port);
  std::optional<PortOwner> owner = FindPortOwner(port);
  ASSERT_TRUE(owner.has_value());
  EXPECT_EQ(owner->pid, getpid());
  EXPECT_FALSE(owner->command.empty());
  EXPECT_GE(CountOpenFds(getpid()), 3);
  close(s);
  EXPECT_FALSE(FindPortOwner(port).has_value());
  EXPECT_EQ(CountOpenFds(999999999), -1);
}

}  // namespace
}  // namespace trainscope
