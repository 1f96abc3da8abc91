// The cost of tracing one RPC on the caller's thread: NewContext, filling a SpanData the way an
// interceptor would, and handing it to the BatchSpanProcessor (whose exporter discards).
// Single-threaded and with 2 threads. Also OnEnd while the export cannot keep up (an exporter
// stuck in Export, a collector that refuses connections), with the slowest call of the run: the
// figures the unit tests leave to this program. Not run by ctest:
//   build/bin/tracing_benchmark --benchmark_min_time=1
#include <arpa/inet.h>
#include <benchmark/benchmark.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>

#include "trainscope/telemetry/batch_span_processor.h"
#include "trainscope/telemetry/otlp_exporter.h"
#include "trainscope/telemetry/tracing.h"

namespace trainscope::telemetry {
namespace {

// Takes batches and throws them away, as fast as the processor hands them over.
class DiscardingExporter : public SpanExporter {
 public:
  absl::Status Export(std::vector<SpanData>& batch) override { return absl::OkStatus(); }
};

struct Pipeline {
  TracingStats stats;
  BatchSpanProcessor processor{std::make_unique<DiscardingExporter>(), BatchSpanProcessorOptions{},
                               &stats};
  Tracer tracer{SamplerOptions{}, &processor, &stats};
};

Pipeline* shared_pipeline = nullptr;

void Setup(const benchmark::State& state) { shared_pipeline = new Pipeline; }

void Teardown(const benchmark::State& state) {
  delete shared_pipeline;
  shared_pipeline = nullptr;
}

// What a client interceptor records for one Pull.
SpanData FillSpan(Tracer& tracer, const SpanContext& parent) {
  SpanData span;
  span.context = tracer.NewContext(&parent);
  span.parent_span_id = parent.span_id;
  span.name = "trainscope.v1.ParameterService/Pull";
  span.kind = SpanKind::kClient;
  span.start_unix_nano = NowUnixNanos();
  span.attributes.reserve(5);
  span.attributes.push_back({"rpc.system", std::string("grpc")});
  span.attributes.push_back({"rpc.method", std::string("Pull")});
  span.attributes.push_back({"trainscope.peer_task", std::string("ps:3")});
  span.attributes.push_back({"trainscope.request_bytes", int64_t{4096}});
  span.attributes.push_back({"rpc.grpc.status_code", int64_t{0}});
  span.end_unix_nano = NowUnixNanos();
  span.status_code = kStatusUnset;
  return span;
}

void BM_NewContext(benchmark::State& state) {
  Tracer tracer(SamplerOptions{}, nullptr);
  SpanContext parent = tracer.NewContext(nullptr);
  for (auto _ : state) {
    SpanContext context = tracer.NewContext(&parent);
    benchmark::DoNotOptimize(context);
  }
}
BENCHMARK(BM_NewContext);

void BM_FillSpanOnly(benchmark::State& state) {
  Tracer tracer(SamplerOptions{}, nullptr);
  SpanContext parent = tracer.NewContext(nullptr);
  for (auto _ : state) {
    SpanData span = FillSpan(tracer, parent);
    benchmark::DoNotOptimize(span);
  }
}
BENCHMARK(BM_FillSpanOnly);

void BM_TraceOneCall(benchmark::State& state) {
  Tracer& tracer = shared_pipeline->tracer;
  SpanContext parent = tracer.NewContext(nullptr);
  for (auto _ : state) tracer.End(FillSpan(tracer, parent));
  if (state.thread_index() == 0) {
    state.counters["dropped"] = static_cast<double>(shared_pipeline->stats.spans_dropped.load());
    state.counters["exported"] = static_cast<double>(shared_pipeline->stats.spans_exported.load());
  }
}
BENCHMARK(BM_TraceOneCall)->Setup(Setup)->Teardown(Teardown)->Threads(1)->Threads(2)->UseRealTime();

// OnEnd alone: a mutex and a push_back of a moved SpanData. Spans are built in blocks of 1024
// with the timer paused.
void BM_OnEndOnly(benchmark::State& state) {
  Tracer& tracer = shared_pipeline->tracer;
  SpanContext parent = tracer.NewContext(nullptr);
  std::vector<SpanData> spans(1024);
  size_t next = spans.size();
  for (auto _ : state) {
    if (next == spans.size()) {
      state.PauseTiming();
      for (SpanData& span : spans) span = FillSpan(tracer, parent);
      next = 0;
      state.ResumeTiming();
    }
    shared_pipeline->processor.OnEnd(std::move(spans[next++]));
  }
  if (state.thread_index() == 0) {
    state.counters["dropped"] = static_cast<double>(shared_pipeline->stats.spans_dropped.load());
    state.counters["exported"] = static_cast<double>(shared_pipeline->stats.spans_exported.load());
  }
}
BENCHMARK(BM_OnEndOnly)->Setup(Setup)->Teardown(Teardown)->Threads(1)->Threads(2)->UseRealTime();

// Blocks in Export until Release(), as an exporter stuck on a hung collector.
class StuckExporter : public SpanExporter {
 public:
  absl::Status Export(std::vector<SpanData>& batch) override {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return released_; });
    return absl::OkStatus();
  }
  void Release() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      released_ = true;
    }
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool released_ = false;
};

