// SWIM membership with injected time: probe order, suspicion and its timeout, refutation,
// indirect reachability (a cut link), a cut-off node, and news for the gossip.
#include "trainscope/sidecar/membership.h"

#include <gtest/gtest.h>

#include <set>

namespace trainscope::sidecar {
namespace {

using v1::MemberUpdate;

v1::Header HeaderOf(const std::string& node, uint64_t generation = 1, uint64_t incarnation = 0) {
  v1::Header h;
  h.set_node(node);
  h.set_generation(generation);
  h.set_incarnation(incarnation);
  return h;
}

MemberUpdate Update(const std::string& node, MemberUpdate::Status status, uint64_t incarnation,
                    uint64_t generation = 1) {
  MemberUpdate u;
  u.set_node(node);
  u.set_status(status);
  u.set_incarnation(incarnation);
  u.set_generation(generation);
  return u;
}

class MembershipTest : public ::testing::Test {
 protected:
  Membership Make(std::vector<std::string> peers) {
    return Membership("a:1", "a", 7, std::move(peers), options_, 0, 42);
  }
  MembershipOptions options_;
};

TEST_F(MembershipTest, ProbesEveryMemberOncePerRound) {
  Membership m = Make({"b:1", "c:1", "d:1", "a:1"});
  EXPECT_EQ(m.members().size(), 3u);  // Self is not a member.
  for (int round = 0; round < 3; ++round) {
    std::set<std::string> seen;
    for (int i = 0; i < 3; ++i) seen.insert(*m.NextProbeTarget());
    EXPECT_EQ(seen, (std::set<std::string>{"b:1", "c:1", "d:1"}));
  }
}

TEST_F(MembershipTest, FailedProbeAnsweredThroughOthersIsACutLinkNotASuspicion) {
  Membership m = Make({"b:1", "c:1"});
  m.OnContact(HeaderOf("b:1"), 0.1);
  m.OnContact(HeaderOf("c:1"), 0.1);
  for (double t : {1.0, 2.0}) {
    m.OnDirectFailure("b:1", "connection lost", t);
    EXPECT_EQ(m.IndirectHelpers("b:1", 3), std::vector<std::string>{"c:1"});
    m.OnIndirectResult("b:1", /*reached=*/true, t + 0.2);
  }
  EXPECT_EQ(m.Find("b:1")->status, MemberStatus::kAlive);
  EXPECT_EQ(m.UnreachableDirectly(), std::vector<std::string>{"b:1"});
  // A direct answer heals the link.
  m.OnContact(HeaderOf("b:1"), 3);
  EXPECT_TRUE(m.UnreachableDirectly().empty());
}

TEST_F(MembershipTest, SuspectThenSilentAfterTheTimeoutUnlessRefuted) {
  Membership m = Make({"b:1", "c:1"});
  m.OnContact(HeaderOf("b:1"), 0.1);
  m.OnContact(HeaderOf("c:1"), 1.4);
  m.TakeUpdates();
  m.OnDirectFailure("b:1", "no answer within 250 ms", 1);
  m.OnIndirectResult("b:1", /*reached=*/false, 1.5);
  EXPECT_EQ(m.Find("b:1")->status, MemberStatus::kSuspect);
  auto news = m.TakeUpdates();
  ASSERT_EQ(news.size(), 1u);
  EXPECT_EQ(news[0].status(), MemberUpdate::SUSPECT);
  // Not confirmed before this node has heard from anyone since (it might be the one cut off).
  m.Tick(1.5 + m.SuspicionTimeout());
  EXPECT_EQ(m.Find("b:1")->status, MemberStatus::kSuspect);
  m.OnContact(HeaderOf("c:1"), 1.6);
  m.Tick(1.5 + m.SuspicionTimeout() - 0.01);
  EXPECT_EQ(m.Find("b:1")->status, MemberStatus::kSuspect);
  m.Tick(1.5 + m.SuspicionTimeout());
  EXPECT_EQ(m.Find("b:1")->status, MemberStatus::kSilent);
  news = m.TakeUpdates();
  ASSERT_EQ(news.size(), 1u);
  EXPECT_EQ(news[0].status(), MemberUpdate::SILENT);
  // b refutes with a higher incarnation: alive again, and the news spreads.
  m.OnUpdate(Update("b:1", MemberUpdate::ALIVE, 1), 5);
  EXPECT_EQ(m.Find("b:1")->status, MemberStatus::kAlive);
  EXPECT_EQ(m.TakeUpdates().size(), 1u);
  // Old news about b does not undo it.
  m.OnUpdate(Update("b:1", MemberUpdate::SUSPECT, 0), 6);
  EXPECT_EQ(m.Find("b:1")->status, MemberStatus::kAlive);
}

TEST_F(MembershipTest, OthersSuspicionsConfirmSooner) {
  Membership m = Make({"b:1", "c:1", "d:1"});
  for (const char* id : {"b:1", "c:1", "d:1"}) m.OnContact(HeaderOf(id), 0);
  m.OnContact(HeaderOf("c:1"), 0.9);
  m.OnDirectFailure("b:1", "no answer within 250 ms", 1);
  m.OnIndirectResult("b:1", false, 1);
  m.OnContact(HeaderOf("d:1"), 1.05);
  // c and d suspect b too: a third of the timeout (floored).
  m.OnUpdate(Update("b:1", MemberUpdate::SUSPECT, 0), 1.1, "c:1");
  m.OnUpdate(Update("b:1", MemberUpdate::SUSPECT, 0), 1.1, "c:1");  // Counted once.
  m.OnUpdate(Update("b:1", MemberUpdate::SUSPECT, 0), 1.1, "d:1");
  const double expected = std::max(options_.suspicion_floor_s, m.SuspicionTimeout() / 3);
  m.Tick(1 + expected - 0.01);
  EXPECT_EQ(m.Find("b:1")->status, MemberStatus::kSuspect);
  m.Tick(1 + expected);
  EXPECT_EQ(m.Find("b:1")->status, MemberStatus::kSilent);
}

TEST_F(MembershipTest, MissedProbesSlowThisNodeDownAndAnswersSpeedItUp) {
  Membership m = Make({"b:1"});
  EXPECT_EQ(m.HealthMultiplier(), 1);
  for (int i = 0; i < 20; ++i) m.OnProbeMissed();
  EXPECT_EQ(m.HealthMultiplier(), 9);  // Capped at 1 + max_local_health.
  m.OnProbeAnswered();
  m.OnProbeAnswered();
  EXPECT_EQ(m.HealthMultiplier(), 7);
  m.OnUpdate(Update("a:1", MemberUpdate::SUSPECT, 0, 7), 1);  // Doubted: slow down.
  EXPECT_EQ(m.HealthMultiplier(), 8);
}

TEST_F(MembershipTest, AMemberNeverHeardFromIsNotSuspected) {
  Membership m = Make({"b:1"});
  m.OnDirectFailure("b:1", "connection refused", 1);
  m.OnIndirectResult("b:1", false, 1);
  EXPECT_EQ(m.Find("b:1")->status, MemberStatus::kAlive);
  EXPECT_FALSE(m.Find("b:1")->heard);
  EXPECT_TRUE(m.TakeUpdates().empty());
}

TEST_F(MembershipTest, RefutesSuspicionOfItself) {
  Membership m = Make({"b:1"});
  EXPECT_EQ(m.incarnation(), 0u);
  m.OnUpdate(Update("a:1", MemberUpdate::SUSPECT, 0, 7), 1);
  EXPECT_EQ(m.incarnation(), 1u);
  auto news = m.TakeUpdates();
  ASSERT_EQ(news.size(), 1u);
  EXPECT_EQ(news[0].node(), "a:1");
  EXPECT_EQ(news[0].status(), MemberUpdate::ALIVE);
  EXPECT_EQ(news[0].incarnation(), 1u);
  // Suspicion of an earlier instance of this node (another generation) is not about it.
  m.OnUpdate(Update("a:1", MemberUpdate::SILENT, 5, 6), 2);
  EXPECT_EQ(m.incarnation(), 1u);
}

TEST_F(MembershipTest, TellsADoubtedMemberSoItCanRefute) {
  Membership m = Make({"b:1", "c:1"});
  m.OnContact(HeaderOf("b:1"), 0);
  m.OnUpdate(Update("b:1", MemberUpdate::SILENT, 0), 1);
  auto hint = m.HintFor("b:1");
  ASSERT_TRUE(hint.has_value());
  EXPECT_EQ(hint->status(), MemberUpdate::SILENT);
  EXPECT_FALSE(m.HintFor("c:1").has_value());
  // Direct contact: alive here at once, and b still learns what others think until it refutes.
  m.OnContact(HeaderOf("b:1"), 2);
  EXPECT_EQ(m.Find("b:1")->status, MemberStatus::kAlive);
}

TEST_F(MembershipTest, ANewGenerationIsANewInstance) {
  Membership m = Make({"b:1"});
  m.OnContact(HeaderOf("b:1", 1, 5), 0);
  m.OnUpdate(Update("b:1", MemberUpdate::SILENT, 5, 1), 1);
  EXPECT_EQ(m.Find("b:1")->status, MemberStatus::kSilent);
  m.OnUpdate(Update("b:1", MemberUpdate::ALIVE, 0, 2), 2);  // Restarted: incarnation 0 again.
  EXPECT_EQ(m.Find("b:1")->status, MemberStatus::kAlive);
  EXPECT_EQ(m.Find("b:1")->generation, 2u);
}

TEST_F(MembershipTest, CutOffWhenNoMemberAnswersForAWhile) {
  Membership m = Make({"b:1", "c:1", "d:1", "e:1"});
  EXPECT_FALSE(m.IsolatedSince(10).has_value());  // Never reached anyone: maybe not started.
  for (const char* id : {"b:1", "c:1", "d:1", "e:1"}) m.OnContact(HeaderOf(id), 1);
  m.OnDirectFailure("b:1", "connection lost", 1.2);
  m.OnDirectFailure("c:1", "connection lost", 1.4);
  EXPECT_FALSE(m.IsolatedSince(2.5).has_value());  // Only two members tried.
  m.OnDirectFailure("d:1", "connection lost", 1.6);
  EXPECT_FALSE(m.IsolatedSince(1.5).has_value());  // Not long enough.
  ASSERT_TRUE(m.IsolatedSince(2.5).has_value());
  EXPECT_DOUBLE_EQ(*m.IsolatedSince(2.5), 1);
  // While cut off, its doubts about others stay its own.
  m.OnIndirectResult("b:1", false, 2.5);
  m.Tick(2.5);
  for (const MemberUpdate& u : m.TakeUpdates()) EXPECT_EQ(u.node(), "a:1");
  // One answer and it is back.
  m.OnContact(HeaderOf("c:1"), 3);
  EXPECT_FALSE(m.IsolatedSince(3.5).has_value());
}

TEST_F(MembershipTest, WhatACutOffNodeDoubtedIsForgivenWhenItIsBack) {
  Membership m = Make({"b:1", "c:1", "d:1"});
  for (const char* id : {"b:1", "c:1", "d:1"}) m.OnContact(HeaderOf(id), 1);
  // Cut off at 1: every probe fails; b is suspected, but never confirmed silent by a node that
  // hears from nobody.
  for (const char* id : {"b:1", "c:1", "d:1"}) m.OnDirectFailure(id, "network is unreachable", 1.3);
  m.OnIndirectResult("b:1", false, 1.5);
  m.Tick(1.5 + 2 * m.SuspicionTimeout());
  ASSERT_EQ(m.Find("b:1")->status, MemberStatus::kSuspect);
  ASSERT_TRUE(m.IsolatedSince(2.5).has_value());
  // Back: c answers. b is alive again in its view: probed afresh before it is doubted again
  // (this node was the one cut off).
  m.OnContact(HeaderOf("c:1"), 3);
  EXPECT_EQ(m.Find("b:1")->status, MemberStatus::kAlive);
  EXPECT_LT(m.Find("b:1")->back_since, 0);  // Forgiven; it was not b that was away.
  EXPECT_DOUBLE_EQ(m.back_since(), 3);      // It was this node.
  EXPECT_EQ(m.Find("d:1")->status, MemberStatus::kAlive);
  for (const MemberUpdate& u : m.TakeUpdates()) EXPECT_EQ(u.node(), "a:1");
  // b answers: alive.
  m.OnContact(HeaderOf("b:1"), 3.1);
  EXPECT_EQ(m.Find("b:1")->status, MemberStatus::kAlive);
}

TEST_F(MembershipTest, AMemberDoubtedAndThenHeardIsBackSinceThen) {
  Membership m = Make({"b:1", "c:1", "d:1"});
  for (const char* id : {"b:1", "c:1", "d:1"}) m.OnContact(HeaderOf(id), 1);
  EXPECT_LT(m.Find("b:1")->back_since, 0);
  m.OnDirectFailure("b:1", "connection timed out", 1.2);
  m.OnContact(HeaderOf("c:1"), 1.4);  // This node hears from others all along.
  m.OnIndirectResult("b:1", false, 1.5);
  ASSERT_EQ(m.Find("b:1")->status, MemberStatus::kSuspect);
  m.OnContact(HeaderOf("d:1"), 1.8);
  m.OnContact(HeaderOf("b:1"), 2);
  EXPECT_EQ(m.Find("b:1")->status, MemberStatus::kAlive);
  EXPECT_DOUBLE_EQ(m.Find("b:1")->back_since, 2);
  EXPECT_LT(m.back_since(), 0);  // This node heard from others all along.
}

TEST_F(MembershipTest, AnAnswerWhileTheHelpersProbeOutdatesTheirNo) {
  Membership m = Make({"b:1", "c:1"});
  for (const char* id : {"b:1", "c:1"}) m.OnContact(HeaderOf(id), 1);
  // b's sidecar was killed: the direct probe is refused, and c is asked to try.
  m.OnDirectFailure("b:1", "connection refused", 1.2);
  // b starts again and is heard from before c's answer (its own attempt refused too) is back.
  m.OnContact(HeaderOf("b:1"), 1.3);
  m.OnIndirectResult("b:1", false, 1.4);
  EXPECT_EQ(m.Find("b:1")->status, MemberStatus::kAlive);
  // Not heard since the next failed probe, refused and not reached through c: its sidecar is
  // down (silent at once, see ARefusedProbeThatNoHelperGetsThroughIsDownAtOnce).
  m.OnDirectFailure("b:1", "connection refused", 1.5);
  m.OnIndirectResult("b:1", false, 1.7);
  EXPECT_EQ(m.Find("b:1")->status, MemberStatus::kSilent);
}

TEST_F(MembershipTest, ANodeATaskWaitsOnIsProbedNextOncePerGap) {
  Membership m = Make({"10.0.0.2:4317", "10.0.0.3:4317", "10.0.0.4:4317"});
  m.ProbeSoon("10.0.0.3", 1);
  EXPECT_EQ(*m.NextProbeTarget(), "10.0.0.3:4317");
  m.ProbeSoon("10.0.0.3", 1.5);  // Within a second of the last: the round as usual.
  m.ProbeSoon("10.0.0.9", 1.5);  // No such member.
  std::set<std::string> round;
  for (int i = 0; i < 3; ++i) round.insert(*m.NextProbeTarget());
  EXPECT_EQ(round.size(), 3u);
  m.ProbeSoon("10.0.0.3", 2.1);
  EXPECT_EQ(*m.NextProbeTarget(), "10.0.0.3:4317");
}

TEST_F(MembershipTest, HelpersThatDoNotAnswerCountAsTriedForBeingCutOff) {
  Membership m = Make({"b:1", "c:1", "d:1"});
  for (const char* id : {"b:1", "c:1", "d:1"}) m.OnContact(HeaderOf(id), 1);
  m.OnDirectFailure("b:1", "network is unreachable", 1.1);
  m.OnUnanswered("c:1");
  EXPECT_FALSE(m.IsolatedSince(2).has_value());  // Two of three tried.
  m.OnUnanswered("d:1");
  EXPECT_TRUE(m.IsolatedSince(2).has_value());
}

TEST_F(MembershipTest, PeersThatAnswerAsSomethingElseDoNotMakeThisNodeCutOff) {
  // --peer_sidecars names two ports where no sidecar answers (one refuses, one speaks HTTP/1),
  // and the one real sidecar is down: that is not this node cut off from the network.
  Membership m = Make({"b:1", "c:1", "d:1"});
  m.OnContact(HeaderOf("d:1"), 1);
  m.OnDirectFailure("b:1", "connection refused", 1.1);
  m.OnOtherAnswer("b:1", 1.1);
  m.OnDirectFailure("c:1", "an HTTP/1 server answers there, not gRPC (wrong port?)", 1.2);
  m.OnOtherAnswer("c:1", 1.2);
  m.OnDirectFailure("d:1", "connection timed out", 1.3);
  EXPECT_FALSE(m.IsolatedSince(2).has_value());
  m.OnDirectFailure("b:1", "connection refused", 4.8);  // The next round.
  m.OnOtherAnswer("b:1", 4.8);
  EXPECT_FALSE(m.IsolatedSince(5).has_value());
  // Its link goes down: now nothing answers.
  m.OnDirectFailure("b:1", "network is unreachable", 5.1);
  m.OnDirectFailure("c:1", "network is unreachable", 5.2);
  EXPECT_FALSE(m.IsolatedSince(5.3).has_value());  // 0.5 s since the last answer: not yet.
  ASSERT_TRUE(m.IsolatedSince(5.5).has_value());
  EXPECT_DOUBLE_EQ(*m.IsolatedSince(5.5), 4.8);
}

// A sidecar killed while this node's probe was out: the probe fails "connection reset by peer";
// the next call to it is refused. That newer word is the member's: its machine answers, only its
// sidecar is down (the view says down, and no node is paged cut off). An alive member's word
// stays its own.
TEST_F(MembershipTest, ALaterRefusalIsTheLastErrorOfAMemberInDoubt) {
  Membership m = Make({"b:1", "c:1"});
  m.OnContact(HeaderOf("b:1"), 1);
  m.OnContact(HeaderOf("c:1"), 1);
  m.OnDirectFailure("b:1", "connection reset by peer", 1.2);
  m.OnIndirectResult("b:1", false, 1.5);
  ASSERT_EQ(m.Find("b:1")->status, MemberStatus::kSuspect);
  m.OnOtherAnswer("b:1", 1.6, "connection refused");
  EXPECT_EQ(m.Find("b:1")->last_error, "connection refused");
  m.OnUnanswered("c:1", "no answer within 200 ms");
  EXPECT_EQ(m.Find("c:1")->last_error, "");
}

// A refused probe that no helper gets through either: the machine answered and nothing listens,
// so its sidecar is down now, with no suspicion to wait out. A probe that timed out is a doubt.
TEST_F(MembershipTest, ARefusedProbeThatNoHelperGetsThroughIsDownAtOnce) {
  Membership m = Make({"b:1", "c:1", "d:1"});
  for (const char* id : {"b:1", "c:1", "d:1"}) m.OnContact(HeaderOf(id), 1);
  m.OnDirectFailure("b:1", "connection refused", 1.2);
  m.OnIndirectResult("b:1", false, 1.25);
  EXPECT_EQ(m.Find("b:1")->status, MemberStatus::kSilent);
  m.OnDirectFailure("c:1", "no answer within 200 ms", 1.2);
  m.OnIndirectResult("c:1", false, 1.45);
  EXPECT_EQ(m.Find("c:1")->status, MemberStatus::kSuspect);
  // Refused, but a helper got through (a rule on this path only): alive.
  m.OnDirectFailure("d:1", "connection refused", 1.2);
  m.OnIndirectResult("d:1", true, 1.25);
  EXPECT_EQ(m.Find("d:1")->status, MemberStatus::kAlive);
  // Others learn the refusal with the news: its sidecar is down, not its node cut off.
  Membership other = Make({"b:1", "c:1"});
  other.OnContact(HeaderOf("b:1"), 1);
  other.OnDirectFailure("b:1", "connection reset by peer", 1.2);
  for (const auto& u : m.TakeUpdates()) other.OnUpdate(u, 1.3, "a:1");
  EXPECT_EQ(other.Find("b:1")->status, MemberStatus::kSilent);
  EXPECT_TRUE(SaysRefused(other.Find("b:1")->last_error));
  // Heard of only by the news, never reached: the refusal may be this node's channel's, from an
  // attempt before its sidecar started. A doubt, not down.
  Membership fresh = Make({"e:1", "f:1"});
  MemberUpdate alive;
  alive.set_node("e:1");
  alive.set_generation(2);
  alive.set_status(MemberUpdate::ALIVE);
  fresh.OnUpdate(alive, 1.1, "f:1");
  ASSERT_TRUE(fresh.Find("e:1")->heard);
  fresh.OnDirectFailure("e:1", "connection refused", 1.2);
  fresh.OnIndirectResult("e:1", false, 1.25);
  EXPECT_EQ(fresh.Find("e:1")->status, MemberStatus::kSuspect);
}

// A one-way cut: b's messages reach this node, this node's do not reach b. b's requests prove b
// alive and the way from it, not the way to it: the cut link stands until b answers a call.
// A probe that fails while b's messages come in is excused once, not again.
TEST_F(MembershipTest, ARequestFromAMemberDoesNotUndoACutLinkToIt) {
  Membership m = Make({"b:1", "c:1"});
  m.OnContact(HeaderOf("b:1"), 1);
  m.OnContact(HeaderOf("c:1"), 1);
  EXPECT_TRUE(m.Excuse("b:1"));
  EXPECT_FALSE(m.Excuse("b:1"));
  m.OnDirectFailure("b:1", "no answer within 200 ms", 1.2);
  m.OnIndirectResult("b:1", /*reached=*/true, 1.45);
  EXPECT_EQ(m.UnreachableDirectly(), std::vector<std::string>{"b:1"});
  m.OnContact(HeaderOf("b:1"), 1.5, /*reply=*/false);
  EXPECT_EQ(m.UnreachableDirectly(), std::vector<std::string>{"b:1"});
  EXPECT_EQ(m.Find("b:1")->status, MemberStatus::kAlive);
  // Its request came after the failed probe: the helpers' later "no" is stale.
  m.OnDirectFailure("b:1", "no answer within 200 ms", 2.0);
  m.OnContact(HeaderOf("b:1"), 2.1, /*reply=*/false);
  m.OnIndirectResult("b:1", /*reached=*/false, 2.25);
  EXPECT_EQ(m.Find("b:1")->status, MemberStatus::kAlive);
  // It answers a call: the way there works again, and a failure may be excused again.
  m.OnContact(HeaderOf("b:1"), 3);
  EXPECT_TRUE(m.UnreachableDirectly().empty());
  EXPECT_TRUE(m.Excuse("b:1"));
}

TEST_F(MembershipTest, LeavingIsNewsAndLeftMembersAreNotProbed) {
  Membership m = Make({"b:1", "c:1"});
  m.Leave();
  auto news = m.TakeUpdates();
  ASSERT_EQ(news.size(), 1u);
  EXPECT_EQ(news[0].status(), MemberUpdate::LEFT);
  m.OnUpdate(Update("b:1", MemberUpdate::LEFT, 0), 1);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(*m.NextProbeTarget(), "c:1");
}

// Members are the spec's and --peer_sidecars': a stranger's message or news of one adds nothing
// (else anyone could make a node probe, keep and show whatever it names).
TEST_F(MembershipTest, StrangersAreNotAddedAndTimeoutsGrowSlowlyWithTheCluster) {
  Membership small = Make({"b:1"});
  small.OnContact(HeaderOf("z:9"), 0);
  v1::MemberUpdate news;
  news.set_node("y:9");
  news.set_status(v1::MemberUpdate::ALIVE);
  small.OnUpdate(news, 0, "b:1");
  EXPECT_EQ(small.Find("z:9"), nullptr);
  EXPECT_EQ(small.Find("y:9"), nullptr);
  EXPECT_EQ(small.members().size(), 1u);
  std::vector<std::string> many;
  for (int i = 0; i < 1100; ++i) many.push_back("n" + std::to_string(i) + ":1");
  Membership big = Make(many);
  EXPECT_EQ(small.SuspicionTimeout(), options_.suspicion_min_s);
  EXPECT_NEAR(big.SuspicionTimeout(), 4 * 3.04 * 0.2, 0.01);
  EXPECT_EQ(small.RetransmitLimit(), 6);
  EXPECT_EQ(big.RetransmitLimit(), 24);
}

}  // namespace
}  // namespace trainscope::sidecar
