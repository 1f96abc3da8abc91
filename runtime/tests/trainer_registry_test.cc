// Which trainers are done (trainer_registry.h): a Done is taken only from a trainer of the spec
// that handshook at that incarnation, counted once, and a ps waits for all of them or a stop.
#include "trainer_registry.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

namespace trainscope {
namespace {

class TrainerRegistryTest : public ::testing::Test {
 protected:
  TrainerRegistryTest()
      : cluster_(*ClusterSpec::FromJobs({{"ps", {"h:1"}},
                                         {"worker", {"h:2", "h:3"}},
                                         {"chief", {"h:4"}},
                                         {"evaluator", {"h:5"}}})),
        registry_(cluster_, TaskRef{"ps", 0}) {}

  ClusterSpec cluster_;
  TrainerRegistry registry_;
};

TEST_F(TrainerRegistryTest, WorkersAndTheChiefTrainTheEvaluatorAndPsDoNot) {
  EXPECT_EQ(registry_.trainers(), 3);
  EXPECT_TRUE(IsTrainer("worker"));
  EXPECT_TRUE(IsTrainer("chief"));
  EXPECT_FALSE(IsTrainer("ps"));
  EXPECT_FALSE(IsTrainer("evaluator"));
}

TEST_F(TrainerRegistryTest, DoneCountsDownOncePerTrainer) {
  registry_.RecordHandshake({"worker", 0}, 7);
  registry_.RecordHandshake({"chief", 0}, 9);
  EXPECT_EQ(*registry_.MarkDone({"worker", 0}, 7), 2);
  EXPECT_EQ(*registry_.MarkDone({"worker", 0}, 7), 2);  // Again: counted once.
  EXPECT_EQ(*registry_.MarkDone({"chief", 0}, 9), 1);
}

TEST_F(TrainerRegistryTest, ADoneFromOutsideTheSpecOrWithoutASessionIsRefusedSayingWhy) {
  auto st = registry_.MarkDone({"worker", 5}, 1).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(st.message().find("ps:0 refused Done from worker:5"), std::string::npos) << st;
  EXPECT_NE(st.message().find("lists no such worker or chief"), std::string::npos) << st;
  st = registry_.MarkDone({"evaluator", 0}, 1).status();
  EXPECT_NE(st.message().find("lists no such worker or chief"), std::string::npos) << st;
  st = registry_.MarkDone({"worker", 1}, 1).status();
  EXPECT_NE(st.message().find("never created a session with this task"), std::string::npos) << st;
}

TEST_F(TrainerRegistryTest, ADoneFromAnEarlierIncarnationIsRefused) {
  registry_.RecordHandshake({"worker", 1}, 0xa);
  registry_.RecordHandshake({"worker", 1}, 0xb);  // It restarted and handshook again.
  auto st = registry_.MarkDone({"worker", 1}, 0xa).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(st.message().find("its session with this task is from incarnation b"),
            std::string::npos)
      << st;
  EXPECT_EQ(*registry_.MarkDone({"worker", 1}, 0xb), 2);
}

TEST_F(TrainerRegistryTest, WaitAllDoneReturnsOnceEveryTrainerIsDone) {
  for (auto [t, inc] : {std::pair{TaskRef{"worker", 0}, 1}, std::pair{TaskRef{"worker", 1}, 2},
                        std::pair{TaskRef{"chief", 0}, 3}}) {
    registry_.RecordHandshake(t, inc);
  }
  std::atomic<bool> returned{false};
  bool all_done = false;
  std::thread waiter([&] {
    all_done = registry_.WaitAllDone([] { return false; });
    returned = true;
  });
  ASSERT_TRUE(registry_.MarkDone({"worker", 0}, 1).ok());
  ASSERT_TRUE(registry_.MarkDone({"worker", 1}, 2).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(returned.load());  // One trainer left.
  ASSERT_TRUE(registry_.MarkDone({"chief", 0}, 3).ok());
  waiter.join();
  EXPECT_TRUE(all_done);
}

TEST_F(TrainerRegistryTest, AStopEndsTheWaitWithTrainersLeft) {
  std::atomic<bool> stopping{false};
  bool all_done = true;
  std::thread waiter([&] { all_done = registry_.WaitAllDone([&] { return stopping.load(); }); });
  stopping = true;
  registry_.Wake();
  waiter.join();
  EXPECT_FALSE(all_done);
}

}  // namespace
}  // namespace trainscope
