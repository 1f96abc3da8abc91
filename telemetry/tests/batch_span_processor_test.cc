// Tests of the BatchSpanProcessor with a fake exporter: batching, the schedule and the
// half-full trigger, drops when full (counted, never blocking), failures, flush and shutdown,
// and the OTEL_BSP_* variables.
#include "trainscope/telemetry/batch_span_processor.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"

namespace trainscope::telemetry {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

// Records what it is given; can be made to fail or to block until released.
class FakeExporter : public SpanExporter {
 public:
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    std::vector<std::string> names;
    std::vector<size_t> batch_sizes;
    bool fail = false;
    bool block = false;
    int inside = 0;  // Export calls in progress.
  };
  explicit FakeExporter(std::shared_ptr<State> state) : state_(std::move(state)) {}

  absl::Status Export(std::vector<SpanData>& batch) override {
    std::unique_lock<std::mutex> lock(state_->mu);
    ++state_->inside;
    state_->cv.notify_all();
    state_->cv.wait(lock, [&] { return !state_->block; });
    --state_->inside;
    state_->batch_sizes.push_back(batch.size());
    for (SpanData& span : batch) state_->names.push_back(std::move(span.name));
    state_->cv.notify_all();
    if (state_->fail) return absl::UnavailableError("collector down");
    return absl::OkStatus();
  }

 private:
  std::shared_ptr<State> state_;
};

SpanData Span(std::string name) {
  SpanData span;
  span.name = std::move(name);
  span.context.sampled = true;
  span.context.trace_id[0] = 1;
  span.context.span_id[0] = 1;
  return span;
}

// Waits up to `timeout` for `done()`.
template <typename F>
bool WaitFor(F done, milliseconds timeout = milliseconds(5000)) {
  const auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(milliseconds(2));
  }
  return done();
}

TEST(BatchSpanProcessorTest, FlushExportsEverythingInOrderAndInBatches) {
  auto state = std::make_shared<FakeExporter::State>();
  TracingStats stats;
  BatchSpanProcessor processor(
      std::make_unique<FakeExporter>(state),
      {.max_queue_size = 100, .max_export_batch_size = 7, .schedule_delay_ms = 3600 * 1000},
      &stats);
  for (int i = 0; i < 30; ++i) processor.OnEnd(Span(absl::StrCat("span", i)));
  ASSERT_TRUE(processor.ForceFlush(milliseconds(5000)).ok());
  std::lock_guard<std::mutex> lock(state->mu);
  ASSERT_EQ(state->names.size(), 30u);
  for (int i = 0; i < 30; ++i) EXPECT_EQ(state->names[i], absl::StrCat("span", i));
  for (size_t size : state->batch_sizes) EXPECT_LE(size, 7u);
  EXPECT_EQ(stats.spans_exported.load(), 30u);
  EXPECT_EQ(stats.spans_dropped.load(), 0u);
  EXPECT_EQ(stats.export_failures.load(), 0u);
}

TEST(BatchSpanProcessorTest, ExportsOnTheSchedule) {
  auto state = std::make_shared<FakeExporter::State>();
  BatchSpanProcessor processor(
      std::make_unique<FakeExporter>(state),
      {.max_queue_size = 2048, .max_export_batch_size = 512, .schedule_delay_ms = 50});
  const auto start = Clock::now();
  processor.OnEnd(Span("lonely"));
  EXPECT_TRUE(WaitFor([&] { return processor.stats().spans_exported.load() == 1; }));
  EXPECT_GE(Clock::now() - start, milliseconds(1));
  EXPECT_LT(Clock::now() - start, milliseconds(2000));
}

TEST(BatchSpanProcessorTest, ExportsEarlyWhenABatchIsWaiting) {
  auto state = std::make_shared<FakeExporter::State>();
  BatchSpanProcessor processor(
      std::make_unique<FakeExporter>(state),
      {.max_queue_size = 100, .max_export_batch_size = 10, .schedule_delay_ms = 3600 * 1000});
  for (int i = 0; i < 9; ++i) processor.OnEnd(Span("s"));
  std::this_thread::sleep_for(milliseconds(50));
  EXPECT_EQ(processor.stats().spans_exported.load(), 0u);  // Below the trigger: waits.
  processor.OnEnd(Span("tenth"));
  EXPECT_TRUE(WaitFor([&] { return processor.stats().spans_exported.load() == 10; }));
}

