// The phi-accrual detector on synthetic histories with injected time.
#include "trainscope/sidecar/detector.h"

#include <gtest/gtest.h>

namespace trainscope::sidecar {
namespace {

TEST(PhiAccrual, ZeroBeforeFirstHeartbeat) {
  PhiAccrualDetector d;
  EXPECT_EQ(d.Phi(100), 0);
}

TEST(PhiAccrual, LowWhileRegularHighWhenSilent) {
  PhiAccrualDetector d({.window = 100, .min_stddev_s = 0.05, .first_gap_s = 0.1});
  double t = 0;
  for (int i = 0; i < 50; ++i, t += 0.1) d.Heartbeat(t);
  t -= 0.1;
  EXPECT_LT(d.Phi(t + 0.1), 1);
  EXPECT_GT(d.Phi(t + 0.5), 8);
  EXPECT_LT(d.Phi(t + 0.3), d.Phi(t + 0.4));  // Monotonic in silence.
  EXPECT_NEAR(d.MeanGap(), 0.1, 1e-9);
}

TEST(PhiAccrual, AdaptsToASlowerRhythm) {
  PhiAccrualDetector d({.window = 20, .min_stddev_s = 0.05, .first_gap_s = 0.1});
  double t = 0;
  for (int i = 0; i < 40; ++i, t += 0.6) d.Heartbeat(t);
  t -= 0.6;
  // 0.5 s of silence is normal for a task answering every 0.6 s.
  EXPECT_LT(d.Phi(t + 0.5), 1);
}

TEST(PhiAccrual, ResetForgetsHistory) {
  PhiAccrualDetector d;
  for (int i = 0; i < 10; ++i) d.Heartbeat(i * 0.1);
  d.Reset(100);
  EXPECT_EQ(d.samples(), 0u);
  EXPECT_LT(d.Phi(100.05), 1);
}

}  // namespace
}  // namespace trainscope::sidecar
