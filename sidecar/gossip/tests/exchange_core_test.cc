// The exchange protocol with many nodes in one process (SimCluster, injected time): everyone
// learns everything, a change reaches every node in a few periods, a node that goes down is
// confirmed silent by all and sees itself cut off, a cut link is reached around, and a peer of
// another cluster or protocol is refused.
#include "trainscope/sidecar/exchange_core.h"

#include <gtest/gtest.h>

#include "exchange_sim.h"

namespace trainscope::sidecar {
namespace {

int StepsUntil(SimCluster& sim, int max_steps, const std::function<bool()>& done) {
  for (int s = 1; s <= max_steps; ++s) {
    sim.Step();
    if (done()) return s;
  }
  return -1;
}

TEST(ExchangeCore, EveryNodeLearnsEveryRecordAndEveryChange) {
  SimCluster sim(32, MembershipOptions{}, 1);
  int joined = StepsUntil(sim, 50, [&] {
    for (int i = 0; i < sim.size(); ++i) {
      if (sim.Knowing(i, 1) < sim.size()) return false;
    }
    return true;
  });
  ASSERT_GT(joined, 0);
  sim.SetState(7, TaskState::kDead);
  sim.Step();
  const uint64_t v = sim.OwnVersion(7);
  ASSERT_GE(v, 2u);
  int spread = StepsUntil(sim, 30, [&] { return sim.Knowing(7, v) == sim.size(); });
  EXPECT_GT(spread, 0);
  EXPECT_LE(spread, 10) << "periods for a change to reach all 32 nodes";
  // Nothing new: nothing more is gossiped than probes.
  const int64_t before = sim.core(0).stats().messages_sent;
  for (int i = 0; i < 50; ++i) sim.Step();
  const double per_period = (sim.core(0).stats().messages_sent - before) / 50.0;
  EXPECT_LT(per_period, 4) << "messages a node sends per period, steady state";
}

TEST(ExchangeCore, ANodeThatGoesDownIsConfirmedSilentAndSeesItselfCutOff) {
  SimCluster sim(8, MembershipOptions{}, 2);
  for (int i = 0; i < 20; ++i) sim.Step();
  sim.Down(3);
  int silent = StepsUntil(sim, 40, [&] { return sim.Holding(3, MemberStatus::kSilent) == 7; });
  ASSERT_GT(silent, 0);
  EXPECT_LE(silent * 0.2, 3.0) << "seconds until every other node holds it silent";
  int inside = StepsUntil(
      sim, 20, [&] { return sim.core(3).membership().IsolatedSince(sim.now()).has_value(); });
  EXPECT_GE(inside, 0) << "node 3 sees itself cut off";
  EXPECT_FALSE(sim.core(0).membership().IsolatedSince(sim.now()).has_value());
  // Back: it refutes, and everyone holds it alive again.
  sim.Up(3);
  EXPECT_GT(StepsUntil(sim, 40, [&] { return sim.Holding(3, MemberStatus::kAlive) == 7; }), 0);
  EXPECT_FALSE(sim.core(3).membership().IsolatedSince(sim.now()).has_value());
}

TEST(ExchangeCore, ACutLinkIsReachedAroundAndReported) {
  SimCluster sim(4, MembershipOptions{}, 3);
  for (int i = 0; i < 10; ++i) sim.Step();
  sim.Cut(1, 2);
  for (int i = 0; i < 30; ++i) sim.Step();
  EXPECT_EQ(sim.Holding(2, MemberStatus::kAlive), 3);
  EXPECT_EQ(sim.core(1).membership().UnreachableDirectly(),
            std::vector<std::string>{SimCluster::Id(2)});
  // Node 1's record tells the cluster.
  auto r = sim.core(0).records().Find(SimCluster::Id(1));
  ASSERT_NE(r, nullptr);
  ASSERT_EQ(r->record.unreachable_nodes_size(), 1);
  EXPECT_EQ(r->record.unreachable_nodes(0), SimCluster::Id(2));
}

TEST(ExchangeCore, RefusesPeersOfAnotherClusterOrProtocol) {
  ExchangeOptions o;
  o.cluster = "a";
  o.self = "x:1";
  ExchangeCore core(o, 1, Now{0, 1.7e9});
  v1::PingRequest req;
  req.mutable_header()->set_protocol_version(kExchangeProtocolVersion);
  req.mutable_header()->set_cluster("b");
  req.mutable_header()->set_node("y:1");
  v1::PingResponse resp;
  const std::string refused = core.OnPing(req, &resp, Now{1, 1.7e9});
  EXPECT_NE(refused.find("belongs to another cluster"), std::string::npos) << refused;
  EXPECT_EQ(refused.find("\"a\""), std::string::npos) << "the refusal tells this cluster's name";
  req.mutable_header()->set_cluster("a");
  req.mutable_header()->set_protocol_version(7);
  EXPECT_NE(core.OnPing(req, &resp, Now{1, 1.7e9}).find("speaks exchange protocol 7"),
            std::string::npos);
  req.mutable_header()->set_protocol_version(kExchangeProtocolVersion);
  EXPECT_EQ(core.OnPing(req, &resp, Now{1, 1.7e9}), "");
  EXPECT_EQ(core.stats().errors, 2);
}

// A probe fails, but the member's own message came in while it was out (this node's connection
// to it was still being set up from when the network was down): alive, no indirect probes.
TEST(ExchangeCore, AProbeThatFailsAfterTheMemberWasHeardIsNoFailure) {
  ExchangeOptions o;
  o.cluster = "a";
  o.self = "x:1";
  o.peers = {"y:1", "z:1"};
  ExchangeCore core(o, 1, Now{0, 1.7e9});
  auto ping_from = [&](const std::string& node, double t) {
    v1::PingRequest req;
    req.mutable_header()->set_protocol_version(kExchangeProtocolVersion);
    req.mutable_header()->set_cluster("a");
    req.mutable_header()->set_node(node);
    v1::PingResponse resp;
    ASSERT_EQ(core.OnPing(req, &resp, Now{t, 1.7e9 + t}), "");
  };
  ping_from("y:1", 0.5);
  ping_from("z:1", 0.5);
  auto probe = [&](double t) {
    std::optional<std::string> target;
    for (int i = 0; i < 3 && target != "y:1"; ++i)
      target = core.OnPeriod(Now{t, 1.7e9 + t}, false).probe;
    ASSERT_EQ(target, "y:1");
  };
  probe(1);
  ping_from("y:1", 1.1);
  EXPECT_TRUE(
      core.OnPingDone("y:1", true, "connection timed out", {}, Now{1.2, 1.7e9 + 1.2}).empty());
  EXPECT_EQ(core.membership().Find("y:1")->direct_failures, 0);
  // Not heard while the next probe was out: a failure, and z is asked to try.
  probe(2);
  EXPECT_EQ(core.OnPingDone("y:1", true, "connection timed out", {}, Now{2.2, 1.7e9 + 2.2}),
            std::vector<std::string>{"z:1"});
  EXPECT_EQ(core.membership().Find("y:1")->direct_failures, 1);
}

// A member that answers under a new name every time (a key holder gone bad) replaces its one
// alias: the map of names stays bounded by the members, and the member keeps its own id.
TEST(ExchangeCore, APeerThatKeepsRenamingItselfCannotGrowTheAliases) {
  ExchangeOptions o;
  o.cluster = "a";
  o.self = "x:1";
  o.peers = {"y:1", "z:1"};
  ExchangeCore core(o, 1, Now{0, 1.7e9});
  for (int i = 0; i < 1000; ++i) {
    v1::PingResponse resp;
    resp.mutable_header()->set_protocol_version(kExchangeProtocolVersion);
    resp.mutable_header()->set_cluster("a");
    resp.mutable_header()->set_node("name-" + std::to_string(i) + ":1");
    const double t = 1 + i * 0.01;
    core.OnPingDone("y:1", false, "", resp, Now{t, 1.7e9 + t});
  }
  EXPECT_LE(core.alias_count(), 1u);
  EXPECT_NE(core.membership().Find("y:1"), nullptr);
  EXPECT_EQ(core.membership().members().size(), 2u);
  EXPECT_LE(core.TakeLog().size(), 1000u);
}

}  // namespace
}  // namespace trainscope::sidecar

