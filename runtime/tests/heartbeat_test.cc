// Heartbeat: a task's answer to its watchers, from a real TaskStatus: identity, phase, steps,
// what it waits on, its peers' health, the calls in flight, what a ps served and holds, and the
// process's own resource usage.
#include "heartbeat.h"

#include <gtest/gtest.h>

#include <string>

#include "internal.h"
#include "ps_memory.h"
#include "task_status.h"
#include "trainscope/common/clock.h"

namespace trainscope {
namespace {

v1::TaskIdentity IdentityOf(const TaskRef& self) {
  v1::TaskIdentity id;
  *id.mutable_task() = TaskIdToProto(self);
  id.set_cluster_name("heartbeat-test");
  id.set_incarnation(99);
  id.set_listen_address("127.0.0.1:2222");
  return id;
}

TEST(HeartbeatTest, AnIdleWorkerSaysWhoItIsAndLittleElse) {
  TaskStatus status;
  const v1::TaskIdentity identity = IdentityOf({"worker", 1});
  Heartbeat heartbeat(&status, identity, "", nullptr);
  v1::HeartbeatResponse r;
  const double before = UnixSeconds();
  heartbeat.Fill(&r);
  EXPECT_EQ(r.identity().SerializeAsString(), identity.SerializeAsString());
  EXPECT_EQ(r.phase(), v1::PHASE_STARTING);
  EXPECT_FALSE(r.has_waiting());
  EXPECT_EQ(r.peers_size(), 0);
  EXPECT_EQ(r.inflight_size(), 0);
  EXPECT_FALSE(r.has_serving());
  EXPECT_FALSE(r.has_ps_state());  // Not a ps.
  EXPECT_EQ(r.metrics_address(), "");
  EXPECT_GE(r.unix_seconds(), before);
  EXPECT_LE(r.unix_seconds(), UnixSeconds());
  // The process's own usage, read now: this test runs in a process with threads and memory.
  EXPECT_GE(r.resources().threads(), 1);
  EXPECT_GT(r.resources().resident_bytes(), 0);
  EXPECT_GT(r.resources().open_fds(), 0);
}

TEST(HeartbeatTest, AWorkerWaitingOnAFailingPsSaysWhomAndWhy) {
  TaskStatus status;
  status.SetPhase(Phase::kTraining);
  status.SetExpectsProgress(true);
  status.RecordStep(0.25);
  status.SetSteps(12);  // After RecordStep, which counts one.
  PeerHealth* ps0 = status.Peer({"ps", 0}, "10.0.0.1:2222");
  PeerHealth* ps1 = status.Peer({"ps", 1}, "10.0.0.2:2222");
  ps0->RecordSuccess(0.002);
  ps1->SetIdentity(77, "10.0.0.2:2222");
  ps1->RecordFailure("connection refused", /*network=*/true);
  ps1->RecordFailure("connection refused", /*network=*/true);
  status.StartWaiting("Pull", {{"ps", 1}});
  InflightCalls::Call call;
  call.method = "Pull";
  call.peer = {"ps", 1};
  call.start = MonotonicSeconds() - 2;
  call.tid = 4242;
  InflightScope scope(&status.inflight(), call);

  Heartbeat heartbeat(&status, IdentityOf({"worker", 0}), "127.0.0.1:9100", nullptr);
  v1::HeartbeatResponse r;
  heartbeat.Fill(&r);
  EXPECT_EQ(r.phase(), v1::PHASE_TRAINING);
  EXPECT_TRUE(r.expects_progress());
  EXPECT_EQ(r.steps(), 12);
  EXPECT_DOUBLE_EQ(r.last_step_seconds(), 0.25);
  EXPECT_EQ(r.metrics_address(), "127.0.0.1:9100");
  ASSERT_TRUE(r.has_waiting());
  EXPECT_EQ(r.waiting().what(), "Pull");
  EXPECT_GT(r.waiting().since_unix_seconds(), 0);
  ASSERT_EQ(r.waiting().peers_size(), 1);
  EXPECT_EQ(r.waiting().peers(0).peer().role(), "ps");
  EXPECT_EQ(r.waiting().peers(0).peer().index(), 1);
  ASSERT_EQ(r.peers_size(), 2);
  const v1::PeerView& failing = r.peers(1);
  EXPECT_EQ(failing.address(), "10.0.0.2:2222");
  EXPECT_EQ(failing.consecutive_failures(), 2);
  EXPECT_EQ(failing.last_error(), "connection refused");
  EXPECT_TRUE(failing.network_failure());
  EXPECT_EQ(failing.peer_incarnation(), 77u);
  EXPECT_EQ(failing.peer_listen_address(), "10.0.0.2:2222");
  EXPECT_EQ(r.peers(0).consecutive_failures(), 0);
  ASSERT_EQ(r.inflight_size(), 1);
  EXPECT_EQ(r.inflight(0).method(), "Pull");
  EXPECT_EQ(r.inflight(0).peer().index(), 1);
  EXPECT_EQ(r.inflight(0).tid(), 4242);
  EXPECT_FALSE(r.inflight(0).served());
  EXPECT_GE(r.inflight(0).age_seconds(), 1.9);
  EXPECT_EQ(r.inflight(0).trace_id(), "");  // Not traced.
  EXPECT_FALSE(r.has_serving());
}

TEST(HeartbeatTest, APsSaysWhatItServedAndWhatItRestored) {
  TaskStatus status;
  status.SetPhase(Phase::kServing);
  status.RecordServed(0.5, 0.1, 0.4);
  status.RecordServed(0.25, 0.05, 0.2);
  PsMemory memory(0xfeed);
  memory.SetRestored(300, "/ckpt/step-300");
  InflightCalls::Call call;
  call.method = "Push";
  call.peer = {"worker", 3};
  call.start = MonotonicSeconds();
  call.served = true;
  call.traced = true;
  call.trace_id[15] = 0xab;
  InflightScope scope(&status.inflight(), call);

  Heartbeat heartbeat(&status, IdentityOf({"ps", 0}), "", &memory);
  v1::HeartbeatResponse r;
  heartbeat.Fill(&r);
  ASSERT_TRUE(r.has_serving());
  EXPECT_EQ(r.serving().calls(), 2);
  EXPECT_DOUBLE_EQ(r.serving().seconds(), 0.75);
  EXPECT_DOUBLE_EQ(r.serving().queue_seconds(), 0.15);
  EXPECT_DOUBLE_EQ(r.serving().work_seconds(), 0.6);
  ASSERT_TRUE(r.has_ps_state());
  EXPECT_EQ(r.ps_state().incarnation(), 0xfeedu);
  EXPECT_TRUE(r.ps_state().restored());
  EXPECT_EQ(r.ps_state().restored_step(), 300);
  EXPECT_EQ(r.ps_state().restored_from(), "/ckpt/step-300");
  ASSERT_EQ(r.inflight_size(), 1);
  EXPECT_TRUE(r.inflight(0).served());
  EXPECT_EQ(r.inflight(0).trace_id(), "000000000000000000000000000000ab");
}

TEST(HeartbeatTest, EachAnswerReadsTheStatusAnew) {
  TaskStatus status;
  Heartbeat heartbeat(&status, IdentityOf({"worker", 0}), "", nullptr);
  v1::HeartbeatResponse first;
  heartbeat.Fill(&first);
  status.SetPhase(Phase::kDone);
  status.SetSteps(5);
  v1::HeartbeatResponse second;
  heartbeat.Fill(&second);
  EXPECT_EQ(first.steps(), 0);
  EXPECT_EQ(second.steps(), 5);
  EXPECT_EQ(second.phase(), v1::PHASE_DONE);
}

}  // namespace
}  // namespace trainscope
