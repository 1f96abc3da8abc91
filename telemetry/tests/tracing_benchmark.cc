// The cost of tracing one RPC on the caller's thread: NewContext, filling a SpanData the way an
// interceptor would, and handing it to the BatchSpanProcessor (whose exporter discards).
// Single-threaded and with 2 threads. Not run by ctest:
//   build/bin/tracing_benchmark --benchmark_min_time=1
#include <benchmark/benchmark.h>

#include <memory>

#include "trainscope/telemetry/batch_span_processor.h"
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
