// A task's cgroup over time, from a fake reader and injected time: an OOM kill told from a
// plain death, throttling that lasts told from a burst, a memory limit nearly reached, reads at
// a bounded rate; then the same through a TaskTracker, in its reasons.
#include "trainscope/sidecar/cgroup_watch.h"

#include <gtest/gtest.h>

#include <cmath>

#include "trainscope/sidecar/api.h"
#include "trainscope/sidecar/task_tracker.h"

namespace trainscope::sidecar {
namespace {

constexpr int64_t kMiB = 1 << 20;

// A cgroup whose facts the test sets; counts the reads, and can lose its /proc entry.
struct FakeCgroup {
  CgroupFacts facts;
  bool process_visible = true;
  int path_reads = 0;
  int fact_reads = 0;

  FakeCgroup() {
    facts.version = 1;
    facts.memory_limit_bytes = 256 * kMiB;
    facts.memory_usage_bytes = 100 * kMiB;
    facts.oom_kills = 0;
    facts.cpu_quota_cores = 0.5;
    facts.cpu_period_seconds = 0.1;
    facts.cpu_periods = 0;
    facts.cpu_throttled_periods = 0;
  }
  CgroupReader Reader() {
    return {[this](int64_t) -> std::optional<CgroupPaths> {
              ++path_reads;
              if (!process_visible) return std::nullopt;
              CgroupPaths p;
              p.version = 1;
              p.memory_dir = "memory";
              p.memory_path = "/pod";
              return p;
            },
            [this](const CgroupPaths& p) {
              ++fact_reads;
              EXPECT_EQ(p.memory_path, "/pod");
              return facts;
            }};
  }
};

TEST(CgroupWatchTest, OomKillAtDeathIsNamedWithLimitAndPeak) {
  FakeCgroup cg;
  CgroupWatch w;
  for (double t = 0; t < 3; t += 0.1) w.Observe(t, 99, false, cg.Reader());
  EXPECT_FALSE(w.OomKilledWords());
  cg.process_visible = false;  // /proc/99 is gone; the cgroup's files are still there.
  cg.facts.oom_kills = 1;
  cg.facts.memory_usage_bytes = 1 * kMiB;
  cg.facts.memory_peak_bytes = 255 * kMiB;
  w.Observe(3.05, 99, true, cg.Reader());
  ASSERT_TRUE(w.OomKilledWords());
  EXPECT_EQ(*w.OomKilledWords(),
            "OOM-killed by its container's memory limit (256 MiB; usage was 255 MiB)");
  EXPECT_TRUE(w.view().oom_killed);
  EXPECT_EQ(w.view().oom_kills, 1);
}

TEST(CgroupWatchTest, PlainDeathIsNoOomKill) {
  FakeCgroup cg;
  cg.facts.oom_kills = 3;  // Earlier kills of other processes in the cgroup.
  CgroupWatch w;
  for (double t = 0; t < 3; t += 0.1) w.Observe(t, 99, false, cg.Reader());
  w.Observe(3.05, 99, true, cg.Reader());
  EXPECT_FALSE(w.OomKilledWords());
  EXPECT_FALSE(w.view().oom_killed);
  EXPECT_EQ(w.view().oom_kills, 3);
}

// The kill is counted before the process has exited: a reading in between still sees it alive.
TEST(CgroupWatchTest, OomKillSeenByAReadingBeforeTheExitStillCounts) {
  FakeCgroup cg;
  CgroupWatch w;
  w.Observe(0, 99, false, cg.Reader());
  cg.facts.oom_kills = 1;
  w.Observe(1, 99, false, cg.Reader());
  w.Observe(1.2, 99, true, cg.Reader());
  EXPECT_TRUE(w.OomKilledWords());
}

TEST(CgroupWatchTest, NoLimitOfItsOwnAndNoUsage) {
  FakeCgroup cg;
  cg.facts.memory_limit_bytes = 0;
  CgroupWatch w;
  w.Observe(0, 99, false, cg.Reader());
  cg.facts.oom_kills = 1;
  cg.facts.memory_usage_bytes.reset();
  w.Observe(0.5, 99, true, cg.Reader());
  ASSERT_TRUE(w.OomKilledWords());
  EXPECT_EQ(*w.OomKilledWords(),
            "OOM-killed by the kernel in its memory cgroup (no limit of its own: one above it, or "
            "the machine's memory, ran out; usage was 100 MiB)");
}

TEST(CgroupWatchTest, ReadsAtABoundedRateAndOnceAtDeath) {
  FakeCgroup cg;
  CgroupWatch w;
  for (double t = 0; t < 2.95; t += 0.1) w.Observe(t, 99, false, cg.Reader());
  EXPECT_EQ(cg.fact_reads, 3);  // At 0, 1 and 2 s (ticks of 100 ms).
  EXPECT_EQ(cg.path_reads, 3);
  w.Observe(2.96, 99, true, cg.Reader());
  EXPECT_EQ(cg.fact_reads, 4);  // At once, whatever the rate.
  for (double t = 3; t < 10; t += 0.1) w.Observe(t, 99, true, cg.Reader());
  EXPECT_EQ(cg.fact_reads, 4);             // Never again for the dead.
  w.Observe(10, 100, false, cg.Reader());  // A new process (restarted) starts afresh.
  EXPECT_EQ(cg.fact_reads, 5);
  w.Observe(10, 100, false, CgroupReader{});
  EXPECT_EQ(cg.fact_reads, 5);
}

// Throttled in `per_second` of the 10 periods of each second, read each second for `seconds`.
void Throttle(FakeCgroup& cg, CgroupWatch& w, double* t, double seconds, int per_second) {
  for (double end = *t + seconds; *t < end - 1e-9; *t += 1) {
    *cg.facts.cpu_periods += 10;
    *cg.facts.cpu_throttled_periods += per_second;
    w.Observe(*t, 99, false, cg.Reader());
  }
}

TEST(CgroupWatchTest, ThrottlingThatLastsIsNamedABurstIsNot) {
  FakeCgroup cg;
  CgroupWatch w;
  double t = 0;
  Throttle(cg, w, &t, 5, 7);
  EXPECT_FALSE(w.ThrottledWords());  // Not sampled over most of the window yet.
  Throttle(cg, w, &t, 6, 7);
  ASSERT_TRUE(w.ThrottledWords());
  EXPECT_EQ(*w.ThrottledWords(), "CPU-throttled 70% of the last 10 s by its quota (0.5 core)");
  EXPECT_NEAR(*w.view().cpu_throttled_ratio, 0.7, 1e-9);
  Throttle(cg, w, &t, 12, 0);
  EXPECT_FALSE(w.ThrottledWords());
  EXPECT_EQ(w.view().cpu_throttled_ratio, 0.0);
  Throttle(cg, w, &t, 2, 10);  // A 2 s burst: 20% of the window.
  EXPECT_FALSE(w.ThrottledWords());
  Throttle(cg, w, &t, 10, 10);
  ASSERT_TRUE(w.ThrottledWords());
  EXPECT_EQ(*w.ThrottledWords(), "CPU-throttled 100% of the last 10 s by its quota (0.5 core)");
}

TEST(CgroupWatchTest, ACounterThatGoesBackStartsTheWindowAgain) {
  FakeCgroup cg;
  CgroupWatch w;
  double t = 0;
  Throttle(cg, w, &t, 11, 9);
  EXPECT_TRUE(w.ThrottledWords());
  cg.facts.cpu_throttled_periods = 0;  // Moved to another cgroup.
  Throttle(cg, w, &t, 3, 9);
  EXPECT_FALSE(w.ThrottledWords());
}

TEST(CgroupWatchTest, MemoryWarningFromTheWorkingSet) {
  FakeCgroup cg;
  cg.facts.memory_usage_bytes = 236 * kMiB;
  CgroupWatch w;
  w.Observe(0, 99, false, cg.Reader());
  ASSERT_TRUE(w.MemoryWarning());
  EXPECT_EQ(*w.MemoryWarning(), "near its memory limit: 92% of 256 MiB");
  cg.facts.memory_inactive_file_bytes = 100 * kMiB;  // Page cache, reclaimed before a kill.
  w.Observe(1, 99, false, cg.Reader());
  EXPECT_FALSE(w.MemoryWarning());
  cg.facts.memory_limit_bytes = 0;
  w.Observe(2, 99, false, cg.Reader());
  EXPECT_FALSE(w.MemoryWarning());
}

// The facts on the wire (API, exchange) and back: absent stays absent, bad values are dropped.
TEST(CgroupWatchTest, FactsRoundTripThroughTheProto) {
  TaskView v;
  v.task = {"ps", 0};
  v.cgroup.version = 2;
  v.cgroup.memory_limit_bytes = 256 * kMiB;
  v.cgroup.oom_kills = 1;
  v.cgroup.cpu_quota_cores = 0.5;
  v.cgroup.cpu_throttled_ratio = 0.61;
  v.cgroup.oom_killed = true;
  pb::TaskView p;
  ToProto(v, true, &p);
  EXPECT_FALSE(p.cgroup().has_memory_usage_bytes());
  auto back = FromProto(p);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->cgroup.version, 2);
  EXPECT_EQ(back->cgroup.memory_limit_bytes, 256 * kMiB);
  EXPECT_FALSE(back->cgroup.memory_usage_bytes);
  EXPECT_EQ(back->cgroup.oom_kills, 1);
  EXPECT_EQ(back->cgroup.cpu_quota_cores, 0.5);
  EXPECT_EQ(back->cgroup.cpu_throttled_ratio, 0.61);
  EXPECT_TRUE(back->cgroup.oom_killed);
  EXPECT_TRUE(HeldByItsCpuQuota(back->cgroup));
  p.mutable_cgroup()->set_cpu_throttled_ratio(7);
  p.mutable_cgroup()->set_oom_kills(-1);
  p.mutable_cgroup()->set_memory_usage_bytes(std::nan(""));
  back = FromProto(p);
  ASSERT_TRUE(back.ok());
  EXPECT_FALSE(back->cgroup.cpu_throttled_ratio);
  EXPECT_FALSE(back->cgroup.oom_kills);
  EXPECT_FALSE(back->cgroup.memory_usage_bytes);
  TaskView none;
  none.task = {"ps", 0};
  ToProto(none, true, &p);
  EXPECT_FALSE(p.has_cgroup());  // No facts, no message: the JSON has no "cgroup".
}

// ---- Through a tracker: its reasons and its view.

class TrackerCgroupTest : public ::testing::Test {
 protected:
  TrackerCgroupTest() : tracker_("c", {"ps", 0}, "127.0.0.1:2222", true, {}, 0, 1.7e9) {
    tracker_.SetCgroupReader(cg_.Reader());
  }
  void Answer() {
    PollResult r;
    r.ok = true;
    r.sent_s = now_ - 0.001;
    r.received_s = now_;
    r.heartbeat.cluster_name = "c";
    r.heartbeat.task = {"ps", 0};
    r.heartbeat.incarnation = 1;
    r.heartbeat.pid = 4242;
    r.heartbeat.pid_verified = true;
    r.heartbeat.phase = "serving";
    tracker_.OnResult(r);
  }
  void Refused() {
    PollResult r;
    r.sent_s = r.received_s = now_;
    r.failure = FailureKind::kRefused;
    r.error = "connection refused";
    tracker_.OnResult(r);
  }
  // `seconds` of 100 ms ticks, answering while the process lives; each second of them the
  // cgroup counts 10 periods, `throttled` of them throttled.
  void Run(double seconds, bool alive, int throttled = 0) {
    for (double end = now_ + seconds; now_ < end - 1e-9;) {
      now_ += 0.1;
      *cg_.facts.cpu_periods += 1;
      if (static_cast<int>(std::lround(now_ * 10)) % 10 < throttled) {
        *cg_.facts.cpu_throttled_periods += 1;
      }
      if (alive) Answer();
      if (!alive) Refused();
      view_ = tracker_.Evaluate(now_, 1.7e9 + now_, proc_);
    }
  }

