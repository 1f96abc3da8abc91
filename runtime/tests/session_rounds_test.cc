// The rounds of CreateSession (session_rounds.h) with scripted answers and a fake clock: who is
// asked in each round, the backoff between rounds, the timeout naming who is missing and why,
// each wrong answer refused at once in words, and a stop.
#include "session_rounds.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "trainscope/runtime/version.h"

namespace trainscope {
namespace {

constexpr int kUnavailable = 14;

class SessionRoundsTest : public ::testing::Test {
 protected:
  SessionRoundsTest()
      : cluster_(*ClusterSpec::FromJobs(
            {{"ps", {"10.0.0.1:2222", "10.0.0.2:2222"}}, {"worker", {"10.0.0.3:2222"}}})) {
    options_.cluster_name = "run-1";
    options_.rpc_deadline_ms = 1000;
    identity_.set_protocol_version(kProtocolVersion);
  }

  // The identity ps:`index` answers with, as a right peer would.
  v1::TaskIdentity Right(int index) const {
    v1::TaskIdentity id;
    id.mutable_task()->set_role("ps");
    id.mutable_task()->set_index(index);
    id.set_cluster_name("run-1");
    id.set_runtime_version(kRuntimeVersion);
    id.set_protocol_version(kProtocolVersion);
    id.set_cluster_fingerprint(cluster_.Fingerprint());
    id.set_incarnation(100 + index);
    return id;
  }

  static HandshakeAnswer Answer(const v1::TaskIdentity& id) {
    HandshakeAnswer a;
    *a.response.mutable_identity() = id;
    return a;
  }
  static HandshakeAnswer Refused() { return {kUnavailable, "Connection refused", {}}; }

  // Runs the rounds; `answer(round, peer)` says what ps:peer answers in that round (from 0).
  absl::Status Run(std::function<HandshakeAnswer(int round, int peer)> answer) {
    std::vector<SessionRounds::Peer> peers;
    for (int i = 0; i < 2; ++i) {
      TaskRef ref{"ps", i};
      const std::string address = *cluster_.AddressOf(ref);
      peers.push_back({ref, address, status_.Peer(ref, address)});
    }
    auto round = [&](const std::vector<int>& pending, int deadline_ms) {
      asked_.push_back(pending);
      deadlines_.push_back(deadline_ms);
      std::vector<HandshakeAnswer> answers;
      for (int peer : pending) answers.push_back(answer(static_cast<int>(asked_.size()) - 1, peer));
      now_ += 0.01;
      return answers;
    };
    SessionRounds::Clock clock{[this] { return now_; },
                               [this](int64_t ms) {
                                 sleeps_.push_back(ms);
                                 now_ += ms / 1000.0;
                               }};
    SessionRounds rounds(options_, TaskRef{"worker", 0}, cluster_, identity_, std::move(peers),
                         round, clock, &status_, [this] {
                           return stop_after_rounds_ >= 0 &&
                                  static_cast<int>(asked_.size()) >= stop_after_rounds_;
                         });
    return rounds.Run();
  }

