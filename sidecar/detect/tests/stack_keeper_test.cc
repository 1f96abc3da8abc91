// StackKeeper with a scripted capture: one snapshot per incident, a new one for a new incident,
// blocked only after a while, the bounds per task and in memory, and the errors on demand.
#include "trainscope/sidecar/stack_keeper.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "trainscope/common/clock.h"

namespace trainscope::sidecar {
namespace {

using std::chrono::milliseconds;

class Fixture {
 public:
  explicit Fixture(KeeperOptions options = {}) {
    options.tick_s = 0.01;
    options.auto_min_interval_s = 0;
    keeper_ = std::make_unique<StackKeeper>(
        options,
        [this] {
          std::lock_guard lock(mu_);
          return views_;
        },
        [this](const TaskView& view) -> absl::StatusOr<forensics::ProcessSnapshot> {
          const int64_t pid = view.pid;
          ++captures_;
          if (pid == 666) return absl::NotFoundError("no process 666");
          forensics::ProcessSnapshot s;
          s.pid = pid;
          s.state = 'S';
          s.stacks = true;
          s.taken_unix = UnixSeconds();
          for (int i = 0; i < threads_; ++i) {
            forensics::ThreadSnapshot t;
            t.tid = pid + i;
            t.name = "t";
            t.frames.push_back({0x1234, std::string(100, 'f'), "m", "", 0});
            s.threads.push_back(t);
          }
          return s;
        });
    keeper_->Start();
  }
  void Set(const std::string& name, TaskState state, double since, int64_t pid = 42,
           std::string identity_error = "") {
    std::lock_guard lock(mu_);
    views_.clear();
    TaskView v;
    v.task = *ParseTaskRef(name);
    v.state = state;
    v.since = since;
    v.pid = pid;
    v.identity_error = std::move(identity_error);
    v.reason = "r";
    views_.push_back(v);
  }
  // Waits until `n` captures were made (or a while passed); then a few more ticks.
  int CapturesAfter(int n) {
    for (int i = 0; i < 300 && captures_ < n; ++i) std::this_thread::sleep_for(milliseconds(5));
    std::this_thread::sleep_for(milliseconds(60));
    return captures_;
  }
  StackKeeper& keeper() { return *keeper_; }
  std::atomic<int> threads_{3};

