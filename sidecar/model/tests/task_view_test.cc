// Task views in their API form: proto and JSON round trip, older sidecars' JSON, nonsense.
#include "trainscope/sidecar/task_view.h"

#include <gtest/gtest.h>

#include <cmath>

#include "trainscope/sidecar/api.h"

namespace trainscope::sidecar {
namespace {

TEST(TaskViewApi, ProtoAndJsonRoundTrip) {
  TaskView v;
  v.cluster = "c";
  v.task = {"worker", 2};
  v.address = "h:1";
  v.state = TaskState::kBlocked;
  v.reason = "waiting 3 s";
  v.since = 1.7e9;
  v.blocked_on.push_back({{"ps", 1}, "h:2", 3, "connection refused"});
  v.incarnation = 18446744073709551615ull;
  v.steps = 123456789012;
  v.peers.push_back({{"ps", 1}, "h:2", false, 4, "refused", -1, 0, "", true, 0.5, 0.9});
  pb::TaskList list;
  list.set_cluster("c");
  ToProto(v, true, list.add_tasks());
  const std::string json = ToJson(list);
  // The field names and shapes users script against.
  EXPECT_NE(json.find("\"waiting_on\":[\"ps:1\"]"), std::string::npos) << json;
  EXPECT_NE(json.find("\"state\":\"blocked\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"task\":2"), std::string::npos) << json;
  EXPECT_NE(json.find("\"steps\":123456789012"), std::string::npos) << json;
  EXPECT_NE(json.find("\"incarnation\":\"18446744073709551615\""), std::string::npos) << json;
  auto back = ParseTaskViews(json);
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->size(), 1u);
  const TaskView& b = (*back)[0];
  EXPECT_EQ(b.task, v.task);
  EXPECT_EQ(b.state, TaskState::kBlocked);
  EXPECT_EQ(b.reason, v.reason);
  EXPECT_EQ(b.WaitingOn(), std::vector<std::string>{"ps:1"});
  EXPECT_EQ(b.incarnation, v.incarnation);
  EXPECT_EQ(b.steps, v.steps);
  ASSERT_EQ(b.peers.size(), 1u);
  EXPECT_EQ(b.peers[0].consecutive_failures, 4);
  EXPECT_TRUE(b.peers[0].network_failure);
  EXPECT_DOUBLE_EQ(b.peers[0].step_share, 0.9);
}

// Every text and seconds fact crosses the proto both ways (api.cc copies them by a table of
// field names), and is bounded on the way in: durations never below 0, nothing not finite.
TEST(TaskViewApi, EveryTextAndSecondsFactRoundTripsAndIsBounded) {
  TaskView v;
  v.task = {"ps", 0};
  v.state = TaskState::kUp;
  std::vector<std::string TaskView::*> texts = {
      &TaskView::cluster,        &TaskView::address,         &TaskView::reason,
      &TaskView::source,         &TaskView::phase,           &TaskView::hostname,
      &TaskView::listen_address, &TaskView::runtime_version, &TaskView::metrics_address,
      &TaskView::node,           &TaskView::node_hostname};
  std::vector<double TaskView::*> seconds = {&TaskView::since,
                                             &TaskView::last_step_seconds,
                                             &TaskView::recent_step_seconds,
                                             &TaskView::usual_step_seconds,
                                             &TaskView::step_raised_seconds,
                                             &TaskView::cpu_seconds,
                                             &TaskView::heartbeat_age_seconds,
                                             &TaskView::latency_seconds,
                                             &TaskView::phi,
                                             &TaskView::observed_at,
                                             &TaskView::learned_at,
                                             &TaskView::serve_seconds,
                                             &TaskView::serve_queue_seconds,
                                             &TaskView::serve_work_seconds};
  for (size_t i = 0; i < texts.size(); ++i) v.*texts[i] = "text " + std::to_string(i);
  for (size_t i = 0; i < seconds.size(); ++i) v.*seconds[i] = 1.5 + static_cast<double>(i);
  pb::TaskView p;
  ToProto(v, true, &p);
  auto back = FromProto(p);
  ASSERT_TRUE(back.ok()) << back.status();
  for (size_t i = 0; i < texts.size(); ++i) EXPECT_EQ((*back).*texts[i], v.*texts[i]) << i;
  for (size_t i = 0; i < seconds.size(); ++i) EXPECT_EQ((*back).*seconds[i], v.*seconds[i]) << i;

  p.set_since(-5);                        // A time may be anything finite.
  p.set_cpu_seconds(-5);                  // A duration may not be negative.
  p.set_phi(std::nan(""));                // Not finite: 0.
  p.set_heartbeat_age_seconds(INFINITY);  // Not finite: "never answered".
  p.set_phase(std::string(kMaxText + 10, 'x'));
  back = FromProto(p);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->since, -5);
  EXPECT_EQ(back->cpu_seconds, 0);
  EXPECT_EQ(back->phi, 0);
  EXPECT_EQ(back->heartbeat_age_seconds, -1);
  EXPECT_LE(back->phase.size(), kMaxText);
}

