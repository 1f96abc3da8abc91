// The /proc reader on this very process, and on one that does not exist.
#include "trainscope/common/proc.h"

#include <gtest/gtest.h>
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

}  // namespace
}  // namespace trainscope
