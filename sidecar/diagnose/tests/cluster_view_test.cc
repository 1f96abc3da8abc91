// The cluster view from first-hand views and the exchange's records: merging, why a task is
// unknown, a node cut off (seen from outside, and from inside), a sidecar down, partitions, and
// blocked-reason annotations.
#include "trainscope/sidecar/cluster_view.h"

#include <gtest/gtest.h>

#include "trainscope/sidecar/metrics.h"

namespace trainscope::sidecar {
namespace {

// ps:0 on node n1, worker:0 on n2, worker:1 on n3; this sidecar is n1.
ClusterSpec Spec() {
  return ParseTfConfig(
             R"({"cluster": {"ps": ["10.0.0.1:2222"], "worker": ["10.0.0.2:2222", "10.0.0.3:2222"]}})",
             false)
      ->cluster;
}

TaskView View(TaskRef t, TaskState s, const std::string& reason = "") {
  TaskView v;
  v.cluster = "c";
  v.task = std::move(t);
  v.state = s;
  v.reason = reason.empty() ? std::string(StateName(s)) : reason;
  v.observed_at = 100;
  v.since = 90;
  return v;
}

class ClusterViewTest : public ::testing::Test {
 protected:
  void SetUp() override {
    spec_ = Spec();
    exchange_ = std::make_shared<ExchangeSnapshot>();
    for (const char* id : {"n2:4317", "n3:4317"}) {
      Member m;
      m.id = id;
      m.hostname = std::string(id).substr(0, 2);
      m.heard = true;
      m.status_since = 95;
      exchange_->members.push_back(m);
    }
    local_ = {View({"ps", 0}, TaskState::kUp, "serving, answers every 100 ms")};
  }

  void Report(const std::string& node, std::vector<TaskView> views) {
    auto entry = std::make_shared<RecordEntry>();
    entry->record.set_node(node);
    entry->record.set_hostname(node.substr(0, 2));
    entry->record.set_made_at(99);
    for (const TaskView& v : views) ToProto(v, false, entry->record.add_tasks());
    entry->learned_at = 99.5;
    exchange_->records[node] = entry;
  }

  Member& MemberOf(const std::string& id) {
    for (Member& m : exchange_->members) {
      if (m.id == id) return m;
    }
    return exchange_->members[0];
  }

  ClusterView Build(const std::string& exchange_closed = "") {
    ClusterViewInputs in;
    in.exchange_closed = exchange_closed;
    in.cluster = "c";
    in.spec = &spec_;
    in.local = local_;
    in.exchange = exchange_;
    in.self = "n1:4317";
    in.self_hostname = "n1";
    in.has_peers = true;
    in.expected_nodes =
        std::make_shared<const std::map<TaskRef, std::string>>(std::map<TaskRef, std::string>{
            {{"ps", 0}, "n1:4317"}, {{"worker", 0}, "n2:4317"}, {{"worker", 1}, "n3:4317"}});
    in.now_unix = 100;
    if (!exchange_closed.empty()) in.exchange = nullptr;  // As the wiring has it: none opened.
    return BuildClusterView(in);
  }

  static const TaskView& Find(const ClusterView& view, const std::string& name) {
    for (const TaskView& v : view.tasks) {
      if (v.task.ShortName() == name) return v;
    }
    static TaskView none;
    return none;
  }