namespace trainscope::sidecar {
namespace {

constexpr double kUnix = 1.7e9;

v1::PingRequest PingFrom(const std::string& node, uint64_t generation) {
  v1::PingRequest req;
  req.mutable_header()->set_protocol_version(kExchangeProtocolVersion);
  req.mutable_header()->set_cluster("c");
  req.mutable_header()->set_node(node);
  req.mutable_header()->set_generation(generation);
  return req;
}

ExchangeOptions ThreeNodes(const std::string& self) {
  ExchangeOptions o;
  o.cluster = "c";
  o.self = self;
  for (std::string id : {"a:1", "b:1", "m:1"}) {
    if (id != self) o.peers.push_back(id);
  }
  return o;
}

// What a process of the network (without the key, or a member lying) says in gossip: doubts
// naming a generation from the future, members from nowhere, records dated ahead, and a probe
// of an address that is no member. None of it changes what the node holds.
TEST(ExchangeCore, LiesInGossipChangeNothing) {
  ExchangeCore core(ThreeNodes("a:1"), 1, Now{0, kUnix});
  v1::PingResponse resp;
  const uint64_t now_ns = static_cast<uint64_t>(kUnix * 1e9);
  ASSERT_EQ(core.OnPing(PingFrom("b:1", now_ns), &resp, Now{1, kUnix}), "");
  v1::PingRequest lie = PingFrom("m:1", now_ns);
  v1::MemberUpdate* u = lie.mutable_gossip()->add_members();
  u->set_node("b:1");
  u->set_status(v1::MemberUpdate::SILENT);
  u->set_generation(~uint64_t{0});  // "a newer b, and it is silent"
  u->set_incarnation(1);
  v1::MemberUpdate* stranger = lie.mutable_gossip()->add_members();
  stranger->set_node("evil:1");
  stranger->set_status(v1::MemberUpdate::ALIVE);
  v1::NodeRecord* ahead = lie.mutable_gossip()->add_records();
  ahead->set_node("b:1");
  ahead->set_generation(now_ns);
  ahead->set_version(99);
  ahead->set_made_at(kUnix + 3600);
  v1::NodeRecord* nowhere = lie.mutable_gossip()->add_records();
  nowhere->set_node("evil:1");
  nowhere->set_version(1);
  ASSERT_EQ(core.OnPing(lie, &resp, Now{2, kUnix}), "");
  EXPECT_EQ(core.membership().Find("b:1")->status, MemberStatus::kAlive);
  EXPECT_EQ(core.membership().Find("evil:1"), nullptr) << "a member from nowhere";
  EXPECT_EQ(core.membership().members().size(), 2u);
  EXPECT_EQ(core.records().Find("b:1"), nullptr) << "a record dated an hour ahead";
  EXPECT_EQ(core.records().Find("evil:1"), nullptr);
  EXPECT_EQ(core.stats().records_refused, 2);
  // A sender whose own start time is in the future is refused whole.
  EXPECT_NE(core.OnPing(PingFrom("m:1", now_ns + uint64_t{3600} * 1000000000), &resp, Now{3, kUnix})
                .find("in the future"),
            std::string::npos);
  // Indirect probes only of members: no channel to anywhere on a stranger's word.
  v1::PingReqRequest probe;
  *probe.mutable_header() = PingFrom("b:1", now_ns).header();
  probe.set_target("unix:/run/something.sock");
  EXPECT_NE(core.OnPingReq(probe, Now{4, kUnix}).find("is not one"), std::string::npos);
  probe.set_target("m:1");
  std::string dial;
  EXPECT_EQ(core.OnPingReq(probe, Now{4, kUnix}, &dial), "");
  EXPECT_EQ(dial, "m:1");
}

// A node told it is silent or suspect refutes it, whatever generation the doubt names; others
// do not take a doubt about a generation they have not heard from the node itself.
TEST(ExchangeCore, ANodeRefutesDoubtsOfAnyGeneration) {
  const uint64_t gen = static_cast<uint64_t>(kUnix * 1e9);
  ExchangeCore b(ThreeNodes("b:1"), gen, Now{0, kUnix});
  v1::PingRequest lie = PingFrom("a:1", gen);
  v1::MemberUpdate* u = lie.mutable_gossip()->add_members();
  u->set_node("b:1");
  u->set_status(v1::MemberUpdate::SILENT);
  u->set_generation(gen + 5);
  u->set_incarnation(7);
  v1::PingResponse resp;
  ASSERT_EQ(b.OnPing(lie, &resp, Now{1, kUnix}), "");
  EXPECT_GT(b.membership().incarnation(), 7u) << "b raised its incarnation to refute";
  ExchangeCore a(ThreeNodes("a:1"), gen, Now{0, kUnix});
  ASSERT_EQ(a.OnPing(PingFrom("b:1", gen), &resp, Now{1, kUnix}), "");
  v1::PingRequest relay = PingFrom("m:1", gen);
  *relay.mutable_gossip()->add_members() = *u;
  ASSERT_EQ(a.OnPing(relay, &resp, Now{2, kUnix}), "");
  EXPECT_EQ(a.membership().Find("b:1")->status, MemberStatus::kAlive);
  EXPECT_EQ(a.membership().Find("b:1")->generation, gen);
}

}  // namespace
}  // namespace trainscope::sidecar