 private:
  std::mutex mu_;
  std::vector<TaskView> views_;
  std::atomic<int> captures_{0};
  std::unique_ptr<StackKeeper> keeper_;
};

TEST(StackKeeper, OneSnapshotPerIncidentAndANewOneForTheNext) {
  Fixture f;
  f.Set("worker:0", TaskState::kUp, 1);
  EXPECT_EQ(f.CapturesAfter(0), 0);
  f.Set("worker:0", TaskState::kStalled, 2);
  EXPECT_EQ(f.CapturesAfter(1), 1);        // And no more while the incident lasts.
  f.Set("worker:0", TaskState::kHung, 3);  // Another stuck state: another snapshot.
  EXPECT_EQ(f.CapturesAfter(2), 2);
  f.Set("worker:0", TaskState::kUp, 4);
  f.Set("worker:0", TaskState::kStalled, 5);
  EXPECT_EQ(f.CapturesAfter(3), 3);
  auto list = f.keeper().Stacks("worker:0", false);
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->snapshots_size(), 3);
  EXPECT_EQ(list->snapshots(0).trigger(), "stalled");  // Newest first.
  EXPECT_EQ(list->snapshots(1).trigger(), "hung");
  EXPECT_EQ(list->snapshots(0).threads_size(), 3);
  EXPECT_EQ(f.keeper().stats().automatic, 3);
  // What the diagnosis reads: the newest per task, a value that later captures do not change.
  const std::shared_ptr<const NewestStacks> newest = f.keeper().Newest();
  ASSERT_EQ(newest->size(), 1u);
  EXPECT_EQ(newest->at("worker:0").trigger(), "stalled");
  f.Set("worker:0", TaskState::kUp, 6);
  f.Set("worker:0", TaskState::kHung, 7);
  EXPECT_EQ(f.CapturesAfter(4), 4);
  EXPECT_EQ(newest->at("worker:0").trigger(), "stalled");
  EXPECT_EQ(f.keeper().Newest()->at("worker:0").trigger(), "hung");
}

TEST(StackKeeper, BlockedOnlyAfterAWhile) {
  KeeperOptions o;
  o.blocked_after_s = 0.3;
  Fixture f(o);
  f.Set("worker:0", TaskState::kBlocked, UnixSeconds());
  EXPECT_EQ(f.CapturesAfter(0), 0);
  EXPECT_EQ(f.CapturesAfter(1), 1);
  EXPECT_EQ(f.keeper().Stacks("worker:0", false)->snapshots(0).trigger(), "blocked");
}

TEST(StackKeeper, KeepsTheNewestPerTaskWithinTheMemoryBound) {
  KeeperOptions o;
  o.per_task = 2;
  Fixture f(o);
  for (int i = 0; i < 8; ++i) {
    f.Set("ps:0", i % 2 ? TaskState::kUp : TaskState::kStalled, 10 + i);
    f.CapturesAfter(i / 2 + 1);
  }
  EXPECT_EQ(f.keeper().stats().captures, 4);
  EXPECT_EQ(f.keeper().Stacks("ps:0", false)->snapshots_size(), 2);
  EXPECT_EQ(f.keeper().stats().kept, 2);

  KeeperOptions small;
  small.memory_bytes = 5000;
  Fixture g(small);
  g.threads_ = 20;  // About 2.5 KB a snapshot.
  for (int i = 0; i < 6; ++i) {
    g.Set("ps:0", i % 2 ? TaskState::kUp : TaskState::kHung, 10 + i);
    g.CapturesAfter(i / 2 + 1);
  }
  KeeperStats s = g.keeper().stats();
  EXPECT_LE(s.bytes_kept, 5000);
  EXPECT_GE(s.kept, 1);  // The newest is always kept.
}

TEST(StackKeeper, OnDemandAndItsErrors) {
  Fixture f;
  f.Set("worker:0", TaskState::kUp, 1);
  auto fresh = f.keeper().Stacks("worker:0", true);
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  ASSERT_EQ(fresh->snapshots_size(), 1);
  EXPECT_EQ(fresh->snapshots(0).trigger(), "demand");
  // Within a second, a fresh one returns the newest instead of capturing again.
  ASSERT_TRUE(f.keeper().Stacks("worker:0", true).ok());
  EXPECT_EQ(f.keeper().stats().captures, 1);

  EXPECT_EQ(f.keeper().Stacks("worker:9", true).status().code(), absl::StatusCode::kNotFound);
  f.Set("worker:0", TaskState::kDead, 2);
  auto dead = f.keeper().Stacks("worker:0", true);
  EXPECT_EQ(dead.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(dead.status().message().find("worker:0 has exited (dead"), std::string::npos);
  // Dead while its pid still names a zombie that no longer holds the port: exited, said so.
  f.Set("worker:0", TaskState::kDead, 2, 0, "pid 7 does not hold its listening port");
  EXPECT_NE(f.keeper().Stacks("worker:0", true).status().message().find("has exited (dead"),
            std::string::npos);
  // What was kept stays readable.
  EXPECT_EQ(f.keeper().Stacks("worker:0", false)->snapshots_size(), 1);
  f.Set("worker:0", TaskState::kMissing, 3, 0);
  EXPECT_NE(f.keeper().Stacks("worker:0", true).status().message().find("not answered"),
            std::string::npos);
  f.Set("worker:0", TaskState::kUp, 4, 666);  // The capture itself fails.
  auto failed = f.keeper().Stacks("worker:0", true);
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(f.keeper().stats().failures, 1);
}

TEST(StackKeeper, StopsWithADemandWaiting) {
  auto f = std::make_unique<Fixture>();
  f->keeper().Stop();
  f->Set("worker:0", TaskState::kUp, 1);
  EXPECT_EQ(f->keeper().Stacks("worker:0", true).status().code(), absl::StatusCode::kUnavailable);
}

// A keeper over two tasks whose captures wait until released, counted per pid.
class SlowCaptures {
 public:
  explicit SlowCaptures(double min_interval_s) {
    KeeperOptions o;
    o.tick_s = 0.01;
    o.demand_min_interval_s = min_interval_s;
    for (const char* name : {"worker:0", "worker:1"}) {
      TaskView v;
      v.task = *ParseTaskRef(name);
      v.state = TaskState::kUp;
      v.pid = name[7] == '0' ? 100 : 101;
      views_.push_back(v);
    }
    keeper_ = std::make_unique<StackKeeper>(
        o, [this] { return views_; },
        [this](const TaskView& view) -> absl::StatusOr<forensics::ProcessSnapshot> {
          const int64_t pid = view.pid;
          ++(pid == 100 ? captures0_ : captures1_);
          while (!released_) std::this_thread::sleep_for(milliseconds(2));
          forensics::ProcessSnapshot s;
          s.pid = pid;
          s.state = 'S';
          s.taken_unix = UnixSeconds();
          return s;
        });
    keeper_->Start();
  }
  StackKeeper& keeper() { return *keeper_; }
  std::atomic<bool> released_{false};
  std::atomic<int> captures0_{0};
  std::atomic<int> captures1_{0};

 private:
  std::vector<TaskView> views_;
  std::unique_ptr<StackKeeper> keeper_;
};

TEST(StackKeeper, ConcurrentDemandsShareOneCaptureAndGetItsResult) {
  SlowCaptures f(/*min_interval_s=*/0.3);
  std::vector<std::thread> askers;
  std::atomic<int> answered{0};
  for (int i = 0; i < 16; ++i) {
    askers.emplace_back([&] {
      auto list = f.keeper().Stacks("worker:0", true);
      if (list.ok() && list->snapshots_size() == 1) ++answered;
    });
  }
  while (f.captures0_ == 0) std::this_thread::sleep_for(milliseconds(2));
  std::this_thread::sleep_for(milliseconds(50));  // The others join it meanwhile.
  f.released_ = true;
  for (std::thread& t : askers) t.join();
  EXPECT_EQ(answered, 16);
  EXPECT_EQ(f.captures0_, 1);
  KeeperStats s = f.keeper().stats();
  EXPECT_EQ(s.demands_captured, 1);
  EXPECT_EQ(s.demands_shared + s.demands_recent, 15);
  // Within the interval: the last capture answers; after it, a new one is taken.
  ASSERT_TRUE(f.keeper().Stacks("worker:0", true).ok());
  EXPECT_EQ(f.captures0_, 1);
  std::this_thread::sleep_for(milliseconds(350));
  ASSERT_TRUE(f.keeper().Stacks("worker:0", true).ok());
  EXPECT_EQ(f.captures0_, 2);
}

TEST(StackKeeper, ADemandWhoseAskerLeftOrTimedOutIsDropped) {
  SlowCaptures f(/*min_interval_s=*/1);
  std::thread first([&] { EXPECT_TRUE(f.keeper().Stacks("worker:0", true).ok()); });
  while (f.captures0_ == 0) std::this_thread::sleep_for(milliseconds(2));
  // The keeper's thread is busy with worker:0: these wait in line, and give up first.
  auto left = f.keeper().Stacks("worker:1", true, {10, [] { return true; }});
  EXPECT_EQ(left.status().code(), absl::StatusCode::kCancelled) << left.status();
  auto late = f.keeper().Stacks("worker:1", true, {0.05, nullptr});
  EXPECT_EQ(late.status().code(), absl::StatusCode::kDeadlineExceeded) << late.status();
  f.released_ = true;
  first.join();
  std::this_thread::sleep_for(milliseconds(100));  // The keeper drops the stale demand.
  EXPECT_EQ(f.captures1_, 0);
  EXPECT_EQ(f.keeper().stats().demands_dropped, 2);
  // A later demand is served as usual.
  EXPECT_TRUE(f.keeper().Stacks("worker:1", true).ok());
  EXPECT_EQ(f.captures1_, 1);
}

}  // namespace
}  // namespace trainscope::sidecar