TEST(TaskViewApi, OlderSidecarsJsonStillParses) {
  // What a sidecar of the previous release sent: numbers where they were numbers.
  auto views = ParseTaskViews(
      R"({"cluster":"c","tasks":[{"cluster":"c","role":"ps","task":0,"name":"ps:0",
          "state":"up","reason":"serving","since":1.7e9,"waiting_on":[],"blocked_on":[],
          "pid":4242,"incarnation":"77","restarts":1,"steps":5120,"resident_bytes":1048576,
          "peers":[],"heartbeat_age_seconds":0.05,"phi":0.1}]})");
  ASSERT_TRUE(views.ok()) << views.status();
  ASSERT_EQ(views->size(), 1u);
  EXPECT_EQ((*views)[0].pid, 4242);
  EXPECT_EQ((*views)[0].incarnation, 77u);
  EXPECT_EQ((*views)[0].steps, 5120);
  EXPECT_EQ(ParseTaskListJson(R"({"cluster":"c","tasks":[]})")->api_version(), 0);
}

TEST(TaskViewApi, NonsenseIsAnErrorOrSkipped) {
  for (const char* bad : {"", "null", "42", "{\"tasks\": 3}", "\xff\xfe", "{\"tasks\": [", "<html>",
                          "{\"tasks\": [{\"role\": 5}]}"}) {
    EXPECT_FALSE(ParseTaskViews(bad).ok()) << bad;
  }
  int skipped = 0;
  auto views = ParseTaskViews(
      R"({"tasks": [{"role": "", "task": 0, "state": "up"},
                    {"role": "ps", "task": -1, "state": "up"},
                    {"role": "ps", "task": 0, "state": "exploded"},
                    {"role": "p s", "task": 0, "state": "up"},
                    {"role": "ps", "task": 0, "state": "up", "since": 5,
                     "peers": [{"peer": "nonsense"}], "waiting_on": ["ps:"]}]})",
      &skipped);
  ASSERT_TRUE(views.ok()) << views.status();
  EXPECT_EQ(views->size(), 1u);
  EXPECT_EQ(skipped, 4);
  EXPECT_TRUE((*views)[0].peers.empty());
  EXPECT_TRUE((*views)[0].blocked_on.empty());
}

TEST(TaskViewApi, InvalidUtf8IsCleanedNotFatal) {
  TaskView v;
  v.task = {"ps", 0};
  v.reason = "bad \xff byte, then \xe2\x82\xac and a cut \xe2\x82";
  pb::TaskList list;
  ToProto(v, true, list.add_tasks());
  EXPECT_EQ(list.tasks(0).reason(), "bad ? byte, then \xe2\x82\xac and a cut ??");
  EXPECT_TRUE(ParseTaskViews(ToJson(list)).ok());
  EXPECT_EQ(CleanText(std::string(3000, 'x')).size(), kMaxText);
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
