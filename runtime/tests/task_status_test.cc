// The bookkeeping behind a task's heartbeat: how long calls to a peer have been failing, and
// which step recovered from a failure.
#include "task_status.h"

#include <gtest/gtest.h>

#include <thread>

namespace trainscope {
namespace {

TEST(PeerHealthTest, SecondsFailingCountsFromTheRunsFirstFailureAndEndsWithASuccess) {
  PeerHealth h({"ps", 0}, "10.0.0.1:2222");
  h.RecordSuccess(0.001);
  EXPECT_EQ(h.Read().seconds_failing, 0);
  h.RecordFailure("connection timed out", /*network=*/true);
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  h.RecordFailure("connection timed out", /*network=*/true);
  PeerHealth::Snapshot s = h.Read();
  EXPECT_EQ(s.consecutive_failures, 2);
  EXPECT_GE(s.seconds_failing, 0.025);  // From the first failure, not the second.
  EXPECT_GE(s.seconds_since_success, s.seconds_failing);
  h.RecordSuccess(0.001);
  EXPECT_EQ(h.Read().seconds_failing, 0);
  EXPECT_TRUE(h.Read().connected);
}

TEST(TaskStatusTest, OnlyTheStepUnderWayWhenMarkedIsRecovered) {
  TaskStatus status;
  status.RecordStep(0.012);
  EXPECT_FALSE(status.Read().last_step_recovered);
  status.MarkStepRecovering();
  EXPECT_FALSE(status.Read().last_step_recovered);  // Said of the step once it ends.
  status.RecordStep(0.3);
  EXPECT_TRUE(status.Read().last_step_recovered);
  EXPECT_DOUBLE_EQ(status.Read().last_step_seconds, 0.3);
  status.RecordStep(0.012);
  EXPECT_FALSE(status.Read().last_step_recovered);
}

}  // namespace
}  // namespace trainscope