TEST(BatchSpanProcessorTest, FullQueueDropsCountsAndNeverBlocks) {
  auto state = std::make_shared<FakeExporter::State>();
  state->block = true;
  TracingStats stats;
  BatchSpanProcessor processor(
      std::make_unique<FakeExporter>(state),
      {.max_queue_size = 8, .max_export_batch_size = 4, .schedule_delay_ms = 3600 * 1000}, &stats);
  // Four spans wake the export thread, which then hangs in Export.
  for (int i = 0; i < 4; ++i) processor.OnEnd(Span("first"));
  {
    std::unique_lock<std::mutex> lock(state->mu);
    ASSERT_TRUE(state->cv.wait_for(lock, milliseconds(5000), [&] { return state->inside == 1; }));
  }
  // Eight more fill the queue; the rest are dropped. Every OnEnd returns while the export stays
  // blocked until after the loop: none waits for room in the queue. What one costs is measured,
  // not asserted: tracing_benchmark, BM_OnEndFullQueue.
  for (int i = 0; i < 1000; ++i) processor.OnEnd(Span(i < 8 ? "queued" : "dropped"));
  EXPECT_EQ(stats.spans_dropped.load(), 992u);
  {
    std::lock_guard<std::mutex> lock(state->mu);
    state->block = false;
  }
  state->cv.notify_all();
  ASSERT_TRUE(processor.ForceFlush(milliseconds(5000)).ok());
  EXPECT_EQ(stats.spans_exported.load(), 12u);
  std::lock_guard<std::mutex> lock(state->mu);
  for (const std::string& name : state->names) EXPECT_NE(name, "dropped");
}

TEST(BatchSpanProcessorTest, FailedExportsAreCounted) {
  auto state = std::make_shared<FakeExporter::State>();
  state->fail = true;
  TracingStats stats;
  BatchSpanProcessor processor(
      std::make_unique<FakeExporter>(state),
      {.max_queue_size = 100, .max_export_batch_size = 5, .schedule_delay_ms = 3600 * 1000},
      &stats);
  for (int i = 0; i < 12; ++i) processor.OnEnd(Span("s"));
  ASSERT_TRUE(processor.ForceFlush(milliseconds(5000)).ok());
  // How the 12 are cut depends on when the early wake-up (at 5 queued) takes the queue: 5+5+2,
  // or 6 taken as 5+1 and then 5+1. Every failed call is counted once, every span once.
  std::lock_guard<std::mutex> lock(state->mu);
  EXPECT_EQ(stats.export_failures.load(), state->batch_sizes.size());
  EXPECT_GE(state->batch_sizes.size(), 3u);
  for (size_t size : state->batch_sizes) EXPECT_LE(size, 5u);
  EXPECT_EQ(stats.spans_failed.load(), 12u);
  EXPECT_EQ(stats.spans_exported.load(), 0u);
}

TEST(BatchSpanProcessorTest, ShutdownFlushesThenRejects) {
  auto state = std::make_shared<FakeExporter::State>();
  TracingStats stats;
  BatchSpanProcessor processor(
      std::make_unique<FakeExporter>(state),
      {.max_queue_size = 100, .max_export_batch_size = 50, .schedule_delay_ms = 3600 * 1000},
      &stats);
  for (int i = 0; i < 3; ++i) processor.OnEnd(Span("before"));
  EXPECT_TRUE(processor.Shutdown(milliseconds(5000)).ok());
  EXPECT_EQ(stats.spans_exported.load(), 3u);
  processor.OnEnd(Span("after"));
  EXPECT_EQ(stats.spans_dropped.load(), 1u);
  EXPECT_EQ(processor.ForceFlush(milliseconds(100)).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(processor.Shutdown(milliseconds(100)).ok());  // Idempotent.
}

TEST(BatchSpanProcessorTest, ShutdownGivesUpOnAStuckExporter) {
  auto state = std::make_shared<FakeExporter::State>();
  state->block = true;
  TracingStats stats;
  auto processor = std::make_unique<BatchSpanProcessor>(
      std::make_unique<FakeExporter>(state),
      BatchSpanProcessorOptions{
          .max_queue_size = 100, .max_export_batch_size = 2, .schedule_delay_ms = 3600 * 1000},
      &stats);
  for (int i = 0; i < 10; ++i) processor->OnEnd(Span("s"));
  std::thread release([&] {
    std::this_thread::sleep_for(milliseconds(300));
    {
      std::lock_guard<std::mutex> lock(state->mu);
      state->block = false;
    }
    state->cv.notify_all();
  });
  const auto start = Clock::now();
  absl::Status status = processor->Shutdown(milliseconds(50));
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  EXPECT_LT(Clock::now() - start, milliseconds(3000));
  release.join();
  // The batch in flight went out; the other four batches' spans were dropped and counted.
  EXPECT_EQ(stats.spans_exported.load() + stats.spans_dropped.load(), 10u);
  EXPECT_GE(stats.spans_dropped.load(), 6u);
  processor.reset();
}

TEST(BatchSpanProcessorTest, ManyThreadsLoseNothingUncounted) {
  auto state = std::make_shared<FakeExporter::State>();
  TracingStats stats;
  BatchSpanProcessor processor(
      std::make_unique<FakeExporter>(state),
      {.max_queue_size = 256, .max_export_batch_size = 64, .schedule_delay_ms = 5}, &stats);
  constexpr int kThreads = 4;
  constexpr int kPerThread = 20000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kPerThread; ++i) processor.OnEnd(Span("s"));
    });
  }
  for (std::thread& t : threads) t.join();
  ASSERT_TRUE(processor.ForceFlush(milliseconds(5000)).ok());
  EXPECT_EQ(stats.spans_exported.load() + stats.spans_dropped.load(),
            static_cast<uint64_t>(kThreads * kPerThread));
  EXPECT_GT(stats.spans_exported.load(), 0u);
}

