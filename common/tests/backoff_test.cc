// Backoff: growth, cap, jitter bounds, reset, reproducible seeds.
#include "trainscope/common/backoff.h"

#include <gtest/gtest.h>

namespace trainscope {
namespace {

TEST(Backoff, GrowsByTheMultiplierUntilTheCap) {
  Backoff b({.initial_s = 0.1, .max_s = 1, .multiplier = 1.5, .jitter = 0});
  EXPECT_DOUBLE_EQ(b.NextDelay(), 0.1);
  EXPECT_DOUBLE_EQ(b.NextDelay(), 0.15);
  EXPECT_DOUBLE_EQ(b.NextDelay(), 0.225);
  for (int i = 0; i < 20; ++i) b.NextDelay();
  EXPECT_DOUBLE_EQ(b.NextDelay(), 1.0);
}

TEST(Backoff, ResetStartsOver) {
  Backoff b({.initial_s = 0.05, .max_s = 0.25, .multiplier = 2, .jitter = 0});
  b.NextDelay();
  b.NextDelay();
  EXPECT_DOUBLE_EQ(b.NextDelay(), 0.2);
  b.Reset();
  EXPECT_DOUBLE_EQ(b.NextDelay(), 0.05);
  EXPECT_EQ(b.NextDelayMs(), 100);
}

TEST(Backoff, JitterStaysWithinItsBoundsAndTheCap) {
  Backoff b({.initial_s = 0.05, .max_s = 0.25, .multiplier = 2, .jitter = 0.2}, 42);
  bool varied = false;
  double first = -1;
  for (int i = 0; i < 200; ++i) {
    b.Reset();
    const double d = b.NextDelay();
    EXPECT_GE(d, 0.04);
    EXPECT_LE(d, 0.06);
    if (first < 0) first = d;
    varied |= d != first;
    for (int k = 0; k < 10; ++k) EXPECT_LE(b.NextDelay(), 0.25);
  }
  EXPECT_TRUE(varied);
}

TEST(Backoff, TheSameSeedGivesTheSameDelays) {
  Backoff a({}, 7), b({}, 7);
  for (int i = 0; i < 10; ++i) EXPECT_DOUBLE_EQ(a.NextDelay(), b.NextDelay());
}

}  // namespace
}  // namespace trainscope
