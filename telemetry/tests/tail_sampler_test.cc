// The tail sampler: which recorded calls become spans and why (failed, slow, near the deadline,
// slowest in the window, requested by the caller, head-sampled), what the spans say, how a
// client's kept calls reach its peer and the peer keeps its half (before or after it read its
// record; once; missed when it never comes), and the rate limit.
#include "trainscope/telemetry/tail_sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <mutex>
#include <string>
#include <vector>

#include "trainscope/telemetry/metrics.h"

namespace trainscope::telemetry {
namespace {

constexpr uint64_t kMs = 1'000'000;
constexpr uint64_t kStart = 1'700'000'000'000'000'000;  // A unix time in ns.

class Collect final : public SpanProcessor {
 public:
  void OnEnd(SpanData&& span) override {
    std::lock_guard lock(mu);
    spans.push_back(std::move(span));
  }
  std::vector<SpanData> Take() {
    std::lock_guard lock(mu);
    return std::exchange(spans, {});
  }
  std::mutex mu;
  std::vector<SpanData> spans;
};

std::string Attr(const SpanData& s, const std::string& key) {
  for (const Attribute& a : s.attributes) {
    if (a.key != key) continue;
    if (auto* v = std::get_if<std::string>(&a.value)) return *v;
    if (auto* v = std::get_if<int64_t>(&a.value)) return std::to_string(*v);
  }
  return "";
}

CallRecord Client(uint8_t id, uint64_t duration_ms, uint8_t status = 0) {
  CallRecord r;
  r.trace_id.fill(id);
  r.span_id.fill(id);
  r.start_unix_nano = kStart + id * kMs;
  r.duration_nano = duration_ms * kMs;
  r.deadline_ms = 5000;
  r.request_bytes = 10;
  r.response_bytes = 4100;
  r.peer = 0;
  r.method = static_cast<uint8_t>(methods::kPull);
  r.status = status;
  r.kind = CallKind::kClient;
  return r;
}

CallRecord ServerHalf(const CallRecord& client, uint64_t duration_ms) {
  CallRecord r = client;
  r.span_id.fill(static_cast<uint8_t>(client.span_id[0] + 100));
  r.parent_span_id = client.span_id;
  r.duration_nano = duration_ms * kMs;
  r.peer = 1;  // The caller, worker:0.
  r.kind = CallKind::kServer;
  r.phase_name[0] = FlightRecorder::PhaseIndex("ps.queue");
  r.phase_nano[0] = 2 * kMs;
  r.phase_name[1] = FlightRecorder::PhaseIndex("ps.read");
  r.phase_nano[1] = 1 * kMs;
  return r;
}

class TailSamplerTest : public ::testing::Test {
 protected:
  std::unique_ptr<TailSampler> Make(TailSamplerOptions o) {
    o.interval_ms = 3600 * 1000;  // Passes run when the test says (or on a keep request).
    return std::make_unique<TailSampler>(o, &recorder_, &out_,
                                         SpanNames{{"ps:0", "worker:0"}, {"10.0.0.1:2222", ""}});
  }
  static TailSamplerOptions NoRanking() {
    TailSamplerOptions o;
    o.slowest_per_window = 0;
    return o;
  }
  FlightRecorder recorder_{4096};
  Collect out_;
};

TEST_F(TailSamplerTest, KeepsFailedSlowAndNearDeadlineCallsAndSaysWhy) {
  auto tail = Make(NoRanking());
  recorder_.Record(Client(1, 1));  // Fast, OK, not sampled: not kept.
  CallRecord failed = Client(2, 1, /*UNAVAILABLE*/ 14);
  failed.error = recorder_.AddError("connection refused");
  recorder_.Record(failed);
  recorder_.Record(Client(3, 150));  // Over 100 ms.
  CallRecord near = Client(4, 90);
  near.deadline_ms = 100;  // Used 90% of it.
  recorder_.Record(near);
  CallRecord sampled = Client(5, 1);
  sampled.flags = kRecordSampled;
  recorder_.Record(sampled);
  tail->RunOnce();
  std::vector<SpanData> spans = out_.Take();
  ASSERT_EQ(spans.size(), 4u);
  EXPECT_EQ(spans[0].context.trace_id[0], 2);
  EXPECT_EQ(Attr(spans[0], "trainscope.kept"), "error");
  EXPECT_EQ(spans[0].status_code, kStatusError);
  EXPECT_EQ(spans[0].status_message, "connection refused");
  EXPECT_EQ(Attr(spans[0], "rpc.grpc.status_code"), "14");
  EXPECT_EQ(Attr(spans[1], "trainscope.kept"), "slow");
  EXPECT_EQ(Attr(spans[2], "trainscope.kept"), "deadline");
  EXPECT_EQ(Attr(spans[3], "trainscope.kept"), "");  // Head-sampled: an ordinary span.
  // What the client span says.
  const SpanData& s = spans[1];
  EXPECT_EQ(s.name, "trainscope.v1.ParameterService/Pull");
  EXPECT_EQ(s.kind, SpanKind::kClient);
  EXPECT_EQ(s.end_unix_nano - s.start_unix_nano, 150 * kMs);
  EXPECT_EQ(Attr(s, "rpc.method"), "Pull");
  EXPECT_EQ(Attr(s, "trainscope.peer_task"), "ps:0");
  EXPECT_EQ(Attr(s, "net.peer.name"), "10.0.0.1:2222");
  EXPECT_EQ(Attr(s, "rpc.response.bytes"), "4100");
  EXPECT_EQ(Attr(s, "rpc.deadline_ms"), "5000");
  EXPECT_EQ(tail->stats().kept_error.load(), 1u);
  EXPECT_EQ(tail->stats().kept_slow.load(), 1u);
  EXPECT_EQ(tail->stats().kept_deadline.load(), 1u);
  EXPECT_EQ(tail->stats().calls_read.load(), 5u);
}

TEST_F(TailSamplerTest, KeepsTheSlowestClientCallsPerWindow) {
  TailSamplerOptions o;
  o.slowest_per_window = 2;
  o.window_seconds = 10;
  auto tail = Make(o);
  // One window: 5, 3 fill it; 1 is not among the slowest two; 4 beats 3.
  for (auto [id, ms] : {std::pair{1, 5}, {2, 3}, {3, 1}, {4, 4}}) {
    recorder_.Record(Client(static_cast<uint8_t>(id), ms));
  }
  tail->RunOnce();
  std::vector<uint8_t> kept;
  for (const SpanData& s : out_.Take()) {
    EXPECT_EQ(Attr(s, "trainscope.kept"), "slowest");
    kept.push_back(s.context.trace_id[0]);
  }
  EXPECT_EQ(kept, (std::vector<uint8_t>{1, 2, 4}));
  // The next window starts afresh.
  CallRecord later = Client(5, 1);
  later.start_unix_nano += 10'000 * kMs;
  recorder_.Record(later);
  tail->RunOnce();
  EXPECT_EQ(out_.Take().size(), 1u);
}

TEST_F(TailSamplerTest, AClientTellsItsPeerWhichCallsItKept) {
  auto tail = Make(NoRanking());
  EXPECT_FALSE(tail->HasKept(0));
  recorder_.Record(Client(1, 150));
  recorder_.Record(Client(2, 1, /*UNAVAILABLE: never reached the ps*/ 14));
  recorder_.Record(Client(3, 1, /*INVALID_ARGUMENT*/ 3));
  tail->RunOnce();
  ASSERT_TRUE(tail->HasKept(0));
  std::vector<CallId> kept;
  tail->TakeKept(0, &kept);
  ASSERT_EQ(kept.size(), 2u);
  EXPECT_EQ(kept[0].trace_id[0], 1);
  EXPECT_EQ(kept[0].span_id[0], 1);
  EXPECT_EQ(kept[0].start_unix_nano, kStart + kMs);
  EXPECT_EQ(kept[1].trace_id[0], 3);
  EXPECT_FALSE(tail->HasKept(0));
}

TEST_F(TailSamplerTest, AServerKeepsItsHalfOfCallsItsCallerKept) {
  auto tail = Make(NoRanking());
  const CallRecord early = Client(1, 150);
  const CallRecord late = Client(2, 150);
  // The caller says so before we read our record of `early` (found reading forward), and after
  // we read our record of `late` (found looking back).
  recorder_.Record(ServerHalf(early, 5));
  tail->KeepRequested({{early.trace_id, early.span_id, early.start_unix_nano}});
  tail->RunOnce();
  std::vector<SpanData> spans = out_.Take();
  ASSERT_EQ(spans.size(), 1u);
  EXPECT_EQ(spans[0].context.trace_id[0], 1);
  recorder_.Record(ServerHalf(late, 5));
  tail->RunOnce();
  EXPECT_TRUE(out_.Take().empty());  // Fast on our side: not kept on our own.
  tail->KeepRequested({{late.trace_id, late.span_id, late.start_unix_nano}});
  tail->RunOnce();
  spans = out_.Take();
  ASSERT_EQ(spans.size(), 1u);
  EXPECT_EQ(spans[0].context.trace_id[0], 2);
  EXPECT_EQ(tail->stats().kept_requested.load(), 2u);
  const SpanData& s = spans[0];
  EXPECT_EQ(s.kind, SpanKind::kServer);
  EXPECT_EQ(s.parent_span_id, late.span_id);
  EXPECT_EQ(Attr(s, "trainscope.kept"), "requested");
  EXPECT_EQ(Attr(s, "trainscope.peer_task"), "worker:0");
  EXPECT_EQ(Attr(s, "net.peer.name"), "");
  ASSERT_EQ(s.events.size(), 2u);
  EXPECT_EQ(s.events[0].name, "ps.queue");
  EXPECT_EQ(s.events[0].time_unix_nano, late.start_unix_nano + 2 * kMs);
  EXPECT_EQ(s.events[1].name, "ps.read");
  EXPECT_EQ(std::get<int64_t>(s.events[1].attributes[0].value), static_cast<int64_t>(kMs));
  EXPECT_EQ(tail->stats().keep_matched.load(), 2u);
}

TEST_F(TailSamplerTest, AServerHalfIsKeptOnceAndAMissingOneIsCounted) {
  TailSamplerOptions o = NoRanking();
  o.keep_request_ttl_seconds = 0;
  auto tail = Make(o);
  const CallRecord slow = Client(1, 300);
  recorder_.Record(ServerHalf(slow, 250));  // Slow on our side too: kept on its own.
  tail->RunOnce();
  tail->KeepRequested({{slow.trace_id, slow.span_id, slow.start_unix_nano}});
  const CallRecord never = Client(2, 300);
  tail->KeepRequested({{never.trace_id, never.span_id, never.start_unix_nano}});
  tail->RunOnce();
  std::vector<SpanData> spans = out_.Take();
  ASSERT_EQ(spans.size(), 1u);
  EXPECT_EQ(Attr(spans[0], "trainscope.kept"), "slow");
  EXPECT_EQ(tail->stats().keep_matched.load(), 1u);
  EXPECT_EQ(tail->stats().keep_missed.load(), 1u);
}

TEST_F(TailSamplerTest, KeptSpansBeyondTheRateLimitAreDroppedAndCounted) {
  TailSamplerOptions o = NoRanking();
  o.max_kept_per_second = 2;
  auto tail = Make(o);
  for (uint8_t i = 1; i <= 5; ++i) recorder_.Record(Client(i, 1, /*INTERNAL*/ 13));
  CallRecord sampled = Client(6, 1, 13);
  sampled.flags = kRecordSampled;  // Head-sampled spans are not limited.
  recorder_.Record(sampled);
  tail->RunOnce();
  EXPECT_EQ(out_.Take().size(), 3u);
  EXPECT_EQ(tail->stats().kept_dropped.load(), 3u);
}

}  // namespace
}  // namespace trainscope::telemetry
