// Slow, not dead: a slow link named as a link, for real. linear_regression tasks on loopback
// (2 ps, 3 workers), one real trainscope-sidecar, and a slow link made by the worker itself
// (`trainscopectl fault --link_delay_ms ps:1=80`: its calls to ps:1 leave 80 ms late).
#include <gtest/gtest.h>

#include <string>
#include <thread>

#include "nlohmann/json.hpp"
#include "sidecar_harness.h"
#include "trainscope/sidecar/api.h"

namespace trainscope::testing {
namespace {

using sidecar::TaskState;
using std::chrono::seconds;

int Ctl(std::vector<std::string> args, std::string* output = nullptr) {
  Process ctl(BinPath("trainscopectl"), std::move(args));
  auto rc = ctl.Wait(seconds(10));
  if (output != nullptr) *output = ctl.Output();
  return rc.value_or(-1);
}

TEST(SidecarSlow, SlowLinkIsNamedAsALinkNotAPs) {
  Cluster cluster = {{"ps", {FreeAddress(), FreeAddress()}},
                     {"worker", {FreeAddress(), FreeAddress(), FreeAddress()}}};
  std::vector<std::unique_ptr<Process>> tasks;
  for (int i = 0; i < 2; ++i) tasks.push_back(StartTask(cluster, "ps", i, {}));
  for (int i = 0; i < 3; ++i) {
    tasks.push_back(StartTask(cluster, "worker", i, LongTraining({"--enable_fault_injection"})));
  }
  Sidecar sidecar(cluster, {});
  for (const char* t : {"worker:0", "worker:1", "worker:2"}) {
    ASSERT_TRUE(sidecar.WaitForState(t, TaskState::kUp, seconds(30))) << sidecar.Describe();
  }
  // Every edge carries calls: each worker reaches both ps.
  auto w0 = sidecar.Task("worker:0");
  ASSERT_TRUE(w0);
  ASSERT_EQ(w0->peers.size(), 2u) << sidecar.Describe();
  // The edges' usual latency is learned after a 10 s warm-up (EdgeWatch).
  std::this_thread::sleep_for(seconds(12));
  ASSERT_EQ(sidecar.Task("worker:0")->state, TaskState::kUp) << sidecar.Describe();

  std::string out;
  ASSERT_EQ(Ctl({"fault", "--task", cluster["worker"][0], "--link_delay_ms", "ps:1=80"}, &out), 0)
      << out;
  EXPECT_NE(out.find("link_delay_ms=ps:1=80"), std::string::npos) << out;
  auto slow =
      sidecar.WaitForState("worker:0", TaskState::kSlow, seconds(30), "slow link worker:0 -> ps:1");
  ASSERT_TRUE(slow) << sidecar.Describe();
  RecordProperty("reason", slow->reason);
  EXPECT_NE(slow->reason.find("not ps:1 nor worker:0"), std::string::npos) << slow->reason;
  // Neither end is blamed: the ps is up and says nothing of the worker; the others are up.
  for (const char* t : {"ps:0", "ps:1", "worker:1", "worker:2"}) {
    auto v = sidecar.Task(t);
    ASSERT_TRUE(v) << t;
    EXPECT_EQ(v->state, TaskState::kUp) << t << ": " << v->reason << "\n" << sidecar.Describe();
    EXPECT_EQ(v->reason.find("worker:0"), std::string::npos) << t << ": " << v->reason;
  }
  const std::string metrics = sidecar.Get("/metrics");
  EXPECT_NE(metrics.find("trainscope_task_slow_link{cluster=\"default\",role=\"worker\",task=\"0\","
                         "peer_role=\"ps\",peer_task=\"1\"} 1"),
            std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("trainscope_task_peer_latency_seconds{cluster=\"default\",role=\"worker\","
                         "task=\"0\",peer_role=\"ps\",peer_task=\"1\"} 0.0"),
            std::string::npos)
      << metrics;
  // The map in the API, as the page draws it: 6 edges, the one slow link marked.
  const auto list = nlohmann::json::parse(sidecar.Get("/api/v1/tasks"), nullptr, false);
  ASSERT_TRUE(list.is_object());
  ASSERT_EQ(list["worker_ps"].size(), 6u) << list["worker_ps"].dump();
  for (const auto& e : list["worker_ps"]) {
    const bool link = e["from"] == "worker:0" && e["to"] == "ps:1";
    EXPECT_EQ(e["slow_link"].get<bool>(), link) << e.dump();
    if (link) {
      EXPECT_GT(e["recent_seconds"].get<double>(), 0.06) << e.dump();
    }
  }
  std::string status;
  Ctl({"status", "--sidecar", sidecar.http()}, &status);
  EXPECT_NE(status.find("slow link worker:0 -> ps:1"), std::string::npos) << status;
  RecordProperty("ctl_status", status);

  // The link heals: the worker is up again, and the series is gone.
  ASSERT_EQ(Ctl({"fault", "--task", cluster["worker"][0]}, &out), 0) << out;
  ASSERT_TRUE(sidecar.WaitForState("worker:0", TaskState::kUp, seconds(30))) << sidecar.Describe();
  EXPECT_EQ(sidecar.Get("/metrics").find("trainscope_task_slow_link{"), std::string::npos);
}

TEST(SidecarSlow, BadLinkDelayIsRefusedClearly) {
  Cluster cluster = {{"ps", {FreeAddress()}}, {"worker", {FreeAddress()}}};
  auto ps = StartTask(cluster, "ps", 0, {"--enable_fault_injection"});
  Sidecar sidecar(cluster, {});
  ASSERT_TRUE(sidecar.WaitForState("ps:0", TaskState::kUp, seconds(30))) << sidecar.Describe();
  const std::string task = cluster["ps"][0];
  std::string out;
  EXPECT_EQ(Ctl({"fault", "--task", task, "--link_delay_ms", "ps:1"}, &out), 2);
  EXPECT_NE(out.find("expected PEER=MS"), std::string::npos) << out;
  EXPECT_EQ(Ctl({"fault", "--task", task, "--link_delay_ms", "ps:1=-5"}, &out), 2);
  EXPECT_EQ(Ctl({"fault", "--task", task, "--link_delay_ms", "nobody=80"}, &out), 1);
  EXPECT_NE(out.find("is not a task (e.g. ps:1)"), std::string::npos) << out;
  EXPECT_EQ(Ctl({"fault", "--task", task, "--link_delay_ms", "ps:1=999999"}, &out), 1);
  EXPECT_NE(out.find("must be in [0, 60000] ms"), std::string::npos) << out;
  // Nothing was set by the refusals, and the ps still serves.
  ASSERT_EQ(Ctl({"fault", "--task", task}, &out), 0) << out;
  EXPECT_EQ(out.find("link_delay_ms"), std::string::npos) << out;
  EXPECT_EQ(sidecar.Task("ps:0")->state, TaskState::kUp);
}

}  // namespace
}  // namespace trainscope::testing