  ClusterSpec spec_;
  std::shared_ptr<ExchangeSnapshot> exchange_;
  std::vector<TaskView> local_;
};

// With the keeper's stacks, a stuck local task's reason says where it waits, and names the state
// of the peer it waits on as the merged view has it (here a remote task, from n2's record).
TEST_F(ClusterViewTest, StuckLocalTaskIsExplainedWithItsPeersStateFromTheView) {
  local_[0].state = TaskState::kStalled;
  local_[0].reason = "no step for 30 s";
  local_[0].pid = 100;
  CallInFlight call;
  call.method = "Pull";
  call.peer = {"worker", 0};
  call.age_seconds = 40;
  call.tid = 100;
  local_[0].inflight = {call};
  local_[0].inflight_reported_unix = 99;
  Report("n2:4317", {View({"worker", 0}, TaskState::kHung, "process 7 is stopped; more")});
  const std::string where =
      "main thread waiting 41 s in Pull to worker:0 (worker:0 is hung: "
      "process 7 is stopped)";

  // Without stacks (no keeper), the reason is the tracker's.
  EXPECT_EQ(Build().tasks.front().reason.find("main thread"), std::string::npos);

  ClusterViewInputs in;
  in.cluster = "c";
  in.spec = &spec_;
  in.local = local_;
  in.exchange = exchange_;
  in.self = "n1:4317";
  in.has_peers = true;
  in.now_unix = 100;
  in.stacks = std::make_shared<NewestStacks>();
  const std::vector<TaskView> explained = ExplainedLocal(in);
  ASSERT_EQ(explained.size(), 1u);
  EXPECT_EQ(explained[0].reason, "no step for 30 s; " + where);
  EXPECT_EQ(explained[0].stuck_where, where);
  const ClusterView view = BuildClusterView(in);
  const TaskView* ps = nullptr;
  for (const TaskView& v : view.tasks) {
    if (v.task.ShortName() == "ps:0") ps = &v;
  }
  ASSERT_NE(ps, nullptr);
  EXPECT_NE(ps->reason.find(where), std::string::npos) << ps->reason;
  EXPECT_EQ(ps->stuck_where, where);

  // Nothing stuck: the local views come back as they were.
  in.local[0].state = TaskState::kUp;
  EXPECT_EQ(ExplainedLocal(in)[0].reason, "no step for 30 s");
}

TEST_F(ClusterViewTest, FirstHandPlusRecordsAndWhyATaskIsUnknown) {
  Report("n2:4317", {View({"worker", 0}, TaskState::kUp, "training, answers on time")});
  MemberOf("n3:4317").heard = false;
  MemberOf("n3:4317").last_error = "connection refused";
  ClusterView view = Build();
  ASSERT_EQ(view.tasks.size(), 3u);
  const TaskView& w0 = Find(view, "worker:0");
  EXPECT_EQ(w0.state, TaskState::kUp);
  EXPECT_EQ(w0.source, "n2:4317");
  EXPECT_EQ(w0.address, "10.0.0.2:2222");
  EXPECT_EQ(w0.learned_at, 99.5);
  const TaskView& w1 = Find(view, "worker:1");
  EXPECT_EQ(w1.state, TaskState::kUnreachable);
  EXPECT_NE(w1.reason.find("the sidecar of its node n3 (n3:4317) has never answered (connection "
                           "refused); is it running"),
            std::string::npos)
      << w1.reason;
  EXPECT_EQ(Find(view, "ps:0").source, "");
  EXPECT_EQ(view.nodes[0].id, "n1:4317");
  EXPECT_TRUE(view.nodes[0].self);
  EXPECT_EQ(view.nodes[2].status, "unknown");
  // Just started: not asked yet, which says nothing against it.
  MemberOf("n3:4317").last_error.clear();
  const ClusterView fresh_view = Build();
  const TaskView& fresh = Find(fresh_view, "worker:1");
  EXPECT_EQ(fresh.reason,
            "no sidecar reports on it yet: this sidecar has not asked the sidecar of its node n3 "
            "(n3:4317) yet (it has just started)");
}

// No cluster key and no mutual TLS: no exchange. This node's tasks are first-hand; the others
// are not watched here, and say why, and the view and API carry the reason for the page.
TEST_F(ClusterViewTest, AClosedExchangeSaysWhyTheOtherNodesTasksAreNotWatched) {
  const ClusterView view = Build("no cluster key (--exchange_key_file) and no mutual TLS");
  EXPECT_EQ(Find(view, "ps:0").state, TaskState::kUp);
  for (const char* other : {"worker:0", "worker:1"}) {
    const TaskView& v = Find(view, other);
    EXPECT_EQ(v.state, TaskState::kUnreachable) << other;
    EXPECT_NE(v.reason.find("the exchange, which is closed here (no cluster key "
                            "(--exchange_key_file) and no mutual TLS)"),
              std::string::npos)
        << v.reason;
  }
  EXPECT_EQ(ToTaskList("c", view, false).exchange_closed(),
            "no cluster key (--exchange_key_file) and no mutual TLS");
  EXPECT_EQ(ToTaskList("c", Build(), false).exchange_closed(), "");
}

// The incidents other nodes own come from their records, each with its owner; this node's own
// record's are not the others'.
TEST_F(ClusterViewTest, TheIncidentsOtherNodesOwnComeWithTheirOwner) {
  Report("n2:4317", {View({"worker", 0}, TaskState::kDead, "process 7 is gone")});
  Report("n1:4317", {});
  for (const char* node : {"n2:4317", "n1:4317"}) {
    auto e = std::make_shared<RecordEntry>(*exchange_->records[node]);
    v1::OwnedIncident* in = e->record.add_incidents();
    in->set_id(std::string(node) == "n2:4317" ? "inc-0000000000d0" : "inc-0000000000e0");
    in->set_cause_kind("task");
    in->set_cause_a("worker:0");
    in->set_started(90);
    exchange_->records[node] = e;
  }
  const ClusterView view = Build();
  ASSERT_EQ(view.peer_incidents.size(), 1u);
  EXPECT_EQ(view.peer_incidents[0].node, "n2:4317");
  EXPECT_EQ(view.peer_incidents[0].id, "inc-0000000000d0");
  EXPECT_EQ(view.peer_incidents[0].cause_kind, "task");
  EXPECT_EQ(view.peer_incidents[0].cause_a, "worker:0");
  EXPECT_EQ(view.peer_incidents[0].started, 90);
}

TEST_F(ClusterViewTest, ACutOffNodeIsOneIncidentNotNTaskFailures) {
  Report("n3:4317", {View({"worker", 1}, TaskState::kUp, "training, answers on time")});
  Report("n2:4317", {View({"worker", 0}, TaskState::kUp)});
  MemberOf("n3:4317").status = MemberStatus::kSilent;
  MemberOf("n3:4317").last_error = "no answer within 250 ms";
  ClusterView view = Build();
  const TaskView& w1 = Find(view, "worker:1");
  EXPECT_EQ(w1.state, TaskState::kUnreachable);
  EXPECT_EQ(w1.reason.rfind("its node n3 (n3:4317) is cut off from every other node for 5.0 s "
                            "(isolated, or the machine is down); last reported up",
                            0),
            0u)
      << w1.reason;
  EXPECT_EQ(view.nodes[2].status, "silent");
  EXPECT_EQ(view.nodes[2].tasks, (std::vector<TaskRef>{TaskRef{"worker", 1}}));
  EXPECT_TRUE(view.partitions.empty());
}

// The alert on a cut-off node needs one series naming the node (not one per task), and only
// while it lasts: a down sidecar is not a cut-off node.
TEST_F(ClusterViewTest, MetricsNameASilentNodeOnceAndNothingElse) {
  EXPECT_EQ(RenderMetrics({}, local_, ServeStats(), Build()).find("trainscope_node_silent{"),
            std::string::npos);
  Report("n3:4317", {View({"worker", 1}, TaskState::kUp)});
  MemberOf("n3:4317").status = MemberStatus::kSilent;
  MemberOf("n3:4317").last_error = "no answer within 250 ms";
  MemberOf("n2:4317").status = MemberStatus::kSilent;
  MemberOf("n2:4317").last_error = "connection refused";
  ClusterView view = Build();
  EXPECT_EQ(view.cluster, "c");
  const std::string text = RenderMetrics({}, local_, ServeStats(), view);
  EXPECT_NE(text.find("trainscope_node_silent{cluster=\"c\",node=\"n3:4317\"} 1"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("trainscope_task_node_silent{cluster=\"c\",role=\"worker\",task=\"1\","
                      "node=\"n3:4317\"} 1"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("node=\"n2:4317\""), std::string::npos) << text;
  EXPECT_NE(text.find("trainscope_sidecar_info{cluster=\"c\",node=\"n1:4317\",hostname=\"n1\"} 1"),
            std::string::npos)
      << text;
}

TEST_F(ClusterViewTest, ASidecarThatRefusesConnectionsIsDownNotCutOff) {
  Report("n2:4317", {View({"worker", 0}, TaskState::kUp)});
  MemberOf("n2:4317").status = MemberStatus::kSilent;
  MemberOf("n2:4317").last_error = "connection refused";
  ClusterView view = Build();
  EXPECT_EQ(view.nodes[1].status, "down");
  const TaskView& w0 = Find(view, "worker:0");
  EXPECT_EQ(w0.state, TaskState::kUnreachable);
  EXPECT_NE(w0.reason.find("nobody watches it: the sidecar of its node n2 (n2:4317) is down"),
            std::string::npos)
      << w0.reason;
}

TEST_F(ClusterViewTest, ThisNodeCutOffSaysSoForEveryTask) {
  Report("n2:4317", {View({"worker", 0}, TaskState::kUp)});
  exchange_->isolated_since_unix = 97;
  local_[0].state = TaskState::kStalled;
  local_[0].reason = "steps stuck";
  ClusterView view = Build();
  ASSERT_TRUE(view.isolated_since.has_value());
  EXPECT_EQ(view.nodes[0].status, "isolated");
  const TaskView& ps = Find(view, "ps:0");
  EXPECT_EQ(ps.state, TaskState::kStalled);
  EXPECT_EQ(ps.reason.rfind("this node n1 (n1:4317) is cut off from every other node for 3.0 s", 0),
            0u)
      << ps.reason;
  const TaskView& w0 = Find(view, "worker:0");
  EXPECT_EQ(w0.state, TaskState::kUnreachable);
  EXPECT_NE(w0.reason.find("last heard: up"), std::string::npos) << w0.reason;
}

TEST_F(ClusterViewTest, PartitionNamesBothSidesAndNeitherIsDeadOrHung) {
  TaskView w0 = View({"worker", 0}, TaskState::kBlocked, "waiting 2.0 s in Pull for ps:0");
  w0.blocked_on.push_back({{"ps", 0}, "10.0.0.1:2222", 2, "connection lost"});
  w0.peers.push_back({{"ps", 0}, "10.0.0.1:2222", false, 3, "connection lost", 2.5, 0, ""});
  Report("n2:4317", {w0});
  exchange_->records["n2:4317"] = [&] {
    auto e = std::make_shared<RecordEntry>(*exchange_->records["n2:4317"]);
    e->record.add_unreachable_nodes("n1:4317");
    return e;
  }();
  Report("n3:4317", {View({"worker", 1}, TaskState::kUp)});
  ClusterView view = Build();
  ASSERT_EQ(view.partitions.size(), 1u);
  const PartitionInfo& p = view.partitions[0];
  EXPECT_EQ(p.a.ShortName(), "worker:0");
  EXPECT_EQ(p.b.ShortName(), "ps:0");
  EXPECT_TRUE(p.nodes_cut);
  EXPECT_NEAR(p.since, 97.5, 0.01);
  const TaskView& a = Find(view, "worker:0");
  EXPECT_EQ(a.state, TaskState::kBlocked);
  EXPECT_EQ(a.reason.rfind("partition: cannot reach ps:0 at 10.0.0.1:2222 on n1 (n1:4317) for "
                           "2.5 s (connection lost), though ps:0 answers its own sidecar; the "
                           "sidecars of n2 (n2:4317) and n1 (n1:4317) cannot reach each other "
                           "directly either",
                           0),
            0u)
      << a.reason;
  const TaskView& b = Find(view, "ps:0");
  EXPECT_EQ(b.state, TaskState::kUp);
  EXPECT_NE(b.reason.find("partitioned from worker:0 on n2 (n2:4317)"), std::string::npos)
      << b.reason;
  EXPECT_EQ(b.partitioned_from, std::vector<std::string>{"worker:0"});
  pb::TaskList list = ToTaskList("c", view, false);
  ASSERT_EQ(list.partitions_size(), 1);
  EXPECT_EQ(list.partitions(0).a(), "worker:0");

  // The link's incident (n1 <-> n2) names ps:0's partition series, which the rule keeps: the
  // same incident as the sidecar's own alert. The incident holds worker:0 (on n2), not ps:0.
  ServeStats stats;
  auto now = std::make_shared<IncidentsNow>();
  pb::Incident link;
  link.set_id("inc-00000000001c");
  link.set_open(true);
  link.set_started(97.5);
  link.mutable_cause()->set_kind("link");
  link.mutable_cause()->set_node("n1:4317");
  link.mutable_cause()->set_peer("n2:4317");
  link.add_affected()->set_task("worker:0");
  now->incidents = {link};
  now->goodput.set_cluster("c");
  stats.incidents = now;
  const std::string text = RenderMetrics({}, local_, stats, view);
  EXPECT_NE(text.find("trainscope_task_partition{cluster=\"c\",role=\"ps\",task=\"0\","
                      "peer_role=\"worker\",peer_task=\"0\",incident=\"inc-00000000001c\"} 1"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("trainscope_task_incident{"), std::string::npos) << text;
}

// The view is n1's (ps:0's node); worker:0 on n2 fails to reach ps:0 over the network.
TEST_F(ClusterViewTest, APartitionWaitsForEvidenceThatNeitherNodeIsCutOff) {
  auto failing_for = [&](double seconds) {
    TaskView w0 = View({"worker", 0}, TaskState::kUp);
    w0.peers.push_back(
        {{"ps", 0}, "10.0.0.1:2222", false, 1, "connection lost", seconds, 0, "", true});
    Report("n2:4317", {w0});
  };
  auto cut_link = [&] {
    auto e = std::make_shared<RecordEntry>(*exchange_->records["n2:4317"]);
    e->record.add_unreachable_nodes("n1:4317");
    exchange_->records["n2:4317"] = e;
  };
  // 0.5 s of failures, the sidecars' link fine: it could still be n2 cut off, or ps:0 stopped.
  failing_for(0.5);
  EXPECT_TRUE(Build().partitions.empty());
  // The probe it set off found the link cut (n2 reaches n1 only through others): at once.
  cut_link();
  ASSERT_EQ(Build().partitions.size(), 1u);
  // Without that, once it has lasted 1.2 s.
  failing_for(1.3);
  ASSERT_EQ(Build().partitions.size(), 1u);
  // n2's sidecar misses probes too: n2 may be cut off from everyone, which is no partition.
  MemberOf("n2:4317").status = MemberStatus::kSuspect;
  EXPECT_TRUE(Build().partitions.empty());
  // n2 is back (alive since 99.8), and the failure is from before: its calls are reconnecting.
  MemberOf("n2:4317").status = MemberStatus::kAlive;
  MemberOf("n2:4317").status_since = 99.8;
  cut_link();
  EXPECT_TRUE(Build().partitions.empty());
  // Still failing 1.5 s after it came back: a partition.
  MemberOf("n2:4317").status_since = 98.4;
  MemberOf("n2:4317").back_since = 98.4;
  failing_for(1.7);
  EXPECT_EQ(Build().partitions.size(), 1u);
  // ... but not from a record n2 made before it was back, however late it came.
  TaskView stale = View({"worker", 0}, TaskState::kUp);
  stale.observed_at = 98.2;
  stale.peers.push_back(
      {{"ps", 0}, "10.0.0.1:2222", false, 1, "connection lost", 1.0, 0, "", true});
  Report("n2:4317", {stale});
  cut_link();
  EXPECT_TRUE(Build().partitions.empty());
  // A record n2 has not replaced 5 s after it was back: the failure it shows goes on (n2's
  // sidecar was doubted at its start, say, and nothing changed since), and is not hidden for good.
  MemberOf("n2:4317").status_since = 94.5;
  MemberOf("n2:4317").back_since = 94.5;
  stale.observed_at = 94.0;
  stale.peers[0].seconds_since_success = 2.0;
  Report("n2:4317", {stale});
  EXPECT_EQ(Build().partitions.size(), 1u);
}

// worker:0 was held up elsewhere, then called ps:0 long after its last success there and failed:
// the 1.2 s count from that first failure (the probes had no reason to look at n1 before), not
// from the last success, nor from the start of the wait that covers both.
TEST_F(ClusterViewTest, APartitionCountsFromTheFirstFailureNotTheLastSuccess) {
  auto failing = [&](double since_success, double seconds_failing) {
    TaskView w0 = View({"worker", 0}, TaskState::kBlocked, "waiting in Pull for ps:0");
    w0.blocked_on.push_back({{"ps", 0}, "10.0.0.1:2222", since_success, "connection timed out"});
    PeerInfo p{{"ps", 0}, "10.0.0.1:2222", false, 1, "connection timed out", since_success, 0, "",
               true};
    p.seconds_failing = seconds_failing;
    w0.peers.push_back(p);
    Report("n2:4317", {w0});
  };
  failing(2.0, 0.3);
  EXPECT_TRUE(Build().partitions.empty());
  failing(2.0, 1.3);
  ClusterView view = Build();
  ASSERT_EQ(view.partitions.size(), 1u);
  EXPECT_NEAR(view.partitions[0].since, 98.0, 0.01);  // The reason still counts from the success.
  // A task that does not say (an older runtime): from the last success, as before.
  failing(2.0, 0);
  EXPECT_EQ(Build().partitions.size(), 1u);
  // A record that came while the failure was 0.8 s old is judged as observed, however late this
  // node reads it: n2 sends a new one when it crosses 1.2 s, or when the calls work again.
  TaskView w0 = View({"worker", 0}, TaskState::kUp);
  w0.observed_at = 98.5;
  PeerInfo p{{"ps", 0}, "10.0.0.1:2222", false, 2, "connection timed out", 1.3, 0, "", true};
  p.seconds_failing = 0.8;
  w0.peers = {p};
  Report("n2:4317", {w0});
  EXPECT_TRUE(Build().partitions.empty());
}

// This node's own link was down for a second, too short for it to find itself cut off: its
// tasks' failures from before it heard again are no partition while they reconnect.
TEST_F(ClusterViewTest, ThisNodesOwnReturnHasTheSameGrace) {
  Report("n3:4317", {View({"worker", 1}, TaskState::kUp)});
  local_[0].peers.push_back(
      {{"worker", 1}, "10.0.0.3:2222", false, 1, "connection lost", 1.5, 0, "", true});
  ASSERT_EQ(Build().partitions.size(), 1u);  // Failing since 98.5, both nodes alive.
  exchange_->back_since_unix = 99.5;         // Heard again 0.5 s ago.
  EXPECT_TRUE(Build().partitions.empty());
  exchange_->back_since_unix = 98.0;  // Back before the failures began.
  EXPECT_EQ(Build().partitions.size(), 1u);
  // Another node's record, made before this node was back, of a failure to reach its ps:0:
  // stale at any age; its next record counts.
  local_[0].peers.clear();
  TaskView w0 = View({"worker", 0}, TaskState::kUp);
  w0.observed_at = 97.9;
  w0.peers.push_back({{"ps", 0}, "10.0.0.1:2222", false, 1, "connection lost", 3, 0, "", true});
  Report("n2:4317", {w0});
  EXPECT_TRUE(Build().partitions.empty());
  w0.observed_at = 100;
  Report("n2:4317", {w0});
  EXPECT_EQ(Build().partitions.size(), 1u);
}

TEST_F(ClusterViewTest, ASlowPeerOrADeadOneIsNoPartition) {
  TaskView w0 = View({"worker", 0}, TaskState::kSlow);
  w0.peers.push_back({{"ps", 0}, "10.0.0.1:2222", false, 3, "no answer within 5000 ms", 6, 0, ""});
  Report("n2:4317", {w0});
  EXPECT_TRUE(Build().partitions.empty());
  w0.peers[0].last_error = "connection lost";
  Report("n2:4317", {w0});
  local_[0].state = TaskState::kDead;
  EXPECT_TRUE(Build().partitions.empty());
  // A peer on a node that is cut off: named, but as that node's trouble.
  local_[0].state = TaskState::kUp;
  TaskView w1 = View({"worker", 1}, TaskState::kUp);
  Report("n3:4317", {w1});
  w0.peers[0] = {{"worker", 1}, "10.0.0.3:2222", false, 3, "connection lost", 6, 0, ""};
  Report("n2:4317", {w0});
  MemberOf("n3:4317").status = MemberStatus::kSilent;
  ClusterView view = Build();
  EXPECT_TRUE(view.partitions.empty());
  EXPECT_NE(Find(view, "worker:0").reason.find("that node is cut off from every other node"),
            std::string::npos);
}

TEST(AnnotateBlocked, SaysWhereThePeerReallyListens) {
  ClusterSpec spec = Spec();
  TaskView worker = View({"worker", 0}, TaskState::kBlocked,
                         "waiting 12 s in CreateSession for ps:0 at 10.0.0.1:2222 (connection "
                         "refused)");
  worker.blocked_on.push_back({{"ps", 0}, "10.0.0.1:2222", 12, "connection refused"});
  TaskView ps = View({"ps", 0}, TaskState::kUp);
  ps.listen_address = "10.0.0.1:2223";
  std::vector<TaskView> views = {worker, ps};
  AnnotateBlocked(views, spec);
  EXPECT_EQ(views[0].reason,
            "waiting 12 s in CreateSession for ps:0 at 10.0.0.1:2222 (connection refused); "
            "ps:0 is listening on 10.0.0.1:2223, not 10.0.0.1:2222: fix the cluster spec");
}

TEST(AnnotateBlocked, SaysThePeerIsDeadOrMissing) {
  ClusterSpec spec = Spec();
  TaskView worker = View({"worker", 0}, TaskState::kBlocked, "waiting");
  worker.blocked_on.push_back({{"ps", 0}, "10.0.0.1:2222", 12, "connection refused"});
  TaskView ps = View({"ps", 0}, TaskState::kMissing, "never answered");
  std::vector<TaskView> views = {worker, ps};
  AnnotateBlocked(views, spec);
  EXPECT_EQ(views[0].reason,
            "waiting; ps:0 is missing: it has not answered this sidecar either; is it started?");
  views[0].reason = "waiting";
  views[1].state = TaskState::kDead;
  views[1].reason = "process 7 exited";
  AnnotateBlocked(views, spec);
  EXPECT_EQ(views[0].reason, "waiting; ps:0 is dead (process 7 exited)");
}

TEST(NetworkErrors, OnlyTheNetworksFailuresCount) {
  for (const char* e : {"connection lost (no keepalive answer: packets stopped)",
                        "no route to host", "connection timed out", "connection reset by peer"}) {
    EXPECT_TRUE(IsNetworkError(e)) << e;
  }
  for (const char* e : {"no answer within 1000 ms", "connection refused", "DEADLINE_EXCEEDED: x",
                        "INVALID_ARGUMENT: bad shape", ""}) {
    EXPECT_FALSE(IsNetworkError(e)) << e;
  }
}

TEST(SameAddress, WildcardAndLoopbackCompareByPort) {
  EXPECT_TRUE(SameAddress("0.0.0.0:1", "10.0.0.1:1"));
  EXPECT_TRUE(SameAddress("localhost:1", "127.0.0.1:1"));
  EXPECT_FALSE(SameAddress("127.0.0.1:1", "127.0.0.1:2"));
  EXPECT_FALSE(SameAddress("10.0.0.1:1", "10.0.0.2:1"));
}

}  // namespace
}  // namespace trainscope::sidecar
