// What InjectFault arms (fault_injector.h), apart from the wedges (tested for real by the
// integration and stacks tests): delays as set, the lost Push answers counted down to zero.
#include "fault_injector.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace trainscope {
namespace {

TEST(FaultInjectorTest, StartsFromTheTestingFlagsAndTakesNewDelays) {
  FaultInjector faults(/*parameter_delay_ms=*/25, /*drop_push_answers=*/0);
  EXPECT_EQ(faults.delays().parameter_ms, 25);
  EXPECT_EQ(faults.delays().heartbeat_ms, 0);
  faults.SetDelays({0, 40, 0.5, 300});
  const FaultInjector::Delays d = faults.delays();
  EXPECT_EQ(d.parameter_ms, 0);
  EXPECT_EQ(d.heartbeat_ms, 40);
  EXPECT_DOUBLE_EQ(d.random_probability, 0.5);
  EXPECT_EQ(d.random_ms, 300);
}

TEST(FaultInjectorTest, AParameterCallWaitsTheDelayAsked) {
  FaultInjector faults(/*parameter_delay_ms=*/30);
  const auto start = std::chrono::steady_clock::now();
  faults.BeforeParameterCall();
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(30));
  EXPECT_EQ(faults.random_delays(), 0);
}

TEST(FaultInjectorTest, EveryCallIsDelayedAtRandomWithProbabilityOne) {
  FaultInjector faults;
  faults.SetDelays({0, 0, 1.0, 1});
  for (int i = 0; i < 3; ++i) faults.BeforeParameterCall();
  EXPECT_EQ(faults.random_delays(), 3);
}

TEST(FaultInjectorTest, ExactlyTheFirstNPushAnswersAreLostEvenFromManyThreads) {
  FaultInjector faults(0, /*drop_push_answers=*/50);
  std::atomic<int> lost{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 100; ++i) lost += faults.TakeDroppedPushAnswer() ? 1 : 0;
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(lost.load(), 50);
  EXPECT_FALSE(faults.TakeDroppedPushAnswer());
}

}  // namespace
}  // namespace trainscope
