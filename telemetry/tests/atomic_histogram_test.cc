// The lock-free recorders: AtomicHistogram's buckets, count and sum, alone and under concurrent
// Observe; and RpcMetrics' series, created on first use by whichever thread gets there first,
// when several threads use the same new label set at once.
#include <gtest/gtest.h>

#include <latch>
#include <limits>
#include <thread>
#include <vector>

#include "prometheus/client_metric.h"
#include "prometheus/metric_family.h"
#include "trainscope/telemetry/metrics.h"
#include "trainscope/telemetry/names.h"

namespace trainscope::telemetry {
namespace {

constexpr double kBounds[] = {0.1, 1, 10};

prometheus::ClientMetric Collected(const AtomicHistogram& h) {
  prometheus::ClientMetric m;
  h.CollectInto(&m);
  return m;
}

std::vector<uint64_t> Cumulative(const prometheus::ClientMetric& m) {
  std::vector<uint64_t> out;
  for (const auto& b : m.histogram.bucket) out.push_back(b.cumulative_count);
  return out;
}

TEST(AtomicHistogramTest, BucketsAreLessOrEqualWithInfLast) {
  AtomicHistogram h(kBounds);
  for (double v : {0.0, 0.1, 0.5, 1.0, 9.99, 10.0, 10.01, 1e9}) h.Observe(v);
  prometheus::ClientMetric m = Collected(h);
  ASSERT_EQ(m.histogram.bucket.size(), 4u);
  // A value on a bound counts in that bound's bucket (Prometheus' "le").
  EXPECT_EQ(Cumulative(m), (std::vector<uint64_t>{2, 4, 6, 8}));
  EXPECT_EQ(m.histogram.bucket[0].upper_bound, 0.1);
  EXPECT_EQ(m.histogram.bucket[2].upper_bound, 10);
  EXPECT_EQ(m.histogram.bucket[3].upper_bound, std::numeric_limits<double>::infinity());
  EXPECT_EQ(m.histogram.sample_count, 8u);
  EXPECT_DOUBLE_EQ(m.histogram.sample_sum, 0.1 + 0.5 + 1 + 9.99 + 10 + 10.01 + 1e9);
  EXPECT_EQ(h.count(), 8u);
}

TEST(AtomicHistogramTest, EmptyHistogramHasZeroBuckets) {
  AtomicHistogram h(kBounds);
  prometheus::ClientMetric m = Collected(h);
  EXPECT_EQ(Cumulative(m), (std::vector<uint64_t>{0, 0, 0, 0}));
  EXPECT_EQ(m.histogram.sample_count, 0u);
  EXPECT_EQ(m.histogram.sample_sum, 0);
}

TEST(AtomicHistogramTest, ConcurrentObserveLosesNothing) {
  AtomicHistogram h(names::kLatencyBuckets);
  constexpr int kThreads = 4;
  constexpr int kPerThread = 100000;
  std::latch start(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      start.arrive_and_wait();
      // Every thread observes 0.25 (exact in binary, so the sum is exact) and its own value.
      for (int i = 0; i < kPerThread; ++i) h.Observe(i % 2 == 0 ? 0.25 : 0.001 * (t + 1));
    });
  }
  for (auto& th : threads) th.join();
  prometheus::ClientMetric m = Collected(h);
  EXPECT_EQ(m.histogram.sample_count, uint64_t{kThreads} * kPerThread);
  EXPECT_EQ(m.histogram.bucket.back().cumulative_count, uint64_t{kThreads} * kPerThread);
  double expected_sum = 0;
  for (int t = 0; t < kThreads; ++t) expected_sum += kPerThread / 2 * (0.25 + 0.001 * (t + 1));
  EXPECT_NEAR(m.histogram.sample_sum, expected_sum, 1e-6 * expected_sum);
  // Cumulative counts never decrease.
  std::vector<uint64_t> c = Cumulative(m);
  for (size_t i = 1; i < c.size(); ++i) EXPECT_LE(c[i - 1], c[i]);
}

// The series of one family whose labels include every (name, value) of `want`.
std::vector<const prometheus::ClientMetric*> Series(
    const std::vector<prometheus::MetricFamily>& families, const std::string& family,
    const std::vector<std::pair<std::string, std::string>>& want) {
  std::vector<const prometheus::ClientMetric*> out;
  for (const auto& f : families) {
    if (f.name != family) continue;
    for (const auto& m : f.metric) {
      bool all = true;
      for (const auto& [name, value] : want) {
        bool found = false;
        for (const auto& l : m.label) found = found || (l.name == name && l.value == value);
        all = all && found;
      }
      if (all) out.push_back(&m);
    }
  }
  return out;
}

// Several threads record into the same label set that no one has used yet, released at the same
// instant, over and over with fresh recorders: every time there is exactly one series, and it
// holds every observation (none went into a series that lost the race to be installed).
TEST(RpcMetricsTest, ConcurrentFirstUseOfANewSeriesMakesOneSeriesAndLosesNothing) {
  constexpr int kThreads = 6;
  constexpr int kPerThread = 50;
  constexpr int kRepeats = 200;
  const std::vector<TaskRef> peers = {{"ps", 0}, {"worker", 0}};
  const int pull = RpcMetrics::MethodIndex("/trainscope.v1.ParameterService/Pull");
  for (int r = 0; r < kRepeats; ++r) {
    RpcMetrics rpc(peers);
    const int role = rpc.RoleIndex("ps");
    const int peer = rpc.PeerIndex({"ps", 0});
    std::latch start(kThreads);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&] {
        start.arrive_and_wait();
        for (int i = 0; i < kPerThread; ++i) {
          rpc.ClientAttemptStarted(pull, role);
          rpc.ClientAttemptEnded(pull, /*DEADLINE_EXCEEDED*/ 4, role, peer, 0.002, 100, 200, 1.0);
          rpc.ClientCallEnded(pull, 4, role, 0.002);
          rpc.ServerCallStarted(pull, role);
          rpc.ServerCallEnded(pull, 4, role, 0.001, 10, 20);
        }
      });
    }
    for (auto& th : threads) th.join();
    const std::vector<prometheus::MetricFamily> families = rpc.Collect();
    const uint64_t total = uint64_t{kThreads} * kPerThread;
    const std::vector<std::pair<std::string, std::string>> labels = {
        {names::kLabelMethod, "trainscope.v1.ParameterService/Pull"},
        {names::kLabelPeerRole, "ps"}};
    auto with_status = labels;
    with_status.push_back({names::kLabelGrpcStatus, "DEADLINE_EXCEEDED"});
    for (const char* family :
         {names::kClientAttemptDuration, names::kClientAttemptSentBytes, names::kClientCallDuration,
          names::kServerCallDuration, names::kServerCallRcvdBytes}) {
      auto series = Series(families, family, with_status);
      ASSERT_EQ(series.size(), 1u) << family << " in repeat " << r;
      EXPECT_EQ(series[0]->histogram.sample_count, total) << family << " in repeat " << r;
    }
    for (const char* family : {names::kClientAttemptStarted, names::kServerCallStarted}) {
      auto series = Series(families, family, labels);
      ASSERT_EQ(series.size(), 1u) << family << " in repeat " << r;
      EXPECT_EQ(series[0]->counter.value, static_cast<double>(total)) << family;
    }
    auto peer_errors = Series(families, names::kPeerDeadlineExceeded, labels);
    ASSERT_EQ(peer_errors.size(), 1u);
    EXPECT_EQ(peer_errors[0]->counter.value, static_cast<double>(total));
  }
}

}  // namespace
}  // namespace trainscope::telemetry
