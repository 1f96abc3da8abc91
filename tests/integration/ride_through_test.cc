// Training rides through what trainscope diagnoses, with the flags users get (no stretched
// deadline, no retry count): a ps stopped for 40 s, a ps killed and restarted 20 s later from its
// checkpoint, and the minimal out-of-tree program (fit_line, no retry code of its own) through
// the same stop. Real binaries on loopback, a real sidecar watching. Each test prints how long
// training took to go on after the fault ended (a figure, not asserted: machines here are noisy;
// docs/runtime.md, "Riding through").
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>

#include <cstdio>
#include <filesystem>
#include <thread>

#include "sidecar_harness.h"

namespace trainscope::testing {
namespace {

using sidecar::TaskState;
using std::chrono::milliseconds;
using std::chrono::seconds;
using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Waits until the sidecar shows `task` past `steps`; the seconds it took, or -1.
double WaitForStepsPast(Sidecar& sidecar, const std::string& task, int64_t steps, seconds timeout) {
  const auto start = Clock::now();
  while (Clock::now() - start < timeout) {
    auto t = sidecar.Task(task);
    if (t && t->steps > steps) return SecondsSince(start);
    std::this_thread::sleep_for(milliseconds(20));
  }
  return -1;
}

// Samples `task` in the sidecar every 200 ms for `how_long`: each sample that is not `state`
// with `reason_has` in its reason, in words (at most 5 kept), and the number of samples.
std::vector<std::string> SamplesNotIn(Sidecar& sidecar, const std::string& task, TaskState state,
                                      const std::string& reason_has, seconds how_long,
                                      int* samples) {
  std::vector<std::string> wrong;
  const auto until = Clock::now() + how_long;
  *samples = 0;
  while (Clock::now() < until) {
    auto t = sidecar.Task(task);
    ++*samples;
    if (!t || t->state != state || t->reason.find(reason_has) == std::string::npos) {
      if (wrong.size() < 5) {
        wrong.push_back(t ? std::string(sidecar::StateName(t->state)) + ": " + t->reason
                          : "not in the API");
      }
    }
    std::this_thread::sleep_for(milliseconds(200));
  }
  return wrong;
}

TEST(RideThrough, AWorkerWaitsOutAPsStoppedFor40sBlockedOnItAndFinishes) {
  Cluster cluster = {{"ps", {FreeAddress()}}, {"worker", {FreeAddress()}}};
  auto ps = StartTask(cluster, "ps", 0);
  auto worker = StartTask(cluster, "worker", 0,
                          {"--steps", "1500", "--step_delay_ms", "5", "--log_every", "500"});
  Sidecar sidecar(cluster, {});
  ASSERT_TRUE(sidecar.WaitForState("worker:0", TaskState::kUp, seconds(20), "training"))
      << sidecar.Describe();
  ASSERT_GE(WaitForStepsPast(sidecar, "worker:0", 50, seconds(20)), 0) << sidecar.Describe();

  kill(ps->pid(), SIGSTOP);
  const auto stopped = Clock::now();
  auto blocked = sidecar.WaitForState("worker:0", TaskState::kBlocked, seconds(10), "ps:0");
  if (!blocked) kill(ps->pid(), SIGCONT);
  ASSERT_TRUE(blocked) << sidecar.Describe() << "--- worker ---\n" << worker->Output();
  std::printf("[figure] worker:0 blocked on ps:0 %.2f s after SIGSTOP: %s\n", SecondsSince(stopped),
              blocked->reason.c_str());
  int samples = 0;
  const auto rest = std::chrono::duration_cast<seconds>(seconds(40) - (Clock::now() - stopped));
  const std::vector<std::string> wrong =
      SamplesNotIn(sidecar, "worker:0", TaskState::kBlocked, "ps:0", rest, &samples);
  ASSERT_TRUE(worker->Running()) << worker->Output();
  const int64_t steps = sidecar.Task("worker:0")->steps;
  kill(ps->pid(), SIGCONT);
  const auto continued = Clock::now();
  EXPECT_TRUE(wrong.empty()) << wrong.size() << " of " << samples
                             << " samples while ps:0 was stopped were not 'blocked on ps:0', "
                                "e.g. "
                             << wrong.front();

  const double resumed = WaitForStepsPast(sidecar, "worker:0", steps, seconds(30));
  EXPECT_GE(resumed, 0) << sidecar.Describe() << "--- worker ---\n" << worker->Output();
  std::printf("[figure] worker:0 stepped again %.2f s after SIGCONT (a 40 s stop)\n", resumed);
  auto code = worker->Wait(seconds(120));
  ASSERT_TRUE(code.has_value()) << worker->Output();
  EXPECT_EQ(*code, 0) << worker->Output();
  const std::string out = worker->Output();
  EXPECT_NE(out.find("worker:0 waits on ps:0 at " + cluster["ps"][0]), std::string::npos) << out;
  EXPECT_NE(out.find("(--ps_patience_s)"), std::string::npos) << out;
  EXPECT_NE(out.find("worker:0 reached ps:0 again after waiting"), std::string::npos) << out;
  EXPECT_NE(out.find("final loss"), std::string::npos) << out;
  (void)continued;
}

TEST(RideThrough, APsKilledAndRestarted20sLaterRestoresAndTheWorkerFindsItAgain) {
  Cluster cluster = {{"ps", {FreeAddress()}}, {"worker", {FreeAddress()}}};
  char dir_template[] = "/tmp/ride-through-ckpt.XXXXXX";
  ASSERT_NE(mkdtemp(dir_template), nullptr);
  const std::string dir = dir_template;
  const std::vector<std::string> checkpoints = {"--checkpoint_dir", dir, "--checkpoint_every_s",
                                                "1"};
  auto ps = StartTask(cluster, "ps", 0, checkpoints);
  std::vector<std::string> worker_args = {"--steps", "1500",        "--step_delay_ms",
                                          "5",       "--log_every", "500"};
  worker_args.insert(worker_args.end(), checkpoints.begin(), checkpoints.end());
  auto worker = StartTask(cluster, "worker", 0, worker_args);
  Sidecar sidecar(cluster, {});
  ASSERT_TRUE(sidecar.WaitForState("worker:0", TaskState::kUp, seconds(20), "training"))
      << sidecar.Describe();
  ASSERT_TRUE(worker->WaitForOutput("checkpoint of step", seconds(20))) << worker->Output();

  ps->Signal(SIGKILL);
  ps->Wait(seconds(10));
  const auto killed = Clock::now();
  auto blocked = sidecar.WaitForState("worker:0", TaskState::kBlocked, seconds(10), "ps:0");
  EXPECT_TRUE(blocked) << sidecar.Describe();
  std::this_thread::sleep_for(seconds(20) - (Clock::now() - killed));
  ASSERT_TRUE(worker->Running()) << worker->Output();
  const int64_t steps = sidecar.Task("worker:0")->steps;
  ps = StartTask(cluster, "ps", 0, checkpoints);
  const auto restarted = Clock::now();

  ASSERT_TRUE(worker->WaitForOutput("restored from", seconds(30)))
      << sidecar.Describe() << "--- worker ---\n"
      << worker->Output() << "--- ps ---\n"
      << ps->Output();
  const double found = SecondsSince(restarted);
  // The worker goes on from the checkpoint's step, below where it was: count from there.
  double resumed = -1;
  for (const auto until = Clock::now() + seconds(30); Clock::now() < until && resumed < 0;) {
    auto t = sidecar.Task("worker:0");
    if (t && t->state == TaskState::kUp && t->steps > 0 && t->steps != steps) {
      resumed = SecondsSince(restarted);
    }
    std::this_thread::sleep_for(milliseconds(20));
  }
  EXPECT_GE(resumed, 0) << sidecar.Describe();
  std::printf(
      "[figure] the restarted ps:0 was found (its checkpoint named) %.2f s after it started, "
      "and worker:0 was up and stepping %.2f s after\n",
      found, resumed);
  auto code = worker->Wait(seconds(120));
  ASSERT_TRUE(code.has_value()) << worker->Output();
  EXPECT_EQ(*code, 0) << worker->Output();
  EXPECT_NE(worker->Output().find("ps:0 restarted"), std::string::npos) << worker->Output();
  std::filesystem::remove_all(dir);
}

// The minimal out-of-tree program has no retry code: the runtime waits for it.
TEST(RideThrough, FitLineWithNoRetryCodeOfItsOwnRidesThroughA40sStop) {
  Cluster cluster = {{"ps", {FreeAddress()}}, {"worker", {FreeAddress()}}};
  auto start = [&](const std::string& role, std::vector<std::string> args) {
    return std::make_unique<Process>(
        BinPath("fit_line"), std::move(args),
        std::map<std::string, std::string>{{"TF_CONFIG", TfConfig(cluster, role, 0)}});
  };
  auto ps = start("ps", {});
  auto worker = start("worker", {"--steps", "30000"});
  Sidecar sidecar(cluster, {});
  ASSERT_TRUE(sidecar.WaitForState("worker:0", TaskState::kUp, seconds(20), "training"))
      << sidecar.Describe();
  ASSERT_GE(WaitForStepsPast(sidecar, "worker:0", 100, seconds(20)), 0) << sidecar.Describe();
  kill(ps->pid(), SIGSTOP);
  std::this_thread::sleep_for(seconds(40));
  const bool running = worker->Running();
  const int64_t steps = sidecar.Task("worker:0")->steps;
  kill(ps->pid(), SIGCONT);
  ASSERT_TRUE(running) << worker->Output();
  const double resumed = WaitForStepsPast(sidecar, "worker:0", steps, seconds(30));
  EXPECT_GE(resumed, 0) << sidecar.Describe();
  std::printf("[figure] fit_line's worker stepped again %.2f s after SIGCONT (a 40 s stop)\n",
              resumed);
  auto code = worker->Wait(seconds(120));
  ASSERT_TRUE(code.has_value()) << worker->Output();
  EXPECT_EQ(*code, 0) << worker->Output();
  EXPECT_NE(worker->Output().find("fit_line: y = "), std::string::npos) << worker->Output();
}

}  // namespace
}  // namespace trainscope::testing
