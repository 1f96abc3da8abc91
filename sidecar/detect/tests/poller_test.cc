// Heartbeat answers as the poller decodes them (DecodeHeartbeatAnswer, which the heartbeat
// fuzzer drives too): bytes that do not parse and answers without identity are bad answers,
// everything from the wire is bounded, and numbers that make no sense are tamed.
#include "trainscope/sidecar/poller.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "trainscope/v1/runtime.pb.h"

namespace trainscope::sidecar {
namespace {

namespace rpb = ::trainscope::v1;

rpb::HeartbeatResponse Answer() {
  rpb::HeartbeatResponse r;
  r.mutable_identity()->set_cluster_name("demo");
  r.mutable_identity()->mutable_task()->set_role("worker");
  r.mutable_identity()->mutable_task()->set_index(1);
  r.set_phase(rpb::PHASE_TRAINING);
  r.set_steps(42);
  return r;
}

TEST(DecodeHeartbeatAnswer, AValidAnswerBecomesAHeartbeat) {
  PollResult r = DecodeHeartbeatAnswer(Answer().SerializeAsString(), 1.0, 1.5);
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.sent_s, 1.0);
  EXPECT_EQ(r.received_s, 1.5);
  EXPECT_EQ(r.heartbeat.cluster_name, "demo");
  EXPECT_EQ(r.heartbeat.task, (TaskRef{"worker", 1}));
  EXPECT_EQ(r.heartbeat.phase, "training");
  EXPECT_EQ(r.heartbeat.steps, 42);
}

TEST(DecodeHeartbeatAnswer, GarbageAndAnswersWithoutIdentityAreBadAnswers) {
  for (const std::string& bytes : {std::string("\xff\xff\xff garbage"), std::string()}) {
    PollResult r = DecodeHeartbeatAnswer(bytes, 0, 0);
    EXPECT_FALSE(r.ok);
    EXPECT_EQ(r.failure, FailureKind::kBadAnswer);
    EXPECT_FALSE(r.error.empty());
  }
}

TEST(DecodeHeartbeatAnswer, BoundsStringsAndPeersAndTamesNumbers) {
  rpb::HeartbeatResponse a = Answer();
  a.mutable_identity()->set_hostname(std::string(100000, 'h'));
  for (int i = 0; i < 5000; ++i) {
    rpb::PeerView* p = a.add_peers();
    p->set_latency_seconds(std::numeric_limits<double>::quiet_NaN());
    p->set_step_share(7);
  }
  a.mutable_serving()->set_calls(-5);
  PollResult r = DecodeHeartbeatAnswer(a.SerializeAsString(), 0, 0);
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_LE(r.heartbeat.hostname.size(), 512u);
  EXPECT_EQ(r.heartbeat.peers.size(), 4096u);
  EXPECT_EQ(r.heartbeat.peers[0].latency_seconds, 0);
  EXPECT_EQ(r.heartbeat.peers[0].step_share, 1);
  EXPECT_EQ(r.heartbeat.served_calls, 0);
}

}  // namespace
}  // namespace trainscope::sidecar
