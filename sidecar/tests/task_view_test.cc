// JSON of task views as peer sidecars exchange them: round trip, and nonsense handled.
#include "trainscope/sidecar/task_view.h"

#include <gtest/gtest.h>

namespace trainscope::sidecar {
namespace {

TEST(TaskViewJson, RoundTrip) {
  TaskView v;
  v.cluster = "c";
  v.task = {"worker", 2};
  v.address = "h:1";
  v.state = TaskState::kBlocked;
  v.reason = "waiting 3 s";
  v.since = 1.7e9;
  v.blocked_on.push_back({{"ps", 1}, "h:2", 3, "connection refused"});
  v.incarnation = 18446744073709551615ull;
  v.peers.push_back({{"ps", 1}, "h:2", false, 4, "refused", -1, 0, ""});
  auto back = ParseTaskViewsJson(TaskViewsToJson("c", {v}));
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->size(), 1u);
  const TaskView& b = (*back)[0];
  EXPECT_EQ(b.task, v.task);
  EXPECT_EQ(b.state, TaskState::kBlocked);
  EXPECT_EQ(b.reason, v.reason);
  EXPECT_EQ(b.WaitingOn(), std::vector<std::string>{"ps:1"});
  EXPECT_EQ(b.incarnation, v.incarnation);
  ASSERT_EQ(b.peers.size(), 1u);
  EXPECT_EQ(b.peers[0].consecutive_failures, 4);
  EXPECT_NE(TaskViewsToJson("c", {v}).find("\"waiting_on\":[\"ps:1\"]"), std::string::npos);
}

TEST(TaskViewJson, NonsenseIsAnErrorOrSkipped) {
  for (const char* bad :
       {"", "null", "42", "{\"tasks\": 3}", "{\"x\": []}", "\xff\xfe", "{\"tasks\": [", "<html>"}) {
    EXPECT_FALSE(ParseTaskViewsJson(bad).ok()) << bad;
  }
  int skipped = 0;
  auto views = ParseTaskViewsJson(
      R"({"tasks": [1, "x", {"role": 5, "task": 0, "state": "up"},
                    {"role": "ps", "task": -1, "state": "up"},
                    {"role": "ps", "task": 0, "state": "exploded"},
                    {"role": "ps", "task": 1.5, "state": "up"},
                    {"role": "ps", "task": 0, "state": "up", "since": "yesterday",
                     "peers": [7, {"peer": 3}], "waiting_on": [1, "ps:"], "pid": 1e300}]})",
      &skipped);
  ASSERT_TRUE(views.ok()) << views.status();
  EXPECT_EQ(views->size(), 1u);
  EXPECT_EQ(skipped, 6);
  EXPECT_EQ((*views)[0].since, 0);
  EXPECT_EQ((*views)[0].pid, 0);
}

TEST(TaskViewJson, InvalidUtf8InAReasonDoesNotThrow) {
  TaskView v;
  v.task = {"ps", 0};
  v.reason = "bad \xff byte";
  std::string json = TaskViewsToJson("c", {v});
  EXPECT_TRUE(ParseTaskViewsJson(json).ok());
}

TEST(TaskViewSort, ProblemsFirst) {
  std::vector<TaskView> v(3);
  v[0].task = {"ps", 0};
  v[0].state = TaskState::kUp;
  v[1].task = {"worker", 0};
  v[1].state = TaskState::kSlow;
  v[2].task = {"worker", 1};
  v[2].state = TaskState::kDead;
  SortForPeople(v);
  EXPECT_EQ(v[0].task.ShortName(), "worker:1");
  EXPECT_EQ(v[2].task.ShortName(), "ps:0");
}

}  // namespace
}  // namespace trainscope::sidecar
