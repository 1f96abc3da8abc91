// State decisions from synthetic poll results with injected time and a fake /proc.
#include "trainscope/sidecar/task_tracker.h"

#include <gtest/gtest.h>

namespace trainscope::sidecar {
namespace {

constexpr double kUnix0 = 1.7e9;

class TrackerTest : public ::testing::Test {
 protected:
  TrackerTest() : tracker_("c", {"ps", 0}, "127.0.0.1:2222", true, Options(), 0, kUnix0) {}

  static TrackerOptions Options() {
    TrackerOptions o;
    o.stall_after_s = 5;
    return o;
  }

  HeartbeatInfo Hb() {
    if (outside_) return OutsideHb();
    HeartbeatInfo hb;
    hb.cluster_name = "c";
    hb.task = {"ps", 0};
    hb.incarnation = incarnation_;
    hb.pid = 4242;  // As the poller verified it.
    hb.pid_verified = true;
    hb.hostname = "host";
    hb.phase = phase_;
    hb.steps = steps_;
    hb.expects_progress = true;
    hb.inflight_reported_unix = kUnix0 + now_;
    hb.restored_step = restored_step_;
    hb.last_step_seconds = step_seconds_;
    hb.last_step_recovered = step_recovered_;
    return hb;
  }
  // What the poller makes of an UNIMPLEMENTED answer: no identity, /proc facts of the port's owner.
  HeartbeatInfo OutsideHb() {
    HeartbeatInfo hb;
    hb.outside = true;
    hb.incarnation = incarnation_;
    hb.pid = 4242;
    hb.pid_verified = true;
    hb.command = "python3";
    hb.proc_state = 'S';
    hb.threads = 3;
    hb.resident_bytes = 210 << 20;
    hb.inflight_reported_unix = kUnix0 + now_;
    return hb;
  }
  void Answer(double latency = 0.001) {
    PollResult r;
    r.ok = true;
    r.sent_s = now_ - latency;
    r.received_s = now_;
    r.heartbeat = Hb();
    tracker_.OnResult(r);
  }
  void Fail(FailureKind kind, std::string error) {
    PollResult r;
    r.sent_s = now_;
    r.received_s = now_;
    r.failure = kind;
    r.error = std::move(error);
    tracker_.OnResult(r);
  }
  // Runs `seconds` of 100 ms ticks, answering (with progress) when `answering`.
  void Run(double seconds, bool answering, bool progress = true, double latency = 0.001) {
    for (double end = now_ + seconds; now_ < end - 1e-9;) {
      now_ += 0.1;
      if (answering) {
        if (progress) ++steps_;
        Answer(latency);
      }
      Evaluate();
    }
  }
  const TaskView& Evaluate() { return tracker_.Evaluate(now_, kUnix0 + now_, proc_); }