TEST(BatchSpanProcessorTest, DestructorFlushes) {
  auto state = std::make_shared<FakeExporter::State>();
  {
    BatchSpanProcessor processor(
        std::make_unique<FakeExporter>(state),
        {.max_queue_size = 100, .max_export_batch_size = 50, .schedule_delay_ms = 3600 * 1000});
    processor.OnEnd(Span("last words"));
  }
  std::lock_guard<std::mutex> lock(state->mu);
  ASSERT_EQ(state->names.size(), 1u);
  EXPECT_EQ(state->names[0], "last words");
}

class BspEnvTest : public ::testing::Test {
 protected:
  void SetUp() override { Clear(); }
  void TearDown() override { Clear(); }
  static void Clear() {
    unsetenv("OTEL_BSP_MAX_QUEUE_SIZE");
    unsetenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE");
    unsetenv("OTEL_BSP_SCHEDULE_DELAY");
  }
};

TEST_F(BspEnvTest, DefaultsAndValues) {
  std::string warning = "stale";
  BatchSpanProcessorOptions options = BatchSpanProcessorOptionsFromEnv(&warning);
  EXPECT_EQ(options.max_queue_size, 2048u);
  EXPECT_EQ(options.max_export_batch_size, 512u);
  EXPECT_EQ(options.schedule_delay_ms, 1000);
  EXPECT_TRUE(warning.empty()) << warning;

  setenv("OTEL_BSP_MAX_QUEUE_SIZE", "100", 1);
  setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "10", 1);
  setenv("OTEL_BSP_SCHEDULE_DELAY", "50", 1);
  options = BatchSpanProcessorOptionsFromEnv(&warning);
  EXPECT_EQ(options.max_queue_size, 100u);
  EXPECT_EQ(options.max_export_batch_size, 10u);
  EXPECT_EQ(options.schedule_delay_ms, 50);
  EXPECT_TRUE(warning.empty()) << warning;
}

TEST_F(BspEnvTest, BadValuesKeepDefaultsAndWarn) {
  setenv("OTEL_BSP_MAX_QUEUE_SIZE", "lots", 1);
  setenv("OTEL_BSP_SCHEDULE_DELAY", "-5", 1);
  std::string warning;
  BatchSpanProcessorOptions options = BatchSpanProcessorOptionsFromEnv(&warning);
  EXPECT_EQ(options.max_queue_size, 2048u);
  EXPECT_EQ(options.schedule_delay_ms, 1000);
  EXPECT_NE(warning.find("OTEL_BSP_MAX_QUEUE_SIZE=\"lots\""), std::string::npos) << warning;
  EXPECT_NE(warning.find("OTEL_BSP_SCHEDULE_DELAY=\"-5\""), std::string::npos) << warning;

  Clear();
  setenv("OTEL_BSP_MAX_QUEUE_SIZE", "16", 1);
  setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "64", 1);
  options = BatchSpanProcessorOptionsFromEnv(&warning);
  EXPECT_EQ(options.max_export_batch_size, 16u);
  EXPECT_NE(warning.find("larger than the queue"), std::string::npos) << warning;
}

}  // namespace
}  // namespace trainscope::telemetry
