// Node records (newest version wins, nonsense refused), anti-entropy slices, the broadcast
// queue's bounded retransmissions, and the own record's version rising only on news.
#include "trainscope/sidecar/node_records.h"

#include <gtest/gtest.h>

#include "trainscope/sidecar/api.h"

namespace trainscope::sidecar {
namespace {

v1::NodeRecord Record(const std::string& node, uint64_t generation, uint64_t version,
                      const std::string& state = "up") {
  v1::NodeRecord r;
  r.set_node(node);
  r.set_generation(generation);
  r.set_version(version);
  v1::TaskView* t = r.add_tasks();
  t->set_role("worker");
  t->set_task(0);
  t->set_state(state);
  return r;
}

// The words gossiped for an up task leave out what changes every poll (latency); a task watched
// from outside stays said to be, with its pid.
TEST(NodeRecords, StableUpReasonKeepsOutsideTasksOutside) {
  TaskView runtime;
  runtime.phase = "training";
  runtime.reason = "training, answers every 100 ms (latency 0.4 ms), step 12";
  EXPECT_EQ(StableUpReason(runtime), "training, answers on time");
  TaskView outside;
  outside.pid = 4242;
  outside.restarts = 1;
  outside.reason = std::string(kOutsideReasonPrefix) + "gRPC answers in 0.4 ms; pid 4242 ...";
  EXPECT_EQ(StableUpReason(outside),
            "watched from outside (no trainscope heartbeat): gRPC answers on time (pid 4242); "
            "restarted 1x");
}

TEST(NodeRecords, NewestVersionWinsAndALaterGenerationWinsOverAnyVersion) {
  NodeRecords records;
  std::string why;
  EXPECT_EQ(records.Apply(Record("b:1", 1, 5), 10, &why), NodeRecords::Applied::kNewer);
  EXPECT_EQ(records.Apply(Record("b:1", 1, 5), 11, &why), NodeRecords::Applied::kNotNewer);
  EXPECT_EQ(records.Apply(Record("b:1", 1, 4), 11, &why), NodeRecords::Applied::kNotNewer);
  EXPECT_EQ(records.Apply(Record("b:1", 1, 6, "dead"), 12, &why), NodeRecords::Applied::kNewer);
  EXPECT_EQ(records.Find("b:1")->record.tasks(0).state(), "dead");
  EXPECT_EQ(records.Find("b:1")->learned_at, 12);
  // The sidecar restarted: version 1 of a later generation is newer.
  EXPECT_EQ(records.Apply(Record("b:1", 2, 1), 13, &why), NodeRecords::Applied::kNewer);
  EXPECT_EQ(records.Apply(Record("b:1", 1, 99), 14, &why), NodeRecords::Applied::kNotNewer);
}

TEST(NodeRecords, NonsenseIsRefusedWithAReason) {
  NodeRecords records;
  std::string why;
  EXPECT_EQ(records.Apply(Record("", 1, 1), 0, &why), NodeRecords::Applied::kRefused);
  EXPECT_NE(why.find("node id"), std::string::npos);
  EXPECT_EQ(records.Apply(Record("b:1", 1, 1, "exploded"), 0, &why),
            NodeRecords::Applied::kRefused);
  EXPECT_NE(why.find("unknown state"), std::string::npos) << why;
  v1::NodeRecord bad_role = Record("b:1", 1, 1);
  bad_role.mutable_tasks(0)->set_role("no/job");
  EXPECT_EQ(records.Apply(bad_role, 0, &why), NodeRecords::Applied::kRefused);
  v1::NodeRecord huge = Record("b:1", 1, 1);
  for (int i = 0; i < kMaxTasksPerNode; ++i) *huge.add_tasks() = huge.tasks(0);
  EXPECT_EQ(records.Apply(huge, 0, &why), NodeRecords::Applied::kRefused);
  EXPECT_NE(why.find("tasks"), std::string::npos);
  EXPECT_EQ(records.Find("b:1"), nullptr);
}

TEST(NodeRecords, AntiEntropySlicesRepairStaleAndMissingRecords) {
  NodeRecords records;
  std::string why;
  for (const char* n : {"a:1", "b:1", "c:1", "d:1", "e:1"}) records.Apply(Record(n, 1, 3), 0, &why);
  v1::SyncRequest first;
  EXPECT_EQ(records.FillSlice("", 2, &first), "b:1");
  ASSERT_EQ(first.known_size(), 2);
  EXPECT_EQ(first.known(0).node(), "a:1");
  EXPECT_EQ(first.until(), "b:1");
  v1::SyncRequest last;
  EXPECT_EQ(records.FillSlice("c:1", 5, &last), "");  // Reached the end: start over next time.
  EXPECT_EQ(last.known_size(), 2);
  EXPECT_EQ(last.until(), "");

  // A node that holds b:1 stale, lacks c:1, and compares the range (a:1, d:1].
  NodeRecords stale;
  stale.Apply(Record("b:1", 1, 2), 0, &why);
  stale.Apply(Record("d:1", 1, 3), 0, &why);
  v1::SyncRequest request;
  stale.FillSlice("a:1", 10, &request);
  request.set_until("d:1");
  v1::SyncResponse response;
  records.Answer(request, 1 << 20, &response);
  std::vector<std::string> got;
  for (const auto& r : response.records()) got.push_back(r.node());
  EXPECT_EQ(got, (std::vector<std::string>{"b:1", "c:1"}));  // Not a:1 or e:1: out of range.

  // A full pull in pages.
  v1::SyncRequest all;
  all.set_all(true);
  all.set_max_records(2);
  v1::SyncResponse page;
  records.Answer(all, 1 << 20, &page);
  EXPECT_EQ(page.records_size(), 2);
  EXPECT_TRUE(page.more());
}

TEST(BroadcastQueue, EachItemIsSentALimitedNumberOfTimesLeastSentFirst) {
  BroadcastQueue q;
  q.Put(Record("a:1", 1, 1));
  q.Put(Record("a:1", 1, 2));  // Replaces the older news about a:1.
  v1::MemberUpdate u;
  u.set_node("b:1");
  u.set_status(v1::MemberUpdate::SUSPECT);
  q.Put(u);
  EXPECT_EQ(q.size(), 2u);
  for (int i = 0; i < 3; ++i) {
    v1::Gossip g;
    q.Fill(&g, 1 << 20, 3);
    EXPECT_EQ(g.records_size(), 1);
    EXPECT_EQ(g.records(0).version(), 2u);
    EXPECT_EQ(g.members_size(), 1);
  }
  EXPECT_TRUE(q.empty());
  // A small budget takes what fits; the rest waits its turn.
  q.Put(Record("a:1", 1, 3));
  q.Put(Record("b:1", 1, 3));
  v1::Gossip g;
  q.Fill(&g, Record("a:1", 1, 3).ByteSizeLong() + 10, 3);
  EXPECT_EQ(g.records_size(), 1);
  v1::Gossip next;
  q.Fill(&next, Record("a:1", 1, 3).ByteSizeLong() + 10, 3);
  ASSERT_EQ(next.records_size(), 1);
  EXPECT_NE(next.records(0).node(), g.records(0).node());
}

// A relay of news just learned carries only what was never sent: the rest of each item's
// transmissions stay with the periods.
TEST(BroadcastQueue, ARelayCarriesOnlyNewsNeverSent) {
  BroadcastQueue q;
  q.Put(Record("a:1", 1, 1));
  v1::Gossip first;
  q.Fill(&first, 1 << 20, 5);
  EXPECT_FALSE(q.HasUnsent());
  q.Put(Record("b:1", 1, 1));
  EXPECT_TRUE(q.HasUnsent());
  v1::Gossip relay;
  q.Fill(&relay, 1 << 20, 5, /*fresh_only=*/true);
  ASSERT_EQ(relay.records_size(), 1);
  EXPECT_EQ(relay.records(0).node(), "b:1");
  v1::Gossip period;
  q.Fill(&period, 1 << 20, 5);
  EXPECT_EQ(period.records_size(), 2);
}

TaskView Up(int index) {
  TaskView v;
  v.task = {"worker", index};
  v.state = TaskState::kUp;
  v.phase = "training";
  v.reason = "training, answers every 100 ms (latency 1 ms), step 5";
  return v;
}

TEST(OwnRecord, VersionRisesOnNewsNotOnMovingNumbers) {
  OwnRecord own("a:1", "a", 7, /*refresh_s=*/5);
  std::vector<TaskView> views = {Up(0)};
  auto first = own.Update(views, {}, false, 100);
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->version(), 1u);
  EXPECT_EQ(first->tasks(0).reason(), "training, answers on time");
  views[0].steps = 99;
  views[0].reason = "training, answers every 100 ms (latency 2 ms), step 99";
  EXPECT_FALSE(own.Update(views, {}, false, 101).has_value());
  views[0].state = TaskState::kDead;
  views[0].reason = "process 5 is gone";
  auto dead = own.Update(views, {}, false, 102);
  ASSERT_TRUE(dead.has_value());
  EXPECT_EQ(dead->version(), 2u);
  // A problem's reason changes: told again, but at most every refresh_s.
  views[0].reason = "process 5 is gone (for 3 s)";
  EXPECT_FALSE(own.Update(views, {}, false, 103).has_value());
  EXPECT_TRUE(own.Update(views, {}, false, 107.5).has_value());
  // A cut link and being cut off are news.
  EXPECT_TRUE(own.Update(views, {"b:1"}, false, 108).has_value());
  auto isolated = own.Update(views, {"b:1"}, true, 109);
  ASSERT_TRUE(isolated.has_value());
  EXPECT_TRUE(isolated->isolated());
}

// The open incidents this node owns ride in its record; a change of their ids is news.
TEST(OwnRecord, ItsOwnIncidentsAreCarriedAndANewOneIsNews) {
  OwnRecord own("a:1", "a", 7, /*refresh_s=*/5);
  std::vector<TaskView> views = {Up(0)};
  ASSERT_TRUE(own.Update(views, {}, false, 100).has_value());
  v1::OwnedIncident dead;
  dead.set_id("inc-0000000000d0");
  dead.set_cause_kind("task");
  dead.set_cause_a("worker:0");
  dead.set_started(99.5);
  own.SetIncidents({dead});
  auto with = own.Update(views, {}, false, 101);
  ASSERT_TRUE(with.has_value());
  ASSERT_EQ(with->incidents_size(), 1);
  EXPECT_EQ(with->incidents(0).id(), "inc-0000000000d0");
  EXPECT_EQ(with->incidents(0).cause_a(), "worker:0");
  own.SetIncidents({dead});
  EXPECT_FALSE(own.Update(views, {}, false, 102).has_value());
  own.SetIncidents({});
  auto closed = own.Update(views, {}, false, 103);
  ASSERT_TRUE(closed.has_value());
  EXPECT_EQ(closed->incidents_size(), 0);
}

// A straggler's figures are news: each doubling of its pace over its usual, and a quota that
// holds it back; a pace that moves less is not.
TEST(OwnRecord, AStragglersPaceAndCauseAreNews) {
  OwnRecord own("a:1", "a", 7, /*refresh_s=*/5);
  std::vector<TaskView> views = {Up(0)};
  views[0].usual_step_seconds = 0.01;
  views[0].recent_step_seconds = 0.012;
  ASSERT_TRUE(own.Update(views, {}, false, 100).has_value());
  // A pace within a quarter of the one told is not news; one past it is, at most every second.
  views[0].recent_step_seconds = 0.014;
  EXPECT_FALSE(own.Update(views, {}, false, 100.5).has_value());
  views[0].recent_step_seconds = 0.018;
  EXPECT_FALSE(own.Update(views, {}, false, 100.8).has_value());
  auto slower = own.Update(views, {}, false, 101.2);
  ASSERT_TRUE(slower.has_value());
  EXPECT_DOUBLE_EQ(slower->tasks(0).recent_step_seconds(), 0.018);
  views[0].recent_step_seconds = 0.021;
  EXPECT_FALSE(own.Update(views, {}, false, 103).has_value());
  // Back to its pace is news as well: its peers judge others against it.
  views[0].recent_step_seconds = 0.012;
  auto back = own.Update(views, {}, false, 104);
  ASSERT_TRUE(back.has_value());
  EXPECT_DOUBLE_EQ(back->tasks(0).recent_step_seconds(), 0.012);
  // A quota that holds it back is news at once, and once.
  views[0].cgroup.cpu_quota_cores = 0.05;
  views[0].cgroup.cpu_throttled_ratio = 0.9;
  ASSERT_TRUE(HeldByItsCpuQuota(views[0].cgroup));
  EXPECT_TRUE(own.Update(views, {}, false, 104.1).has_value());
  EXPECT_FALSE(own.Update(views, {}, false, 106).has_value());
}

// A failure to reach a peer is news when it starts, and again when it has lasted long enough to
// be a partition (kPartitionAfterS), so that other views judge it as observed; not in between.
TEST(OwnRecord, AFailureThatLastsLongEnoughForAPartitionIsNewsAgain) {
  OwnRecord own("a:1", "a", 7, /*refresh_s=*/5);
  std::vector<TaskView> views = {Up(0)};
  ASSERT_TRUE(own.Update(views, {}, false, 100).has_value());
  PeerInfo p;
  p.peer = {"ps", 0};
  p.consecutive_failures = 1;
  p.network_failure = true;
  p.last_error = "connection timed out";
  p.seconds_since_success = 3;
  p.seconds_failing = 0.3;
  views[0].peers = {p};
  EXPECT_TRUE(own.Update(views, {}, false, 100.3).has_value());
  views[0].peers[0].seconds_failing = 0.9;
  EXPECT_FALSE(own.Update(views, {}, false, 100.9).has_value());
  views[0].peers[0].seconds_failing = 1.3;
  auto crossed = own.Update(views, {}, false, 101.3);
  ASSERT_TRUE(crossed.has_value());
  EXPECT_NEAR(crossed->tasks(0).peers(0).seconds_failing(), 1.3, 1e-9);
  views[0].peers[0].seconds_failing = 2.5;
  EXPECT_FALSE(own.Update(views, {}, false, 102.5).has_value());
}

}  // namespace
}  // namespace trainscope::sidecar