  TaskTracker tracker_;
  double now_ = 0;
  int64_t steps_ = 0;
  double step_seconds_ = 0;
  bool step_recovered_ = false;
  uint64_t incarnation_ = 7;
  int64_t restored_step_ = -1;
  std::string phase_ = "training";
  bool outside_ = false;
  std::optional<ProcStat> proc_state_ = ProcStat{'S', 1.0};
  ProcReader proc_ = [this](int64_t) { return proc_state_; };
};

TEST_F(TrackerTest, DoneWhenItExitsAfterSayingDone) {
  Run(1, true);
  phase_ = "done";
  Run(0.3, true, false);
  EXPECT_EQ(Evaluate().state, TaskState::kUp);  // Still answering: up, phase done.
  proc_state_ = std::nullopt;
  Fail(FailureKind::kRefused, "connection refused");
  now_ += 0.1;
  const TaskView& v = Evaluate();
  EXPECT_EQ(v.state, TaskState::kDone);
  EXPECT_NE(v.reason.find("finished training and exited"), std::string::npos) << v.reason;
  EXPECT_NE(v.reason.find("process 4242 is gone"), std::string::npos) << v.reason;
  Run(2, false);
  EXPECT_EQ(Evaluate().state, TaskState::kDone);
  // Started again (a new incarnation): judged afresh.
  phase_ = "training";
  incarnation_++;
  proc_state_ = ProcStat{'S', 1.0};
  Run(0.5, true);
  EXPECT_EQ(Evaluate().state, TaskState::kUp);
}

TEST_F(TrackerTest, DeadWhenItExitsWithoutSayingDone) {
  Run(1, true);
  proc_state_ = std::nullopt;
  Fail(FailureKind::kRefused, "connection refused");
  now_ += 0.1;
  EXPECT_EQ(Evaluate().state, TaskState::kDead);
}

// Stopped by a signal (SIGTERM: an eviction) is leaving, not done: gone, and said so.
TEST_F(TrackerTest, DeadNotDoneWhenItExitsAfterSayingLeaving) {
  Run(1, true);
  phase_ = "leaving";
  Run(0.3, true, false);
  proc_state_ = std::nullopt;
  Fail(FailureKind::kRefused, "connection refused");
  now_ += 0.1;
  const TaskView& v = Evaluate();
  EXPECT_EQ(v.state, TaskState::kDead);
  EXPECT_NE(v.reason.find("stopped by a signal and left before finishing"), std::string::npos)
      << v.reason;
}

TEST_F(TrackerTest, MissingUntilFirstAnswer) {
  Fail(FailureKind::kRefused, "connection refused");
  now_ = 3;
  const TaskView& v = Evaluate();
  EXPECT_EQ(v.state, TaskState::kMissing);
  EXPECT_EQ(v.reason,
            "never answered at 127.0.0.1:2222 in 3.0 s of watching (connection refused): not "
            "started, or listening on another port");
  Run(0.5, true);
  EXPECT_EQ(Evaluate().state, TaskState::kUp);
}

// Stopped by a signal while its answers were irregular (every 100 ms, then gaps of 0.5 s: its
// suspicion rises slowly): hung at the first missed answer all the same. A tracing stop (a
// debugger, this sidecar's own capture) of that length is not.
TEST_F(TrackerTest, AStoppedProcessIsHungAtTheFirstMissedAnswerWhateverItsRhythm) {
  for (int i = 0; i < 6; ++i) {
    Run(0.3, true);
    Run(0.5, false);
  }
  Run(0.3, true);
  proc_state_ = ProcStat{'t', 1.0};
  Run(0.3, false);
  EXPECT_EQ(Evaluate().state, TaskState::kUp) << Evaluate().reason;
  Run(0.1, true);
  proc_state_ = ProcStat{'T', 1.0};
  Run(0.3, false);
  EXPECT_EQ(Evaluate().state, TaskState::kHung) << Evaluate().reason;
}

// A step that took 300 ms where 12 ms is usual is slow; not when it recovered from a failure
// (retried calls, a restarted ps): its time was the recovery's, named while it lasted.
TEST_F(TrackerTest, AStepThatRecoveredFromAFailureIsNotSlow) {
  step_seconds_ = 0.012;
  Run(2, true);
  step_seconds_ = 0.3;
  step_recovered_ = true;
  Run(0.2, true);
  EXPECT_EQ(Evaluate().state, TaskState::kUp) << Evaluate().reason;
  step_recovered_ = false;
  Run(0.2, true);
  EXPECT_EQ(Evaluate().state, TaskState::kSlow);
  EXPECT_NE(Evaluate().reason.find("last step took 300 ms"), std::string::npos)
      << Evaluate().reason;
}

TEST_F(TrackerTest, DeadWhenProcessGoneOrZombie) {
  Run(2, true);
  proc_state_ = ProcStat{'Z', 1.0};
  Fail(FailureKind::kUnavailable, "unavailable: Socket closed");
  EXPECT_EQ(Evaluate().state, TaskState::kDead);
  EXPECT_NE(Evaluate().reason.find("process 4242 exited (zombie"), std::string::npos);
  proc_state_ = std::nullopt;
  EXPECT_NE(Evaluate().reason.find("process 4242 is gone"), std::string::npos);
}

TEST_F(TrackerTest, HungWhenStoppedAndSlowBeforeHungOtherwise) {
  Run(2, true);
  proc_state_ = ProcStat{'T', 1.0};
  Run(0.4, false);
  EXPECT_EQ(Evaluate().state, TaskState::kHung) << Evaluate().reason;
  EXPECT_NE(Evaluate().reason.find("stopped"), std::string::npos);
  Run(0.5, true);
  EXPECT_EQ(Evaluate().state, TaskState::kUp);

  // Sleeping but silent: first late (slow), then hung once silence passes hung_after.
  proc_state_ = ProcStat{'S', 1.0};
  Run(0.5, false);
  EXPECT_EQ(Evaluate().state, TaskState::kSlow) << Evaluate().reason;
  Run(1.0, false);
  EXPECT_EQ(Evaluate().state, TaskState::kHung) << Evaluate().reason;
}

TEST_F(TrackerTest, CpuProgressKeepsALateTaskSlowNotHung) {
  Run(2, true);
  double cpu = 1.0;
  proc_ = [&](int64_t) { return ProcStat{'R', cpu += 0.05}; };
  Run(1.5, false);
  EXPECT_EQ(Evaluate().state, TaskState::kSlow) << Evaluate().reason;
  EXPECT_NE(Evaluate().reason.find("using CPU"), std::string::npos);
}

TEST_F(TrackerTest, RemoteSilentTaskIsUnreachableAndRefusedIsDead) {
  TaskTracker remote("c", {"ps", 0}, "10.0.0.9:2222", false, Options(), 0, kUnix0);
  PollResult r;
  r.ok = true;
  r.heartbeat = Hb();
  for (int i = 1; i <= 20; ++i) {
    r.sent_s = r.received_s = i * 0.1;
    remote.OnResult(r);
  }
  EXPECT_EQ(remote.Evaluate(2.0, kUnix0 + 2, proc_).state, TaskState::kUp);
  EXPECT_EQ(remote.Evaluate(3.5, kUnix0 + 3.5, proc_).state, TaskState::kUnreachable);
  PollResult refused;
  refused.sent_s = refused.received_s = 3.6;
  refused.failure = FailureKind::kRefused;
  refused.error = "connection refused";
  remote.OnResult(refused);
  EXPECT_EQ(remote.Evaluate(3.6, kUnix0 + 3.6, proc_).state, TaskState::kDead);
}

// An outside task on another host: only its round trip is known (no pid), so silence is
// unreachable and a refusal dead, each said to be watched from outside.
TEST_F(TrackerTest, RemoteOutsideTaskFromRoundTripOnly) {
  TaskTracker remote("c", {"ps", 0}, "10.0.0.9:2222", false, Options(), 0, kUnix0);
  PollResult r;
  r.ok = true;
  r.heartbeat.outside = true;
  for (int i = 1; i <= 20; ++i) {
    r.sent_s = r.received_s = i * 0.1;
    remote.OnResult(r);
  }
  const TaskView& up = remote.Evaluate(2.0, kUnix0 + 2, proc_);
  EXPECT_EQ(up.state, TaskState::kUp);
  EXPECT_NE(up.reason.find("its process is on another host (not checked from here)"),
            std::string::npos)
      << up.reason;
  const TaskView& silent = remote.Evaluate(3.5, kUnix0 + 3.5, proc_);
  EXPECT_EQ(silent.state, TaskState::kUnreachable);
  EXPECT_EQ(silent.reason.find("watched from outside (no trainscope heartbeat): no answer at"), 0u)
      << silent.reason;
  PollResult refused;
  refused.sent_s = refused.received_s = 3.6;
  refused.failure = FailureKind::kRefused;
  refused.error = "connection refused";
  remote.OnResult(refused);
  EXPECT_EQ(remote.Evaluate(3.6, kUnix0 + 3.6, proc_).state, TaskState::kDead);
}

TEST_F(TrackerTest, BlockedNamesPeersAfterGrace) {
  Run(1, true);
  HeartbeatInfo hb = Hb();
  hb.waiting = true;
  hb.waiting_what = "CreateSession";
  hb.waiting_since_unix = kUnix0 + now_ - 12;
  PeerInfo p;
  p.peer = {"ps", 1};
  p.address = "127.0.0.1:2223";
  p.last_error = "connection refused";
  hb.waiting_on.push_back(p);
  PollResult r;
  r.ok = true;
  r.sent_s = r.received_s = now_;
  r.heartbeat = hb;
  tracker_.OnResult(r);
  const TaskView& v = Evaluate();
  EXPECT_EQ(v.state, TaskState::kBlocked);
  EXPECT_EQ(v.reason,
            "waiting 12 s in CreateSession for ps:1 at 127.0.0.1:2223 (connection refused)");
  ASSERT_EQ(v.WaitingOn(), std::vector<std::string>{"ps:1"});
}

TEST_F(TrackerTest, StalledWhenStepsFreeze) {
  Run(2, true);
  Run(4, true, /*progress=*/false);
  EXPECT_EQ(Evaluate().state, TaskState::kUp);
  Run(1.5, true, /*progress=*/false);
  EXPECT_EQ(Evaluate().state, TaskState::kStalled);
  EXPECT_NE(Evaluate().reason.find("steps stuck at 20"), std::string::npos) << Evaluate().reason;
}

TEST_F(TrackerTest, SlowWhenLatencyFarAboveUsual) {
  Run(2, true);
  Run(1, true, true, /*latency=*/0.5);
  EXPECT_EQ(Evaluate().state, TaskState::kSlow);
  EXPECT_NE(Evaluate().reason.find("heartbeat latency 500 ms, usually 1.0 ms"), std::string::npos)
      << Evaluate().reason;
}

TEST_F(TrackerTest, RestartIsAnEventAndACounter) {
  Run(1, true);
  incarnation_ = 8;
  Run(0.2, true);
  EXPECT_EQ(Evaluate().state, TaskState::kUp);
  EXPECT_EQ(Evaluate().restarts, 1);
  bool logged = false;
  for (const auto& e : tracker_.TakeEvents()) logged |= e.find("restarted") != std::string::npos;
  EXPECT_TRUE(logged);
}

// A task watched from outside, killed and started again on its port: the first answers of the
// new process may come before its holder of the port is found (no pid, no incarnation). That is
// no restart of its own: one restart is counted, old to new (sidecar_outside_tasks saw two).
TEST_F(TrackerTest, AnOutsideRestartSeenThroughAnUnknownMomentCountsOnce) {
  outside_ = true;
  incarnation_ = 7;
  Run(1, true);
  incarnation_ = 0;  // The new process answers; its port's holder is not found yet.
  Run(0.3, true);
  EXPECT_EQ(Evaluate().restarts, 0);
  incarnation_ = 9;
  Run(0.3, true);
  EXPECT_EQ(Evaluate().restarts, 1);
  incarnation_ = 0;
  Run(0.2, true);
  incarnation_ = 9;  // The same process, read again.
  Run(0.2, true);
  EXPECT_EQ(Evaluate().restarts, 1);
}

// A ps restarted with its checkpoint: up, and the reason says from which step (the fire drill's
// ps-kill-restore reads it).
TEST_F(TrackerTest, RestartedPsSaysWhichCheckpointItRestored) {
  Run(1, true);
  EXPECT_EQ(Evaluate().reason.find("restored"), std::string::npos) << Evaluate().reason;
  incarnation_ = 8;
  restored_step_ = 300;
  Run(0.2, true);
  EXPECT_EQ(Evaluate().state, TaskState::kUp);
  EXPECT_NE(Evaluate().reason.find(
                "restarted 1x, restored its variables from the checkpoint of step 300"),
            std::string::npos)
      << Evaluate().reason;
}

// A gRPC server without trainscope's heartbeat: up from its round trip and /proc, its identity
// unchecked (it has none); stopped is hung, gone is dead, a new process is a restart, and every
// reason says it is watched from outside.
TEST_F(TrackerTest, OutsideTaskFromRoundTripAndProc) {
  outside_ = true;
  Run(1, true);
  EXPECT_EQ(Evaluate().state, TaskState::kUp);
  const std::string up = Evaluate().reason;
  EXPECT_EQ(up.find("watched from outside (no trainscope heartbeat): gRPC answers in"), 0u) << up;
  EXPECT_NE(up.find("pid 4242 (python3) sleeping, 3 threads, 210 MiB"), std::string::npos) << up;
  EXPECT_NE(up.find("CreateSession waits cannot be seen"), std::string::npos) << up;
  EXPECT_EQ(Evaluate().resident_bytes, 210 << 20);

  proc_state_ = ProcStat{'T', 1.0};
  Run(0.4, false);
  EXPECT_EQ(Evaluate().state, TaskState::kHung) << Evaluate().reason;
  EXPECT_NE(Evaluate().reason.find("watched from outside (no trainscope heartbeat): process 4242 "
                                   "is stopped (state T"),
            std::string::npos)
      << Evaluate().reason;

  proc_state_ = std::nullopt;
  Fail(FailureKind::kRefused, "connection refused");
  EXPECT_EQ(Evaluate().state, TaskState::kDead);
  EXPECT_NE(Evaluate().reason.find("process 4242 is gone"), std::string::npos);

  proc_state_ = ProcStat{'S', 1.0};
  incarnation_ = 8;
  Run(0.5, true);
  EXPECT_EQ(Evaluate().state, TaskState::kUp);
  EXPECT_EQ(Evaluate().restarts, 1);
  EXPECT_NE(Evaluate().reason.find("restarted 1x"), std::string::npos) << Evaluate().reason;
}

TEST_F(TrackerTest, WrongIdentityIsNotAnAnswer) {
  HeartbeatInfo hb = Hb();
  hb.cluster_name = "other";
  PollResult r;
  r.ok = true;
  r.heartbeat = hb;
  tracker_.OnResult(r);
  now_ = 1;
  EXPECT_EQ(Evaluate().state, TaskState::kMissing);
  EXPECT_NE(Evaluate().reason.find("answers as cluster \"other\""), std::string::npos);
}

TEST_F(TrackerTest, SidecarPauseRelearnsBeforeJudging) {
  Run(2, true);
  // The sidecar was stopped for 5 s: nothing was polled.
  now_ += 5;
  tracker_.OnSidecarPause(now_);
  EXPECT_NE(Evaluate().state, TaskState::kHung) << Evaluate().reason;
  Run(0.5, true);
  EXPECT_EQ(Evaluate().state, TaskState::kUp);
  auto transitions = tracker_.counters().transitions;
  EXPECT_EQ(transitions[static_cast<int>(TaskState::kHung)], 0);
  EXPECT_EQ(transitions[static_cast<int>(TaskState::kDead)], 0);
}

TEST_F(TrackerTest, AdaptivePollingRelaxesOnlyWhileAllIsWell) {
  Run(1, true);
  EXPECT_FALSE(tracker_.MaySkipPoll(now_ + 0.1, proc_));  // Not settled yet (10 answers).
  Run(2, true);
  // Every other poll skipped for 10 s: the skipped gaps are neither silence nor suspicion.
  for (int i = 0; i < 50; ++i) {
    now_ += 0.1;
    ASSERT_TRUE(tracker_.MaySkipPoll(now_, proc_));
    tracker_.OnPollSkipped();
    ASSERT_EQ(Evaluate().state, TaskState::kUp);
    now_ += 0.1;
    ++steps_;
    Answer();
    ASSERT_EQ(Evaluate().state, TaskState::kUp) << tracker_.view().reason;
    EXPECT_LT(tracker_.view().phi, 1);
  }
  // Any anomaly puts it back to the full rate: a stopped or vanished process, a failure, a slow
  // answer, waiting on peers.
  proc_state_ = ProcStat{'T', 1.0};
  EXPECT_FALSE(tracker_.MaySkipPoll(now_ + 0.1, proc_));
  proc_state_ = ProcStat{'Z', 1.0};
  EXPECT_FALSE(tracker_.MaySkipPoll(now_ + 0.1, proc_));
  proc_state_ = std::nullopt;
  EXPECT_FALSE(tracker_.MaySkipPoll(now_ + 0.1, proc_));
  proc_state_ = ProcStat{'S', 1.0};
  EXPECT_TRUE(tracker_.MaySkipPoll(now_ + 0.1, proc_));
  EXPECT_FALSE(tracker_.MaySkipPoll(now_ + 0.3, proc_));  // Already a little late.
  now_ += 0.1;
  Answer(0.3);
  Evaluate();
  EXPECT_FALSE(tracker_.MaySkipPoll(now_ + 0.1, proc_));  // Slow answer: settle again.
  Run(3, true);
  EXPECT_TRUE(tracker_.MaySkipPoll(now_ + 0.1, proc_));
  now_ += 0.1;
  Fail(FailureKind::kUnavailable, "unavailable");
  Evaluate();
  EXPECT_FALSE(tracker_.MaySkipPoll(now_ + 0.1, proc_));
}

TEST_F(TrackerTest, StoppedWhileRelaxedIsHungQuickly) {
  Run(3, true);
  for (int i = 0; i < 20; ++i) {
    now_ += 0.1;
    ASSERT_TRUE(tracker_.MaySkipPoll(now_, proc_));
    tracker_.OnPollSkipped();
    Evaluate();
    now_ += 0.1;
    ++steps_;
    Answer();
    Evaluate();
  }
  // SIGSTOP right after an answer: the next tick's /proc read sees state T and polls at the full
  // rate again; hung well within a second.
  proc_state_ = ProcStat{'T', 1.0};
  double stopped = now_;
  while (now_ - stopped < 2 && Evaluate().state != TaskState::kHung) {
    now_ += 0.1;
    ASSERT_FALSE(tracker_.MaySkipPoll(now_, proc_));
  }
  EXPECT_EQ(Evaluate().state, TaskState::kHung);
  EXPECT_LE(now_ - stopped, 0.5);
}

}  // namespace
}  // namespace trainscope::sidecar
