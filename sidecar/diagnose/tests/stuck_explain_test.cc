// ExplainStuck as a table: what a person reads for each kind of stuck task, from the calls in
// flight, the snapshot and the peers' states.
#include "trainscope/sidecar/stuck_explain.h"

#include <gtest/gtest.h>

namespace trainscope::sidecar {
namespace {

pb::ThreadStack Thread(int64_t tid, const std::string& name,
                       std::vector<std::pair<std::string, std::string>> frames) {
  pb::ThreadStack t;
  t.set_tid(tid);
  t.set_name(name);
  t.set_state("S");
  t.set_syscall("futex");
  for (const auto& [function, module] : frames) {
    pb::StackFrame* f = t.add_frames();
    f->set_function(function);
    f->set_module(module);
  }
  return t;
}

TaskView Worker(int64_t pid) {
  TaskView v;
  v.task = {"worker", 0};
  v.pid = pid;
  v.state = TaskState::kStalled;
  return v;
}

CallInFlight Call(const std::string& method, TaskRef peer, double age, int64_t tid, bool served) {
  CallInFlight c;
  c.method = method;
  c.peer = std::move(peer);
  c.age_seconds = age;
  c.tid = tid;
  c.served = served;
  return c;
}

const pb::ThreadStack kDeadlockA =
    Thread(100, "trainer",
           {{"__lll_lock_wait", "libc.so.6"},
            {"pthread_mutex_lock", "libc.so.6"},
            {"trainscope::FaultInjector::TakeAThenB()", "linear_regression"},
            {"main", "linear_regression"}});
const pb::ThreadStack kDeadlockB =
    Thread(101, "deadlock-peer",
           {{"__lll_lock_wait", "libc.so.6"},
            {"___pthread_mutex_lock", "libc.so.6"},
            {"std::mutex::lock()", "linear_regression"},
            {"trainscope::FaultInjector::TakeBThenA()", "linear_regression"}});

TEST(StuckExplain, TheOldestCallWaitedForAndTheCalleesState) {
  TaskView v = Worker(100);
  v.inflight = {Call("Push", {"ps", 0}, 1.0, 100, false),
                Call("Pull", {"ps", 1}, 40.0, 100, false)};
  v.inflight_reported_unix = 1000;
  auto peer = [](const std::string& p) { return p == "ps:1" ? "hung: process 7 is stopped" : ""; };
  EXPECT_EQ(ExplainStuck(v, nullptr, 1001, peer),
            "main thread waiting 41 s in Pull to ps:1 (ps:1 is hung: process 7 is stopped)");
  // An up callee is not named; another thread is named by its name from the snapshot.
  pb::StackSnapshot s;
  *s.add_threads() = Thread(200, "pusher", {});
  v.inflight = {Call("Push", {"ps", 0}, 3.0, 200, false)};
  EXPECT_EQ(ExplainStuck(v, &s, 1000, peer), "thread pusher (200) waiting 3.0 s in Push to ps:0");
}

TEST(StuckExplain, AServedCallThatRunsLongNamesWhereItIs) {
  TaskView v = Worker(100);
  v.task = {"ps", 0};
  v.inflight = {Call("Pull", {"worker", 3}, 12.0, 300, true),
                Call("Pull", {"worker", 1}, 0.5, 301, true)};
  pb::StackSnapshot s;
  *s.add_threads() = Thread(300, "grpcpp_sync_ser",
                            {{"pthread_cond_wait", "libc.so.6"},
                             {"trainscope::FaultInjector::BlockForever()", "linear_regression"}});
  EXPECT_EQ(ExplainStuck(v, &s, 0, nullptr),
            "thread grpcpp_sync_ser (300) serving Pull from worker:3 for 12 s in "
            "trainscope::FaultInjector::BlockForever");
  // Served calls under a second are normal work, not an explanation.
  v.inflight = {Call("Pull", {"worker", 1}, 0.5, 301, true)};
  EXPECT_EQ(ExplainStuck(v, nullptr, 0, nullptr), "");
}

TEST(StuckExplain, ADeadlockNamesBothThreadsAndTheirFunctions) {
  TaskView v = Worker(100);
  pb::StackSnapshot s;
  *s.add_threads() = kDeadlockA;
  *s.add_threads() = kDeadlockB;
  *s.add_threads() = Thread(102, "idle", {{"epoll_wait", "libc.so.6"}});
  EXPECT_EQ(ExplainStuck(v, &s, 0, nullptr),
            "deadlock? 2 threads wait for mutexes: main thread in "
            "trainscope::FaultInjector::TakeAThenB, thread deadlock-peer (101) in "
            "trainscope::FaultInjector::TakeBThenA");
  pb::StackSnapshot one;
  *one.add_threads() = kDeadlockB;
  EXPECT_EQ(ExplainStuck(v, &one, 0, nullptr),
            "thread deadlock-peer (101) in trainscope::FaultInjector::TakeBThenA waits for a "
            "mutex");
}

TEST(StuckExplain, CreateSessionAndOtherwiseWhereTheMainThreadIs) {
  TaskView v = Worker(100);
  pb::StackSnapshot s;
  *s.add_threads() = Thread(100, "main",
                            {{"clock_nanosleep", "libc.so.6"},
                             {"trainscope::SleepFor(long)", "linear_regression"},
                             {"trainscope::Task::Impl::CreateSession()", "lr"}});
  EXPECT_EQ(ExplainStuck(v, &s, 0, nullptr), "main thread in CreateSession");
  pb::StackSnapshot t;
  *t.add_threads() =
      Thread(100, "main", {{"epoll_wait", "libc.so.6"}, {"Train(int, char**)", "my_training"}});
  EXPECT_EQ(ExplainStuck(v, &t, 0, nullptr), "main thread in Train (futex)");
  EXPECT_EQ(ExplainStuck(v, nullptr, 0, nullptr), "");
}

// ExplainStuckTasks over a node's views: only stuck tasks, the snapshot only of the current
// process, the peer's state from `peers` unless a blocked task's reason names it already.
TEST(StuckExplain, StuckTasksOfANodeFromTheNewestStacksAndThePeers) {
  TaskView stalled = Worker(100);
  stalled.reason = "no step";
  stalled.inflight = {Call("Pull", {"ps", 1}, 40.0, 100, false)};
  stalled.inflight_reported_unix = 1000;
  TaskView restarted = Worker(300);  // Its kept snapshot is of an older process (pid 200).
  restarted.task = {"worker", 1};
  TaskView deadlocked = Worker(400);
  deadlocked.task = {"worker", 2};
  TaskView up = Worker(500);
  up.task = {"worker", 3};
  up.state = TaskState::kUp;
  up.inflight = stalled.inflight;
  TaskView blocked = Worker(600);
  blocked.task = {"worker", 4};
  blocked.state = TaskState::kBlocked;
  blocked.inflight = {Call("CreateSession", {"ps", 1}, 40.0, 600, false)};
  blocked.inflight_reported_unix = 1000;
  BlockedPeer on;
  on.peer = {"ps", 1};
  blocked.blocked_on = {on};
  TaskView ps1;
  ps1.task = {"ps", 1};
  ps1.state = TaskState::kHung;
  ps1.reason = "process 7 is stopped; more words";

  NewestStacks newest;
  pb::StackSnapshot old;
  old.set_pid(200);
  *old.add_threads() = kDeadlockA;
  *old.add_threads() = kDeadlockB;
  newest["worker:1"] = old;
  pb::StackSnapshot current = old;
  current.set_pid(400);
  newest["worker:2"] = current;

  std::vector<TaskView> local = {stalled, restarted, deadlocked, up, blocked};
  ExplainStuckTasks(local, newest, {ps1}, 1001);
  EXPECT_EQ(local[0].reason,
            "no step; main thread waiting 41 s in Pull to ps:1 (ps:1 is hung: process 7 is "
            "stopped)");
  EXPECT_EQ(local[0].stuck_where,
            "main thread waiting 41 s in Pull to ps:1 (ps:1 is hung: process 7 is stopped)");
  EXPECT_EQ(local[1].reason, "");  // Nothing known of its current process.
  EXPECT_EQ(local[1].stuck_where, "");
  EXPECT_EQ(local[2].stuck_where.rfind("deadlock? 2 threads", 0), 0u) << local[2].stuck_where;
  EXPECT_EQ(local[2].reason, local[2].stuck_where);
  EXPECT_EQ(local[3].stuck_where, "");  // Up: not explained.
  EXPECT_EQ(local[4].stuck_where, "main thread waiting 41 s in CreateSession to ps:1");
}

TEST(StuckExplain, ShortFunctionKeepsTheQualifiedName) {
  EXPECT_EQ(ShortFunction("trainscope::ParameterClient::PullAll(std::vector<int>*)"),
            "trainscope::ParameterClient::PullAll");
  EXPECT_EQ(ShortFunction("void foo<int>(int)"), "foo<int>");
  EXPECT_EQ(ShortFunction("(anonymous namespace)::Train(int)"), "(anonymous namespace)::Train");
  EXPECT_EQ(ShortFunction("a::(anonymous namespace)::B::c() const"),
            "a::(anonymous namespace)::B::c");
  EXPECT_EQ(ShortFunction("main"), "main");
  EXPECT_EQ(ShortFunction(""), "");
  EXPECT_EQ(ShortFunction("((((("), "");
}

TEST(StuckExplain, OnlyTheInnermostFramesDecideALockWait) {
  // A thread that took a lock long ago and now sleeps in epoll does not wait on a lock.
  pb::ThreadStack t =
      Thread(1, "t",
             {{"epoll_wait", "libc.so.6"}, {"Poll()", "app"}, {"pthread_mutex_lock", "libc.so.6"}});
  EXPECT_FALSE(WaitsOnLock(t));
  EXPECT_TRUE(WaitsOnLock(kDeadlockA));
  EXPECT_EQ(OwnFunction(kDeadlockB), "trainscope::FaultInjector::TakeBThenA");
}

}  // namespace
}  // namespace trainscope::sidecar
