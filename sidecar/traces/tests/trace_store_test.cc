// The trace store with injected time: joining halves that arrive in any order, the slow list's
// order, top-N and window expiry, failed requests, and the memory and per-trace bounds.
#include "trainscope/sidecar/trace_store.h"

#include <gtest/gtest.h>

#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"
#include "trainscope/sidecar/api.h"

namespace trainscope::sidecar {
namespace {

constexpr uint64_t kT0 = 1'700'000'000'000'000'000ull;
constexpr char kPush[] = "trainscope.v1.ParameterService/Push";
constexpr char kPull[] = "trainscope.v1.ParameterService/Pull";

std::string TraceId(int n) { return absl::StrFormat("%032x", n + 1); }
std::string SpanId(int n) { return absl::StrFormat("%016x", n + 1); }

SpanRecord Span(SpanKind kind, int trace, int span, int parent, std::string name, double start_ms,
                double ms) {
  SpanRecord s;
  s.trace_id = TraceId(trace);
  s.span_id = SpanId(span);
  if (parent >= 0) s.parent_span_id = SpanId(parent);
  s.name = std::move(name);
  s.kind = kind;
  s.start_unix_nano = kT0 + static_cast<uint64_t>(start_ms * 1e6);
  s.end_unix_nano = s.start_unix_nano + static_cast<uint64_t>(ms * 1e6);
  return s;
}

// The worker's half: client span `trace*10` of `ms`.
SpanRecord Client(int trace, double ms, std::string method = kPush, std::string ps = "ps:0") {
  SpanRecord s = Span(SpanKind::kClient, trace, trace * 10, -1, method, 0, ms);
  s.task = "worker:0";
  s.peer_task = std::move(ps);
  s.grpc_status_code = 0;
  s.deadline_ms = 2000;
  return s;
}

// The ps's half: server span `trace*10+1`, child of the client span.
SpanRecord Server(int trace, double ms, std::string method = kPush, std::string ps = "ps:0") {
  SpanRecord s = Span(SpanKind::kServer, trace, trace * 10 + 1, trace * 10, method, 1, ms);
  s.task = std::move(ps);
  s.peer_task = "worker:0";
  s.grpc_status_code = 0;
  return s;
}

SpanRecord Child(int trace, int n, std::string name, double ms) {
  return Span(SpanKind::kInternal, trace, trace * 10 + 2 + n, trace * 10 + 1, std::move(name), 1,
              ms);
}

TEST(TraceStore, JoinsHalvesArrivingInAnyOrder) {
  TraceStore store;
  store.Add({Child(1, 0, "ps.queue", 300)}, 0);
  store.Add({Child(1, 1, "ps.apply", 2)}, 0.1);
  store.Add({Server(1, 303)}, 0.2);
  auto slow = store.Slow({}, 0.3);
  ASSERT_EQ(slow.size(), 1u);
  EXPECT_FALSE(slow[0].has_client);
  EXPECT_FALSE(slow[0].network_ms.has_value());
  EXPECT_EQ(slow[0].worker, "worker:0");  // From the server span's peer task.
  EXPECT_EQ(slow[0].ps, "ps:0");          // From the server's resource.

  store.Add({Client(1, 310)}, 0.4);
  slow = store.Slow({}, 0.5);
  ASSERT_EQ(slow.size(), 1u);
  const RequestSummary& r = slow[0];
  EXPECT_EQ(r.trace_id, TraceId(1));
  EXPECT_EQ(r.method, kPush);
  EXPECT_EQ(r.worker, "worker:0");
  EXPECT_EQ(r.ps, "ps:0");
  EXPECT_DOUBLE_EQ(r.duration_ms, 310);
  ASSERT_TRUE(r.server_ms && r.network_ms && r.queue_ms && r.apply_ms);
  EXPECT_DOUBLE_EQ(*r.server_ms, 303);
  EXPECT_DOUBLE_EQ(*r.network_ms, 7);
  EXPECT_DOUBLE_EQ(*r.queue_ms, 300);
  EXPECT_DOUBLE_EQ(*r.apply_ms, 2);
  EXPECT_FALSE(r.read_ms.has_value());
  EXPECT_EQ(r.client_span_id, SpanId(10));
  EXPECT_EQ(r.server_parent_span_id, r.client_span_id);
  EXPECT_EQ(r.status, "OK");
  EXPECT_EQ(r.deadline_ms, 2000);
}

TEST(TraceStore, BreakdownFromServerSpanEvents) {
  TraceStore store;
  SpanRecord server = Server(1, 50, kPull);
  server.events.push_back({"ps.queue", 0, 40'000'000});
  server.events.push_back({"ps.read", 0, 9'000'000});
  server.events.push_back({"other", 0, 1});
  store.Add({Client(1, 55, kPull), server}, 0);
  auto slow = store.Slow({}, 0);
  ASSERT_EQ(slow.size(), 1u);
  ASSERT_TRUE(slow[0].queue_ms && slow[0].read_ms);
  EXPECT_DOUBLE_EQ(*slow[0].queue_ms, 40);
  EXPECT_DOUBLE_EQ(*slow[0].read_ms, 9);
  EXPECT_FALSE(slow[0].apply_ms.has_value());
}

TEST(TraceStore, SlowestFirstTopNPerMethodAndPs) {
  TraceStoreOptions o;
  o.slow_per_key = 3;
  TraceStore store(o);
  for (int i = 0; i < 10; ++i) store.Add({Client(i, 10 + i)}, 0);
  store.Add({Client(20, 5, kPull, "ps:1")}, 0);
  store.Add({Client(21, 15, kPull, "ps:1")}, 0);
  auto slow = store.Slow({}, 1);
  ASSERT_EQ(slow.size(), 5u);
  std::vector<double> got;
  for (const auto& r : slow) got.push_back(r.duration_ms);
  EXPECT_EQ(got, (std::vector<double>{19, 18, 17, 15, 5}));

  auto pull = store.Slow({.method = "Pull", .ps = "ps:1", .limit = 1}, 1);
  ASSERT_EQ(pull.size(), 1u);
  EXPECT_DOUBLE_EQ(pull[0].duration_ms, 15);
  EXPECT_EQ(store.Slow({.method = kPush, .ps = "ps:9"}, 1).size(), 0u);
  EXPECT_EQ(store.Slow({.method = kPush, .ps = ""}, 1).size(), 3u);
}

TEST(TraceStore, WindowExpiresOldSlowRequests) {
  TraceStoreOptions o;
  o.slow_window_s = 60;
  o.window_buckets = 6;  // 10 s buckets.
  o.join_window_s = 5;
  TraceStore store(o);
  store.Add({Client(1, 1000)}, 0);
  store.Add({Client(2, 10)}, 30);
  auto slow = store.Slow({}, 65);
  ASSERT_EQ(slow.size(), 2u);
  EXPECT_EQ(slow[0].trace_id, TraceId(1));
  slow = store.Slow({}, 71);
  ASSERT_EQ(slow.size(), 1u);
  EXPECT_EQ(slow[0].trace_id, TraceId(2));
  EXPECT_FALSE(store.Trace(TraceId(1), 71).has_value());  // Its spans are gone too.
  EXPECT_TRUE(store.Trace(TraceId(2), 71).has_value());
  EXPECT_EQ(store.Slow({}, 200).size(), 0u);
  EXPECT_EQ(store.stats().spans_kept, 0);
}

TEST(TraceStore, OrdinaryRequestsForgottenAfterTheJoinWindow) {
  TraceStoreOptions o;
  o.slow_per_key = 2;
  o.join_window_s = 10;
  TraceStore store(o);
  for (int i = 0; i < 20; ++i) store.Add({Client(i, 100 - i), Server(i, 90 - i)}, 0);
  EXPECT_EQ(store.stats().traces_kept, 20);  // All may still be joined.
  store.Slow({}, 11);
  TraceStoreStats st = store.stats();
  EXPECT_EQ(st.traces_kept, 2);
  EXPECT_EQ(st.spans_kept, 4);
  EXPECT_EQ(st.dropped_evicted, 0);
}

TEST(TraceStore, FailedRequestsKeptBeyondTheWindow) {
  TraceStoreOptions o;
  o.slow_window_s = 60;
  o.join_window_s = 5;
  TraceStore store(o);
  SpanRecord late = Client(1, 2000);
  late.grpc_status_code = 4;
  late.status_code = 2;
  late.status_message = "Deadline Exceeded";
  SpanRecord refused = Server(2, 1, kPull, "ps:1");
  refused.grpc_status_code = 3;
  refused.status_code = 2;
  refused.status_message = "dtype mismatch";
  store.Add({late}, 0);
  store.Add({refused}, 1);
  store.Add({Client(3, 5)}, 2);
  auto errors = store.Errors({}, 500);
  ASSERT_EQ(errors.size(), 2u);
  EXPECT_EQ(errors[0].trace_id, TraceId(2));  // Newest first.
  EXPECT_EQ(errors[0].status, "INVALID_ARGUMENT");
  EXPECT_EQ(errors[1].status, "DEADLINE_EXCEEDED");
  EXPECT_EQ(errors[1].error, "Deadline Exceeded");
  EXPECT_TRUE(errors[1].failed);
  EXPECT_EQ(store.Errors({.method = "Pull", .ps = ""}, 500).size(), 1u);
  EXPECT_FALSE(store.Trace(TraceId(3), 500).has_value());
  EXPECT_EQ(store.Slow({}, 500).size(), 0u);
}

TEST(TraceStore, ErrorTraceCountIsBounded) {
  TraceStoreOptions o;
  o.max_error_traces = 5;
  o.join_window_s = 1;
  o.slow_per_key = 1;
  TraceStore store(o);
  for (int i = 0; i < 20; ++i) {
    SpanRecord s = Client(i, 1);
    s.status_code = 2;
    store.Add({s}, i * 0.01);
  }
  auto errors = store.Errors({}, 100);
  ASSERT_EQ(errors.size(), 5u);
  EXPECT_EQ(errors[0].trace_id, TraceId(19));
  EXPECT_EQ(store.stats().traces_kept, 6);  // 5 failed, and the slowest (trace 0) of the window.
}

TEST(TraceStore, MemoryStaysWithinBudgetAndKeepsTheSlowest) {
  TraceStoreOptions o;
  o.memory_bytes = 64 << 10;
  o.slow_per_key = 3;
  TraceStore store(o);
  store.Add({Client(0, 5000), Server(0, 4990), Child(0, 0, "ps.queue", 4980)}, 0);
  for (int i = 1; i < 5000; ++i) {
    store.Add({Client(i, 1 + i % 7), Server(i, 1), Child(i, 0, "ps.queue", 0.5)}, i * 0.001);
    ASSERT_LE(store.stats().bytes_kept, static_cast<int64_t>(o.memory_bytes));
  }
  TraceStoreStats st = store.stats();
  EXPECT_GT(st.dropped_evicted, 0);
  auto slow = store.Slow({}, 6);
  ASSERT_FALSE(slow.empty());
  EXPECT_EQ(slow[0].trace_id, TraceId(0));
  ASSERT_TRUE(slow[0].queue_ms.has_value());
  EXPECT_DOUBLE_EQ(*slow[0].queue_ms, 4980);
}

TEST(TraceStore, DuplicatesAndRunawayTracesAreRefused) {
  TraceStoreOptions o;
  o.max_spans_per_trace = 4;
  TraceStore store(o);
  store.Add({Client(1, 10), Client(1, 10)}, 0);
  EXPECT_EQ(store.stats().dropped_duplicate, 1);
  std::vector<SpanRecord> many;
  for (int i = 0; i < 6; ++i) many.push_back(Child(1, i, "x", 1));
  store.Add(many, 0);
  TraceStoreStats st = store.stats();
  EXPECT_EQ(st.dropped_trace_full, 3);
  EXPECT_EQ(st.spans_kept, 4);
}

TEST(TraceStore, TraceDetailAndJson) {
  TraceStore store;
  store.Add({Client(7, 30), Server(7, 20), Child(7, 0, "ps.queue", 15)}, 0);
  auto d = store.Trace(TraceId(7), 0);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->spans.size(), 3u);
  ASSERT_EQ(d->requests.size(), 1u);
  const auto detail = nlohmann::json::parse(ApiJson(ToProto(*d)));
  ASSERT_EQ(detail["spans"].size(), 3u) << detail.dump();
  EXPECT_EQ(detail["spans"][1]["kind"], "server") << detail.dump();
  EXPECT_EQ(detail["requests"][0]["trace_id"], detail["trace_id"]) << detail.dump();
  const auto list = nlohmann::json::parse(ApiJson(ToRequestList(store.Slow({}, 0), 300, 10)));
  const auto& r = list["requests"][0];
  EXPECT_EQ(r["queue_ms"], 15) << list.dump();
  EXPECT_FALSE(r.contains("apply_ms")) << "unknown: absent, not null; " << list.dump();
  EXPECT_EQ(r["network_ms"], 10) << list.dump();
  EXPECT_EQ(r["has_client"], true) << list.dump();
  EXPECT_EQ(r["error"], "") << "fields without presence are always printed; " << list.dump();
  EXPECT_EQ(list["window_s"], 300) << list.dump();
  EXPECT_EQ(list["per_key"], 10) << list.dump();
  EXPECT_EQ(r["start_time"], "2023-11-14T22:13:20.000Z") << list.dump();
  const auto errors = nlohmann::json::parse(ApiJson(ToRequestList(store.Errors({}, 0))));
  EXPECT_FALSE(errors.contains("window_s")) << errors.dump();
}

TEST(TraceStore, HexAndCodeNames) {
  EXPECT_EQ(HexId(std::string("\x01\xab\xff", 3)), "01abff");
  EXPECT_EQ(GrpcCodeName(4), "DEADLINE_EXCEEDED");
  EXPECT_EQ(GrpcCodeName(99), "CODE_99");
}

TEST(TraceStore, RequestsMarkedSlowAreListedWhateverTheirRankWithinTheWindow) {
  TraceStoreOptions o;
  o.slow_per_key = 2;
  o.slow_window_s = 60;
  TraceStore store(o);
  // Ten requests a task kept as slow (150 ms and up), and three faster ordinary ones.
  for (int i = 0; i < 10; ++i) {
    SpanRecord c = Client(i, 150 + i);
    SpanRecord s = Server(i, 140 + i);
    c.kept = "slow";
    s.kept = i % 2 ? "requested" : "slow";
    store.Add({c, s}, i * 0.1);
  }
  for (int i = 10; i < 13; ++i) store.Add({Client(i, 200 + i)}, 1);
  RequestFilter all;
  all.limit = 100;
  auto slow = store.Slow(all, 2);
  // The top 2 of the key (the ordinary 212 and 211 ms) and all ten marked ones, slowest first.
  ASSERT_EQ(slow.size(), 12u);
  EXPECT_DOUBLE_EQ(slow[0].duration_ms, 212);
  EXPECT_DOUBLE_EQ(slow[1].duration_ms, 211);
  EXPECT_TRUE(slow[0].kept.empty());
  for (size_t i = 2; i < slow.size(); ++i) {
    EXPECT_TRUE(slow[i].has_client && slow[i].has_server) << i;
    EXPECT_LE(slow[i].duration_ms, slow[i - 1].duration_ms);
  }
  EXPECT_EQ(slow[2].kept, "slow,requested");  // 159 ms: both halves' reasons, once each.
  EXPECT_EQ(slow[3].kept, "slow");
  EXPECT_EQ(nlohmann::json::parse(ApiJson(ToRequestList(slow)))["requests"][2]["kept"],
            "slow,requested");
  // Marks last as long as the window.
  EXPECT_EQ(store.Slow(all, 30).size(), 12u);
  EXPECT_EQ(store.Slow(all, 70).size(), 0u);
  EXPECT_EQ(store.stats().traces_kept, 0);
}

TEST(TraceStore, MarksBeyondTheirBoundAreForgottenOldestFirst) {
  TraceStoreOptions o;
  o.slow_per_key = 1;
  o.max_marked_traces = 3;
  TraceStore store(o);
  for (int i = 0; i < 6; ++i) {
    SpanRecord c = Client(i, 500 - i);
    c.kept = "deadline";
    store.Add({c}, i);
  }
  RequestFilter all;
  all.limit = 100;
  auto slow = store.Slow(all, 20);  // Past the join window: only pinned traces remain.
  // The slowest of the key (trace 0) and the three newest marks (traces 3, 4, 5).
  ASSERT_EQ(slow.size(), 4u);
  EXPECT_EQ(slow[0].trace_id, TraceId(0));
  EXPECT_EQ(slow[1].trace_id, TraceId(3));
  EXPECT_EQ(slow[3].trace_id, TraceId(5));
}

}  // namespace
}  // namespace trainscope::sidecar
