// Reports of hooked programs (hook_reports.h): kept per task and pid, found only for the pid that
// holds the task's port, bounded, and never pushed out by other pids' reports.
#include "trainscope/sidecar/hook_reports.h"

#include <gtest/gtest.h>

namespace trainscope::sidecar {
namespace {

::trainscope::v1::HeartbeatResponse Report(const std::string& role, int index, int64_t pid,
                                           int64_t steps) {
  ::trainscope::v1::HeartbeatResponse r;
  r.mutable_identity()->mutable_task()->set_role(role);
  r.mutable_identity()->mutable_task()->set_index(index);
  r.mutable_identity()->set_pid(pid);
  r.set_steps(steps);
  return r;
}

TEST(HookReports, OnlyWatchedTasksWithAPid) {
  HookReports reports({{"worker", 0}});
  EXPECT_TRUE(reports.Put(Report("worker", 0, 42, 1), 1).ok());
  const absl::Status other = reports.Put(Report("worker", 1, 42, 1), 1);
  EXPECT_EQ(other.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(other.message().find("watches no task worker:1"), std::string::npos) << other;
  EXPECT_FALSE(reports.Put(Report("worker", 0, 0, 1), 1).ok());
  EXPECT_FALSE(reports.Put(Report(std::string(100000, 'x'), 0, 42, 1), 1).ok());
}

TEST(HookReports, FoundForThePortsHolderByEitherPid) {
  HookReports reports({{"worker", 0}});
  ASSERT_TRUE(reports.Put(Report("worker", 0, 42, 7), 3).ok());
  EXPECT_FALSE(reports.Find({"worker", 0}, 43, 0));
  EXPECT_FALSE(reports.Find({"worker", 1}, 42, 0));
  auto by_pid = reports.Find({"worker", 0}, 42, 0);
  ASSERT_TRUE(by_pid);
  EXPECT_EQ(by_pid->report.steps(), 7);
  EXPECT_EQ(by_pid->received_s, 3);
  // The hook sees its pid in its own PID namespace.
  EXPECT_TRUE(reports.Find({"worker", 0}, 9042, 42));
  ASSERT_TRUE(reports.Put(Report("worker", 0, 42, 8), 4).ok());
  EXPECT_EQ(reports.Find({"worker", 0}, 42, 0)->report.steps(), 8);
}

TEST(HookReports, OtherPidsCannotPushOutTheHoldersReport) {
  HookReports reports({{"worker", 0}});
  ASSERT_TRUE(reports.Put(Report("worker", 0, 42, 7), 1).ok());
  ASSERT_TRUE(reports.Find({"worker", 0}, 42, 0));  // The poller matched it to the holder.
  for (int64_t forger = 1000; forger < 1100; ++forger) {
    ASSERT_TRUE(reports.Put(Report("worker", 0, forger, 1 << 30), 2 + forger).ok());
  }
  auto kept = reports.Find({"worker", 0}, 42, 0);
  ASSERT_TRUE(kept);
  EXPECT_EQ(kept->report.steps(), 7);
  // At most kPidsPerTask reports: the newest forger's is among them, the first ones are gone.
  EXPECT_TRUE(reports.Find({"worker", 0}, 1099, 0));
  EXPECT_FALSE(reports.Find({"worker", 0}, 1000, 0));
}

}  // namespace
}  // namespace trainscope::sidecar
