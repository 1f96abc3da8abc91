// Each sidecar state caused for real: linear_regression tasks (and, where a task must misbehave
// on cue, sidecar_fake_task) on loopback, one real trainscope-sidecar watching them.
#include <gtest/gtest.h>
#include <signal.h>

#include <map>
#include <string>
#include <thread>

#include "nlohmann/json.hpp"
#include "sidecar_harness.h"
#include "trainscope/sidecar/api.h"
#include "trainscope/sidecar/names.h"

namespace trainscope::testing {
namespace {

using sidecar::TaskState;
using std::chrono::seconds;

TEST(SidecarStates, MissingUntilStartedThenUp) {
  Cluster cluster = {{"ps", {FreeAddress()}}, {"worker", {FreeAddress()}}};
  Sidecar sidecar(cluster, {});
  auto ps = sidecar.WaitForState("ps:0", TaskState::kMissing, seconds(10), "connection refused");
  ASSERT_TRUE(ps) << sidecar.Describe();
  EXPECT_NE(ps->reason.find("never answered at " + cluster["ps"][0]), std::string::npos)
      << ps->reason;
  EXPECT_NE(ps->reason.find("connection refused"), std::string::npos) << ps->reason;

  auto ps_proc = StartTask(cluster, "ps", 0);
  auto worker = StartTask(cluster, "worker", 0, LongTraining());
  ASSERT_TRUE(sidecar.WaitForState("ps:0", TaskState::kUp, seconds(20))) << sidecar.Describe();
  auto w = sidecar.WaitForState("worker:0", TaskState::kUp, seconds(20), "training");
  ASSERT_TRUE(w) << sidecar.Describe();
  EXPECT_EQ(w->pid, worker->pid());
  EXPECT_EQ(w->phase, "training");

  std::string metrics = sidecar.Get("/metrics");
  EXPECT_NE(metrics.find("trainscope_task_up{cluster=\"default\",role=\"worker\",task=\"0\"} 1"),
            std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("trainscope_task_state{cluster=\"default\",role=\"ps\",task=\"0\","
                         "state=\"up\"} 1"),
            std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("process_resident_memory_bytes"), std::string::npos);
  EXPECT_EQ(metrics.find("job="), std::string::npos);
  EXPECT_EQ(metrics.find("instance="), std::string::npos);
  EXPECT_EQ(sidecar.Get("/healthz"), "ok\n");
  EXPECT_NE(sidecar.Get("/").find("<title>trainscope sidecar</title>"), std::string::npos);
}

TEST(SidecarStates, DeadAfterKill9) {
  Cluster cluster = {{"ps", {FreeAddress()}}, {"worker", {FreeAddress()}}};
  auto ps = StartTask(cluster, "ps", 0);
  auto worker = StartTask(cluster, "worker", 0, LongTraining());
  Sidecar sidecar(cluster, {});
  ASSERT_TRUE(sidecar.WaitForState("worker:0", TaskState::kUp, seconds(20))) << sidecar.Describe();
  worker->Signal(SIGKILL);
  auto dead = sidecar.WaitForState("worker:0", TaskState::kDead, seconds(10));
  ASSERT_TRUE(dead) << sidecar.Describe();
  EXPECT_NE(dead->reason.find("process " + std::to_string(worker->pid())), std::string::npos)
      << dead->reason;
  EXPECT_TRUE(sidecar.Task("ps:0")->state != TaskState::kDead);
}

TEST(SidecarStates, HungWhileStoppedThenUpAgain) {
  Cluster cluster = {{"ps", {FreeAddress()}}, {"worker", {FreeAddress()}}};
  auto ps = StartTask(cluster, "ps", 0);
  auto worker = StartTask(cluster, "worker", 0, LongTraining());
  Sidecar sidecar(cluster, {});
  ASSERT_TRUE(sidecar.WaitForState("ps:0", TaskState::kUp, seconds(20))) << sidecar.Describe();
  kill(ps->pid(), SIGSTOP);
  auto hung = sidecar.WaitForState("ps:0", TaskState::kHung, seconds(10));
  kill(ps->pid(), SIGCONT);
  ASSERT_TRUE(hung) << sidecar.Describe();
  EXPECT_NE(hung->reason.find("stopped"), std::string::npos) << hung->reason;
  ASSERT_TRUE(sidecar.WaitForState("ps:0", TaskState::kUp, seconds(10))) << sidecar.Describe();
}

TEST(SidecarStates, BlockedOnPsThatNeverStarted) {
  Cluster cluster = {{"ps", {FreeAddress()}}, {"worker", {FreeAddress()}}};
  auto worker = StartTask(cluster, "worker", 0, LongTraining());
  Sidecar sidecar(cluster, {});
  auto blocked = sidecar.WaitForState("worker:0", TaskState::kBlocked, seconds(20));
  ASSERT_TRUE(blocked) << sidecar.Describe();
  ASSERT_EQ(blocked->WaitingOn(), std::vector<std::string>{"ps:0"});
  EXPECT_NE(blocked->reason.find("ps:0 at " + cluster["ps"][0]), std::string::npos)
      << blocked->reason;
  EXPECT_NE(blocked->reason.find("ps:0 is missing"), std::string::npos) << blocked->reason;
  std::string metrics = sidecar.Get("/metrics");
  EXPECT_NE(metrics.find("trainscope_task_blocked_seconds{cluster=\"default\",role=\"worker\","
                         "task=\"0\",peer_role=\"ps\",peer_task=\"0\"}"),
            std::string::npos)
      << metrics;
}

TEST(SidecarStates, BlockedOnPsListeningOnAnotherPort) {
  // The worker's spec says ps:0 is at `wrong`; the ps really listens at `right`, as the
  // sidecar's spec says.
  std::string wrong = FreeAddress();
  std::string right = FreeAddress();
  std::string worker_address = FreeAddress();
  Cluster worker_view = {{"ps", {wrong}}, {"worker", {worker_address}}};
  Cluster truth = {{"ps", {right}}, {"worker", {worker_address}}};
  auto ps = StartTask(worker_view, "ps", 0, {"--listen_address", right});
  auto worker = StartTask(worker_view, "worker", 0, LongTraining());
  Sidecar sidecar(truth, {});
  ASSERT_TRUE(sidecar.WaitForState("ps:0", TaskState::kUp, seconds(20))) << sidecar.Describe();
  auto blocked = sidecar.WaitForState("worker:0", TaskState::kBlocked, seconds(20));
  ASSERT_TRUE(blocked) << sidecar.Describe();
  EXPECT_NE(blocked->reason.find("ps:0 is listening on " + right + ", not " + wrong +
                                 ": fix the cluster spec"),
            std::string::npos)
      << blocked->reason;
}

TEST(SidecarStates, StalledWhenStepsStopMoving) {
  Cluster cluster = {{"ps", {FreeAddress()}}, {"worker", {FreeAddress()}}};
  auto ps = StartTask(cluster, "ps", 0, {"--enable_fault_injection"});
  // A long deadline is the point: a call that runs on without failing leaves the worker stalled.
  // With the default 5 s deadline the call fails, is retried, and the worker is blocked on ps:0
  // instead (ride_through_test.cc); a short stall threshold keeps the test short.
  auto worker = StartTask(cluster, "worker", 0, LongTraining({"--rpc_deadline_ms", "60000"}));
  Sidecar sidecar(cluster, {"--stall_after_s", "1.5"});
  ASSERT_TRUE(sidecar.WaitForState("worker:0", TaskState::kUp, seconds(20))) << sidecar.Describe();
  // Every ps call now takes 30 s: the worker still answers heartbeats but makes no progress.
  Process fault(BinPath("trainscopectl"),
                {"fault", "--task", cluster["ps"][0], "--parameter_delay_ms", "30000"});
  ASSERT_EQ(fault.Wait(seconds(10)), 0) << fault.Output();
  auto stalled = sidecar.WaitForState("worker:0", TaskState::kStalled, seconds(15));
  ASSERT_TRUE(stalled) << sidecar.Describe();
  EXPECT_NE(stalled->reason.find("steps stuck at"), std::string::npos) << stalled->reason;
  // The blame is the ps's: a call it serves has run longer than a stall, and the worker's
  // reason names the call it waits in and the ps's state.
  auto ps_view = sidecar.WaitForState("ps:0", TaskState::kStalled, seconds(15), "has run");
  ASSERT_TRUE(ps_view) << sidecar.Describe();
  EXPECT_NE(ps_view->reason.find("its serving is stuck"), std::string::npos) << ps_view->reason;
  auto blamed = sidecar.WaitForState("worker:0", TaskState::kStalled, seconds(15),
                                     "to ps:0 (ps:0 is stalled");
  ASSERT_TRUE(blamed) << sidecar.Describe();
  EXPECT_NE(blamed->reason.find("main thread waiting"), std::string::npos) << blamed->reason;
}

TEST(SidecarStates, SlowWhenHeartbeatsAreLate) {
  Cluster cluster = {{"ps", {FreeAddress()}}, {"worker", {FreeAddress()}}};
  auto ps = StartTask(cluster, "ps", 0, {"--enable_fault_injection"});
  auto worker = StartTask(cluster, "worker", 0, LongTraining());
  Sidecar sidecar(cluster, {});
  ASSERT_TRUE(sidecar.WaitForState("ps:0", TaskState::kUp, seconds(20))) << sidecar.Describe();
  std::this_thread::sleep_for(seconds(2));  // Let the sidecar learn its usual latency.
  Process fault(BinPath("trainscopectl"),
                {"fault", "--task", cluster["ps"][0], "--heartbeat_delay_ms", "500"});
  ASSERT_EQ(fault.Wait(seconds(10)), 0) << fault.Output();
  auto slow = sidecar.WaitForState("ps:0", TaskState::kSlow, seconds(15));
  ASSERT_TRUE(slow) << sidecar.Describe();
  // Late but answering: never dead or unreachable, which do not depend on how late. Whether an
  // answer 500 ms late also reads as hung (silence past --hung_after_ms) depends on this
  // machine's load, so it is not asserted: sidecar_detection_bench --mode soak counts such
  // false alarms under load.
  std::string metrics = sidecar.Get("/metrics");
  for (const char* bad : {"dead", "unreachable"}) {
    EXPECT_NE(metrics.find(std::string("trainscope_task_state_transitions_total{cluster="
                                       "\"default\",role=\"ps\",task=\"0\",state=\"") +
                           bad + "\"} 0"),
              std::string::npos)
        << bad << "\n"
        << sidecar.Describe();
  }
  Process clear(BinPath("trainscopectl"),
                {"fault", "--task", cluster["ps"][0], "--heartbeat_delay_ms", "0"});
  ASSERT_EQ(clear.Wait(seconds(10)), 0) << clear.Output();
  ASSERT_TRUE(sidecar.WaitForState("ps:0", TaskState::kUp, seconds(15))) << sidecar.Describe();
}

TEST(SidecarStates, RestartIsCountedNotAState) {
  Cluster cluster = {{"ps", {FreeAddress()}}, {"worker", {FreeAddress()}}};
  auto ps = StartTask(cluster, "ps", 0);
  Sidecar sidecar(cluster, {});
  auto first = sidecar.WaitForState("ps:0", TaskState::kUp, seconds(20));
  ASSERT_TRUE(first) << sidecar.Describe();
  ps->Signal(SIGKILL);
  ps->Wait(seconds(5));
  ASSERT_TRUE(sidecar.WaitForState("ps:0", TaskState::kDead, seconds(10))) << sidecar.Describe();
  ps = StartTask(cluster, "ps", 0);
  auto again = sidecar.WaitForState("ps:0", TaskState::kUp, seconds(20));
  ASSERT_TRUE(again) << sidecar.Describe();
  EXPECT_EQ(again->restarts, 1);
  EXPECT_NE(again->incarnation, first->incarnation);
  EXPECT_NE(
      sidecar.Get("/metrics")
          .find("trainscope_task_restarts_total{cluster=\"default\",role=\"ps\",task=\"0\"} 1"),
      std::string::npos);
  EXPECT_NE(sidecar.process().Output().find("ps:0 (/job:ps/replica:0/task:0) restarted"),
            std::string::npos);
}

TEST(SidecarStates, DoneAfterTrainingEndsNotDead) {
  Cluster cluster = {{"ps", {FreeAddress()}}, {"worker", {FreeAddress()}}};
  Sidecar sidecar(cluster, {});
  auto ps = StartTask(cluster, "ps", 0);
  auto worker = StartTask(cluster, "worker", 0,
                          {"--steps", "400", "--step_delay_ms", "5", "--log_every", "100000"});
  ASSERT_TRUE(sidecar.WaitForState("worker:0", TaskState::kUp, seconds(20), "training"))
      << sidecar.Describe();
  EXPECT_EQ(worker->Wait(seconds(30)), 0) << worker->Output();
  EXPECT_EQ(ps->Wait(seconds(30)), 0) << ps->Output();
  auto w = sidecar.WaitForState("worker:0", TaskState::kDone, seconds(10),
                                "finished training and exited");
  ASSERT_TRUE(w) << sidecar.Describe();
  ASSERT_TRUE(sidecar.WaitForState("ps:0", TaskState::kDone, seconds(10))) << sidecar.Describe();
  EXPECT_EQ(w->phase, "done");

  std::string metrics = sidecar.Get("/metrics");
  for (const std::string role : {"ps", "worker"}) {
    const std::string labels = "cluster=\"default\",role=\"" + role + "\",task=\"0\"";
    EXPECT_NE(metrics.find("trainscope_task_state{" + labels + ",state=\"done\"} 1"),
              std::string::npos)
        << metrics;
    EXPECT_NE(metrics.find("trainscope_task_state{" + labels + ",state=\"dead\"} 0"),
              std::string::npos);
    EXPECT_NE(
        metrics.find("trainscope_task_state_transitions_total{" + labels + ",state=\"dead\"} 0"),
        std::string::npos)
        << "went through dead on the way to done";
    EXPECT_NE(metrics.find("trainscope_task_up{" + labels + "} 0"), std::string::npos);
  }
  Process ctl(BinPath("trainscopectl"), {"status", "--sidecar", sidecar.http()});
  EXPECT_EQ(ctl.Wait(seconds(10)), 0) << ctl.Output();
  EXPECT_NE(ctl.Output().find("done"), std::string::npos) << ctl.Output();
}

TEST(SidecarStates, TrainscopectlStatusExitCodes) {
  Cluster cluster = {{"ps", {FreeAddress()}}, {"worker", {FreeAddress()}}};
  auto ps = StartTask(cluster, "ps", 0);
  auto worker = StartTask(cluster, "worker", 0, LongTraining());
  Sidecar sidecar(cluster, {});
  ASSERT_TRUE(sidecar.WaitForState("worker:0", TaskState::kUp, seconds(20))) << sidecar.Describe();
  ASSERT_TRUE(sidecar.WaitForState("ps:0", TaskState::kUp, seconds(20))) << sidecar.Describe();
  Process ok(BinPath("trainscopectl"), {"status", "--sidecar", sidecar.http()});
  EXPECT_EQ(ok.Wait(seconds(10)), 0) << ok.Output();
  EXPECT_NE(ok.Output().find("worker:0"), std::string::npos) << ok.Output();
  EXPECT_EQ(ok.Output().find("\033["), std::string::npos) << "colour without a terminal";
  worker->Signal(SIGKILL);
  ASSERT_TRUE(sidecar.WaitForState("worker:0", TaskState::kDead, seconds(10)));
  Process bad(BinPath("trainscopectl"), {"status", "--sidecar", sidecar.http()});
  EXPECT_EQ(bad.Wait(seconds(10)), 1) << bad.Output();
  // Problems first.
  EXPECT_LT(bad.Output().find("worker:0"), bad.Output().find("ps:0")) << bad.Output();
  Process unreachable(BinPath("trainscopectl"), {"status", "--sidecar", FreeAddress()});
  EXPECT_EQ(unreachable.Wait(seconds(10)), 2) << unreachable.Output();
}

// `trainscopectl status --json` prints the sidecar's task list as JSON and nothing else, with the
// table's exit codes (0: every task up or done; 1: one needs attention).
TEST(SidecarStates, TrainscopectlStatusJsonIsTheTaskList) {
  Cluster cluster = {{"ps", {FreeAddress()}}, {"worker", {FreeAddress()}}};
  auto ps = StartTask(cluster, "ps", 0);
  auto worker = StartTask(cluster, "worker", 0, LongTraining());
  Sidecar sidecar(cluster, {});
  ASSERT_TRUE(sidecar.WaitForState("worker:0", TaskState::kUp, seconds(20), "training"))
      << sidecar.Describe();
  ASSERT_TRUE(sidecar.WaitForState("ps:0", TaskState::kUp, seconds(20))) << sidecar.Describe();
  // The exit code and the tasks by name, from a run of `trainscopectl status --json`.
  struct Status {
    int code = -1;
    std::string output;
    nlohmann::json list;
    std::map<std::string, nlohmann::json> tasks;
  };
  auto status = [&] {
    Process ctl(BinPath("trainscopectl"), {"status", "--json", "--sidecar", sidecar.http()});
    Status s;
    s.code = ctl.Wait(seconds(10)).value_or(-1);
    s.output = ctl.Output();
    s.list = nlohmann::json::parse(s.output, nullptr, /*allow_exceptions=*/false);
    if (s.list.is_object() && s.list.contains("tasks") && s.list["tasks"].is_array()) {
      for (const nlohmann::json& t : s.list["tasks"]) s.tasks[t.value("name", "")] = t;
    }
    return s;
  };

  Status up = status();
  EXPECT_EQ(up.code, 0) << up.output;
  ASSERT_TRUE(up.list.is_object()) << "not a JSON object:\n" << up.output;
  EXPECT_EQ(up.list.value("cluster", ""), "default") << up.output;
  EXPECT_EQ(up.list.value("api_version", 0), sidecar::kApiVersion) << up.output;
  ASSERT_EQ(up.tasks.size(), 2u) << up.output;
  ASSERT_TRUE(up.tasks.count("worker:0") && up.tasks.count("ps:0")) << up.output;
  const nlohmann::json& w = up.tasks["worker:0"];
  EXPECT_EQ(w.value("state", ""), "up") << w.dump();
  EXPECT_EQ(w.value("role", ""), "worker") << w.dump();
  EXPECT_EQ(w.value("task", -1), 0) << w.dump();
  EXPECT_EQ(w.value("address", ""), cluster["worker"][0]) << w.dump();
  EXPECT_EQ(w.value("pid", 0), worker->pid()) << w.dump();
  EXPECT_EQ(w.value("phase", ""), "training") << w.dump();
  EXPECT_EQ(up.tasks["ps:0"].value("state", ""), "up") << up.tasks["ps:0"].dump();
  EXPECT_EQ(up.tasks["ps:0"].value("pid", 0), ps->pid()) << up.tasks["ps:0"].dump();

  worker->Signal(SIGKILL);
  ASSERT_TRUE(sidecar.WaitForState("worker:0", TaskState::kDead, seconds(10)))
      << sidecar.Describe();
  Status dead = status();
  EXPECT_EQ(dead.code, 1) << dead.output;
  ASSERT_TRUE(dead.tasks.count("worker:0")) << dead.output;
  EXPECT_EQ(dead.tasks["worker:0"].value("state", ""), "dead") << dead.output;
  EXPECT_NE(dead.tasks["worker:0"].value("reason", "").find(std::to_string(worker->pid())),
            std::string::npos)
      << dead.output;
}

}  // namespace
}  // namespace trainscope::testing
