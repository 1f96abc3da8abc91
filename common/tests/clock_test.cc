// Durations and sizes in words.
#include "trainscope/common/clock.h"

#include <gtest/gtest.h>

#include <limits>

namespace trainscope {
namespace {

TEST(ClockTest, HumanDuration) {
  EXPECT_EQ(HumanDuration(0.35), "350 ms");
  EXPECT_EQ(HumanDuration(1.54), "1.5 s");
  EXPECT_EQ(HumanDuration(42), "42 s");
  EXPECT_EQ(HumanDuration(185), "3 min 5 s");
  EXPECT_EQ(HumanDuration(7560), "2.1 h");
  EXPECT_EQ(HumanDuration(0.0003), "0.3 ms");
  EXPECT_EQ(HumanDuration(0.00002), "under 0.1 ms");
  EXPECT_EQ(HumanDuration(-1), "0.0 ms");
  EXPECT_EQ(HumanDuration(std::numeric_limits<double>::quiet_NaN()), "0.0 ms");
}

TEST(ClockTest, HumanBytes) {
  EXPECT_EQ(HumanBytes(512), "512 B");
  EXPECT_EQ(HumanBytes(4096), "4.0 KiB");
  EXPECT_EQ(HumanBytes(3 << 19), "1.5 MiB");
}

TEST(ClockTest, ClocksMove) {
  double m = MonotonicSeconds();
  EXPECT_GE(MonotonicSeconds(), m);
  EXPECT_GT(UnixSeconds(), 1.6e9);
}

}  // namespace
}  // namespace trainscope