// A loopback port bound and never listened on: connections to it are refused.
class RefusingPort {
 public:
  RefusingPort() {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
        getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
      port_ = ntohs(addr.sin_port);
    }
  }
  ~RefusingPort() { close(fd_); }
  RefusingPort(const RefusingPort&) = delete;
  RefusingPort& operator=(const RefusingPort&) = delete;
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

// Runs OnEnd once per iteration; only the call is timed (manual time: building the span is
// not), and the slowest call goes into the counter slowest_us.
void TimeOnEnd(benchmark::State& state, BatchSpanProcessor& processor) {
  Tracer tracer(SamplerOptions{}, nullptr);
  SpanContext parent = tracer.NewContext(nullptr);
  auto slowest = std::chrono::steady_clock::duration::zero();
  for (auto _ : state) {
    SpanData span = FillSpan(tracer, parent);
    const auto start = std::chrono::steady_clock::now();
    processor.OnEnd(std::move(span));
    const auto took = std::chrono::steady_clock::now() - start;
    slowest = std::max(slowest, took);
    state.SetIterationTime(std::chrono::duration<double>(took).count());
  }
  state.counters["slowest_us"] = std::chrono::duration<double, std::micro>(slowest).count();
}

// OnEnd on a full queue whose exporter is stuck: every span is dropped.
void BM_OnEndFullQueue(benchmark::State& state) {
  auto exporter = std::make_unique<StuckExporter>();
  StuckExporter* stuck = exporter.get();
  TracingStats stats;
  BatchSpanProcessor processor(
      std::move(exporter),
      {.max_queue_size = 8, .max_export_batch_size = 4, .schedule_delay_ms = 3600 * 1000}, &stats);
  TimeOnEnd(state, processor);
  state.counters["dropped"] = static_cast<double>(stats.spans_dropped.load());
  stuck->Release();
}
BENCHMARK(BM_OnEndFullQueue)->UseManualTime();

// OnEnd while every export fails: the OTLP exporter aimed at a port that refuses connections.
void BM_OnEndDeadCollector(benchmark::State& state) {
  RefusingPort refusing;
  OtlpExporterOptions options;
  options.endpoint = "127.0.0.1:" + std::to_string(refusing.port());
  options.timeout_ms = 2000;
  absl::StatusOr<std::unique_ptr<OtlpGrpcExporter>> exporter = OtlpGrpcExporter::Create(options);
  if (!exporter.ok()) {
    state.SkipWithError(std::string(exporter.status().message()).c_str());
    return;
  }
  TracingStats stats;
  BatchSpanProcessor processor(
      std::move(*exporter),
      {.max_queue_size = 128, .max_export_batch_size = 8, .schedule_delay_ms = 20}, &stats);
  TimeOnEnd(state, processor);
  state.counters["export_failures"] = static_cast<double>(stats.export_failures.load());
}
BENCHMARK(BM_OnEndDeadCollector)->UseManualTime();

void BM_FormatParseTraceparent(benchmark::State& state) {
  Tracer tracer(SamplerOptions{}, nullptr);
  SpanContext context = tracer.NewContext(nullptr);
  for (auto _ : state) {
    std::optional<SpanContext> parsed = ParseTraceparent(FormatTraceparent(context));
    benchmark::DoNotOptimize(parsed);
  }
}
BENCHMARK(BM_FormatParseTraceparent);

}  // namespace
}  // namespace trainscope::telemetry

BENCHMARK_MAIN();