  RuntimeOptions options_;
  ClusterSpec cluster_;
  v1::TaskIdentity identity_;
  TaskStatus status_;
  double now_ = 1000;
  std::vector<std::vector<int>> asked_;
  std::vector<int> deadlines_;
  std::vector<int64_t> sleeps_;
  int stop_after_rounds_ = -1;
};

TEST_F(SessionRoundsTest, EveryPsAnsweringInTheFirstRoundIsASession) {
  EXPECT_TRUE(Run([&](int, int peer) { return Answer(Right(peer)); }).ok());
  EXPECT_EQ(asked_, (std::vector<std::vector<int>>{{0, 1}}));
  EXPECT_TRUE(sleeps_.empty());
  EXPECT_EQ(status_.Read().phase, Phase::kCreatingSession);  // The task sets kTraining after.
  EXPECT_FALSE(status_.Read().waiting);
}

TEST_F(SessionRoundsTest, AFailedHandshakeIsRetriedAloneWithAGrowingBackoff) {
  const absl::Status st = Run([&](int round, int peer) {
    return peer == 1 && round < 6 ? Refused() : Answer(Right(peer));
  });
  EXPECT_TRUE(st.ok()) << st;
  ASSERT_EQ(asked_.size(), 7u);
  EXPECT_EQ(asked_[0], (std::vector<int>{0, 1}));
  for (size_t r = 1; r < asked_.size(); ++r) EXPECT_EQ(asked_[r], std::vector<int>{1}) << r;
  // 100 ms times 1.5 each round, each within 20% either way (jitter).
  ASSERT_EQ(sleeps_.size(), 6u);
  double nominal = 100;
  for (int64_t slept : sleeps_) {
    EXPECT_GE(slept, std::floor(nominal * 0.8)) << nominal;
    EXPECT_LE(slept, std::ceil(nominal * 1.2)) << nominal;
    nominal *= 1.5;
  }
  // The deadline of one attempt: --rpc_deadline_ms, within [200 ms, 2 s].
  EXPECT_EQ(deadlines_[0], 1000);
}

TEST_F(SessionRoundsTest, TheBackoffStopsGrowingAtOneSecond) {
  options_.session_timeout_s = 0;  // Wait forever; the answer comes in round 12.
  EXPECT_TRUE(Run([&](int round, int peer) {
                return peer == 1 && round < 12 ? Refused() : Answer(Right(peer));
              }).ok());
  EXPECT_LE(*std::max_element(sleeps_.begin(), sleeps_.end()), 1000);
  EXPECT_GE(sleeps_.back(), 800);
}

TEST_F(SessionRoundsTest, TheTimeoutNamesWhoIsMissingAndItsLastError) {
  options_.session_timeout_s = 5;
  const absl::Status st =
      Run([&](int, int peer) { return peer == 1 ? Refused() : Answer(Right(peer)); });
  EXPECT_EQ(st.code(), absl::StatusCode::kDeadlineExceeded) << st;
  EXPECT_NE(st.message().find("worker:0 gave up on CreateSession after 5 s"), std::string::npos)
      << st;
  EXPECT_NE(st.message().find("still missing ps:1 at 10.0.0.2:2222 (connection refused"),
            std::string::npos)
      << st;
  EXPECT_EQ(st.message().find("ps:0"), std::string::npos) << st;  // It answered.
  EXPECT_GE(now_ - 1000, 5.0);
  EXPECT_LT(now_ - 1000, 7.0);  // Not much past the timeout.
}

TEST_F(SessionRoundsTest, AnotherTaskAtThePsAddressEndsTheSessionAtOnce) {
  const absl::Status st = Run([&](int, int peer) { return Answer(Right(peer == 0 ? 1 : 1)); });
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  EXPECT_NE(st.message().find("worker:0 expected ps:0 at 10.0.0.1:2222 but found ps:1 there"),
            std::string::npos)
      << st;
  EXPECT_EQ(asked_.size(), 1u);
}

TEST_F(SessionRoundsTest, AnotherVersionEndsTheSessionSayingBoth) {
  const absl::Status st = Run([&](int, int peer) {
    v1::TaskIdentity id = Right(peer);
    if (peer == 1) id.set_protocol_version(kProtocolVersion + 1);
    return Answer(id);
  });
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  EXPECT_NE(st.message().find("version mismatch"), std::string::npos) << st;
  EXPECT_NE(st.message().find("ps:1 at 10.0.0.2:2222 runs runtime"), std::string::npos) << st;
}

TEST_F(SessionRoundsTest, AnotherClusterSpecEndsTheSessionSayingHowTheyDiffer) {
  const absl::Status st = Run([&](int, int peer) {
    v1::TaskIdentity id = Right(peer);
    id.set_cluster_fingerprint("0123");
    v1::JobSpec* ps = id.add_cluster();
    ps->set_name("ps");
    ps->add_addresses("10.0.0.1:2222");
    v1::JobSpec* worker = id.add_cluster();
    worker->set_name("worker");
    worker->add_addresses("10.0.0.3:2222");
    return Answer(id);
  });
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  EXPECT_NE(st.message().find("the cluster specs differ between worker:0 and ps:0"),
            std::string::npos)
      << st;
  EXPECT_NE(st.message().find("same TF_CONFIG"), std::string::npos) << st;
}

TEST_F(SessionRoundsTest, AnotherClusterNameMeansTwoRunsShareTheAddresses) {
  const absl::Status st = Run([&](int, int peer) {
    v1::TaskIdentity id = Right(peer);
    id.set_cluster_name("run-2");
    return Answer(id);
  });
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  EXPECT_NE(st.message().find("belongs to cluster 'run-1' but ps:0 at 10.0.0.1:2222 belongs to "
                              "cluster 'run-2'"),
            std::string::npos)
      << st;
}

TEST_F(SessionRoundsTest, AStopEndsTheRoundsCancelled) {
  stop_after_rounds_ = 3;
  const absl::Status st = Run([&](int, int) { return Refused(); });
  EXPECT_EQ(st.code(), absl::StatusCode::kCancelled) << st;
  EXPECT_EQ(asked_.size(), 3u);
}

TEST_F(SessionRoundsTest, APeerThatAnsweredIsRecordedWithItsIdentity) {
  EXPECT_TRUE(Run([&](int round, int peer) {
                return round == 0 && peer == 0 ? Refused() : Answer(Right(peer));
              }).ok());
  const PeerHealth::Snapshot ps0 = status_.Peer({"ps", 0}, "10.0.0.1:2222")->Read();
  EXPECT_TRUE(ps0.connected);
  EXPECT_EQ(ps0.peer_incarnation, 100u);
  EXPECT_EQ(ps0.consecutive_failures, 0);
}

}  // namespace
}  // namespace trainscope
