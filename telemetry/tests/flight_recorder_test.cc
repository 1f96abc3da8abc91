// The flight recorder: records come back whole and in order, overwritten ones are counted, a
// reader racing several writers never sees a torn record, ScanBack finds the newest first, and
// error messages and phase names are kept by id.
#include "trainscope/telemetry/flight_recorder.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <latch>
#include <thread>
#include <vector>

namespace trainscope::telemetry {
namespace {

// A record whose every field follows from (writer, n), so that a torn one shows.
CallRecord Make(uint32_t writer, uint32_t n) {
  CallRecord r;
  for (size_t i = 0; i < r.trace_id.size(); ++i) r.trace_id[i] = static_cast<uint8_t>(writer + i);
  std::memcpy(r.span_id.data(), &n, sizeof(n));
  std::memcpy(r.span_id.data() + 4, &writer, sizeof(writer));
  r.start_unix_nano = uint64_t{writer} << 32 | n;
  r.duration_nano = uint64_t{n} * 3 + writer;
  r.request_bytes = n ^ 0x5a5a5a5a;
  r.response_bytes = writer * 7;
  r.peer = static_cast<uint16_t>(writer);
  r.method = static_cast<uint8_t>(n % 7);
  r.status = static_cast<uint8_t>(n % 17);
  r.kind = n % 2 ? CallKind::kServer : CallKind::kClient;
  return r;
}

bool Intact(const CallRecord& r) {
  const uint32_t writer = static_cast<uint32_t>(r.start_unix_nano >> 32);
  const uint32_t n = static_cast<uint32_t>(r.start_unix_nano);
  const CallRecord expected = Make(writer, n);
  return std::memcmp(&r, &expected, sizeof(CallRecord)) == 0;
}

TEST(FlightRecorderTest, RecordsComeBackWholeAndInOrder) {
  FlightRecorder recorder(1024);
  FlightRecorder::Cursor cursor = recorder.Start();
  for (uint32_t n = 0; n < 100; ++n) recorder.Record(Make(1, n));
  std::vector<uint32_t> seen;
  const uint64_t lost = recorder.ReadNew(&cursor, [&](const CallRecord& r) {
    EXPECT_TRUE(Intact(r));
    seen.push_back(static_cast<uint32_t>(r.start_unix_nano));
  });
  EXPECT_EQ(lost, 0u);
  ASSERT_EQ(seen.size(), 100u);  // One thread writes into one shard: in order.
  for (uint32_t n = 0; n < 100; ++n) EXPECT_EQ(seen[n], n);
  // Nothing new, nothing read again.
  EXPECT_EQ(recorder.ReadNew(&cursor, [&](const CallRecord&) { ADD_FAILURE(); }), 0u);
  EXPECT_EQ(recorder.bytes(), recorder.capacity() * 88);
}

TEST(FlightRecorderTest, OverwrittenRecordsAreCountedAndTheNewestKept) {
  FlightRecorder recorder(8 * 64);  // 64 per shard.
  FlightRecorder::Cursor cursor = recorder.Start();
  for (uint32_t n = 0; n < 1000; ++n) recorder.Record(Make(2, n));
  std::vector<uint32_t> seen;
  const uint64_t lost = recorder.ReadNew(&cursor, [&](const CallRecord& r) {
    seen.push_back(static_cast<uint32_t>(r.start_unix_nano));
  });
  EXPECT_EQ(lost, 1000u - 64u);
  ASSERT_EQ(seen.size(), 64u);
  EXPECT_EQ(seen.front(), 1000u - 64u);
  EXPECT_EQ(seen.back(), 999u);
}

TEST(FlightRecorderTest, AReaderRacingWritersNeverSeesATornRecord) {
  constexpr int kWriters = 6;
  constexpr uint32_t kPerWriter = 200000;
  FlightRecorder recorder(8 * 256);  // Small, so that writers lap the reader.
  FlightRecorder::Cursor cursor = recorder.Start();
  std::latch start(kWriters + 1);
  std::atomic<int> done{0};
  std::vector<std::thread> writers;
  for (int w = 0; w < kWriters; ++w) {
    writers.emplace_back([&, w] {
      start.arrive_and_wait();
      for (uint32_t n = 0; n < kPerWriter; ++n) recorder.Record(Make(w + 1, n));
      done.fetch_add(1);
    });
  }
  uint64_t read = 0, lost = 0, torn = 0;
  auto consume = [&](const CallRecord& r) {
    ++read;
    if (!Intact(r)) ++torn;
  };
  start.arrive_and_wait();
  while (done.load() < kWriters) lost += recorder.ReadNew(&cursor, consume);
  for (auto& t : writers) t.join();
  lost += recorder.ReadNew(&cursor, consume);
  EXPECT_EQ(torn, 0u);
  EXPECT_EQ(read + lost, uint64_t{kWriters} * kPerWriter);
  EXPECT_GT(read, 0u);
}

TEST(FlightRecorderTest, ScanBackFindsTheNewestFirstAndStops) {
  FlightRecorder recorder(1024);
  for (uint32_t n = 0; n < 50; ++n) recorder.Record(Make(3, n));
  FlightRecorder::Cursor cursor = recorder.Start();  // Now: everything before it is old.
  std::vector<uint32_t> seen;
  recorder.ScanBack(cursor, [&](const CallRecord& r) {
    seen.push_back(static_cast<uint32_t>(r.start_unix_nano));
    return seen.size() == 5 ? FlightRecorder::Scan::kStop : FlightRecorder::Scan::kGoOn;
  });
  EXPECT_EQ(seen, (std::vector<uint32_t>{49, 48, 47, 46, 45}));
  seen.clear();
  recorder.ScanBack(cursor, [&](const CallRecord& r) {
    seen.push_back(static_cast<uint32_t>(r.start_unix_nano));
    return FlightRecorder::Scan::kGoOn;
  });
  EXPECT_EQ(seen.size(), 50u);
}

TEST(FlightRecorderTest, ErrorMessagesAreKeptByIdUntilForgotten) {
  FlightRecorder recorder(64);
  EXPECT_EQ(recorder.AddError(""), 0u);
  EXPECT_EQ(recorder.Error(0), "");
  const uint32_t first = recorder.AddError("Deadline Exceeded");
  EXPECT_EQ(recorder.Error(first), "Deadline Exceeded");
  for (int i = 0; i < 1024; ++i) recorder.AddError("later");
  EXPECT_EQ(recorder.Error(first), "");  // Its slot was reused.
}

TEST(FlightRecorderTest, PhaseNamesAreInterned) {
  static const char kQueue[] = "test.queue";
  const uint8_t q = FlightRecorder::PhaseIndex(kQueue);
  ASSERT_NE(q, 0);
  EXPECT_EQ(FlightRecorder::PhaseIndex("test.queue"), q);  // Same text, another pointer.
  EXPECT_STREQ(FlightRecorder::PhaseName(q), "test.queue");
  EXPECT_NE(FlightRecorder::PhaseIndex("test.apply"), q);
  EXPECT_EQ(FlightRecorder::PhaseName(0), nullptr);
}

}  // namespace
}  // namespace trainscope::telemetry