  FakeCgroup cg_;
  TaskTracker tracker_;
  bool alive_ = true;
  ProcReader proc_ = [this](int64_t) -> std::optional<ProcStat> {
    if (!alive_) return std::nullopt;
    ProcStat p;
    p.state = 'S';
    return p;
  };
  double now_ = 0;
  TaskView view_;
};

TEST_F(TrackerCgroupTest, DeadByOomKill) {
  Run(3, true);
  EXPECT_EQ(view_.state, TaskState::kUp) << view_.reason;
  EXPECT_EQ(view_.cgroup.memory_limit_bytes, 256 * kMiB);
  EXPECT_EQ(view_.cgroup.version, 1);
  cg_.facts.oom_kills = 1;
  cg_.facts.memory_peak_bytes = 255 * kMiB;
  alive_ = false;
  cg_.process_visible = false;
  Run(0.5, false);
  ASSERT_EQ(view_.state, TaskState::kDead) << view_.reason;
  EXPECT_EQ(view_.reason.rfind("OOM-killed by its container's memory limit (256 MiB; usage was "
                               "255 MiB): process 4242 is gone",
                               0),
            0u)
      << view_.reason;
  EXPECT_TRUE(view_.cgroup.oom_killed);
}

TEST_F(TrackerCgroupTest, DeadWithoutOomKillSaysNothingOfIt) {
  Run(3, true);
  alive_ = false;
  Run(0.5, false);
  ASSERT_EQ(view_.state, TaskState::kDead) << view_.reason;
  EXPECT_EQ(view_.reason.find("OOM"), std::string::npos) << view_.reason;
  EXPECT_FALSE(view_.cgroup.oom_killed);
}

TEST_F(TrackerCgroupTest, SlowWhileThrottledUpWithAWarningNearItsLimit) {
  Run(5, true, 8);
  EXPECT_EQ(view_.state, TaskState::kUp) << view_.reason;  // Not sampled long enough yet.
  Run(7, true, 8);
  ASSERT_EQ(view_.state, TaskState::kSlow) << view_.reason;
  EXPECT_EQ(view_.reason.rfind("CPU-throttled 80% of the last 10 s by its quota (0.5 core); "
                               "serving, answers every",
                               0),
            0u)
      << view_.reason;
  Run(12, true, 0);
  EXPECT_EQ(view_.state, TaskState::kUp) << view_.reason;
  cg_.facts.memory_usage_bytes = 240 * kMiB;
  Run(1.1, true);
  EXPECT_EQ(view_.state, TaskState::kUp) << view_.reason;
  EXPECT_NE(view_.reason.find(" (near its memory limit: 93% of 256 MiB)"), std::string::npos)
      << view_.reason;
  EXPECT_EQ(view_.cgroup.memory_usage_bytes, 240 * kMiB);
}

TEST_F(TrackerCgroupTest, NoReaderNoFacts) {
  TaskTracker plain("c", {"ps", 0}, "127.0.0.1:2222", true, {}, 0, 1.7e9);
  PollResult r;
  r.ok = true;
  r.heartbeat.cluster_name = "c";
  r.heartbeat.task = {"ps", 0};
  r.heartbeat.pid = 4242;
  r.heartbeat.pid_verified = true;
  plain.OnResult(r);
  EXPECT_EQ(plain.Evaluate(0.1, 1.7e9, proc_).cgroup.version, 0);
  EXPECT_EQ(cg_.fact_reads, 0);
}

}  // namespace
}  // namespace trainscope::sidecar
