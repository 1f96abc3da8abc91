// What telemetry costs, measured in one run:
//  1. Pull+Push round trips of a worker against a ps with telemetry fully on (A66 metrics,
//     per-peer counters, a span per call on both sides at 100% sampling, exported over OTLP to
//     an in-process collector) versus off, interleaved rounds; the ratio of their rates.
//  2. The recorders alone, in ns per call: prometheus-cpp's Histogram::Observe (a mutex) and
//     our AtomicHistogram::Observe, on one thread and on two threads contending, and one
//     call's full client-side recording.
//
//   build/bin/telemetry_bench [--rounds 15] [--seconds_per_round 0.3]
//   build/bin/telemetry_bench --profile off|metrics|on ROUND_TRIPS   (one set-up, for a profiler)
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "bench_util.h"
#include "opentelemetry/proto/collector/trace/v1/trace_service.grpc.pb.h"
#include "process.h"
#include "prometheus/histogram.h"
#include "spdlog/spdlog.h"
#include "trainscope/common/cluster_spec.h"
#include "trainscope/runtime/parameter_client.h"
#include "trainscope/runtime/task.h"
#include "trainscope/telemetry/metrics.h"
#include "trainscope/telemetry/names.h"

namespace trainscope {
namespace {

namespace otlp = opentelemetry::proto::collector::trace::v1;
using Clock = std::chrono::steady_clock;

// Accepts spans and counts them, as a collector would.
class Collector final : public otlp::TraceService::Service {
 public:
  grpc::Status Export(grpc::ServerContext*, const otlp::ExportTraceServiceRequest* request,
                      otlp::ExportTraceServiceResponse*) override {
    for (const auto& rs : request->resource_spans()) {
      for (const auto& ss : rs.scope_spans()) spans += ss.spans_size();
    }
    return grpc::Status::OK;
  }
  std::atomic<int64_t> spans{0};
};

// ns per call of `op` run by `threads` threads at once (each thread's own mean, averaged).
template <typename Op>
double NanosPerCall(int threads, Op op) {
  constexpr int64_t kCalls = 2'000'000;
  std::vector<double> per_thread(threads);
  std::vector<std::thread> pool;
  std::atomic<int> ready{0};
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      ready.fetch_add(1);
      while (ready.load() < threads) {
      }
      const auto start = Clock::now();
      for (int64_t i = 0; i < kCalls; ++i) op(static_cast<double>(i % 1000) * 1e-5);
      per_thread[t] =
          std::chrono::duration<double, std::nano>(Clock::now() - start).count() / kCalls;
    });
  }
  for (auto& th : pool) th.join();
  double sum = 0;
  for (double v : per_thread) sum += v;
  return sum / threads;
}

struct Pair {
  std::unique_ptr<Task> ps;
  std::unique_ptr<Task> worker;
  ParameterClient* client = nullptr;
};

Pair StartPair(bool telemetry, bool tracing) {
  const std::string ps_addr = "127.0.0.1:" + std::to_string(testing::FreePort());
  const std::string worker_addr = "127.0.0.1:" + std::to_string(testing::FreePort());
  auto spec = ClusterSpec::FromJobs({{"ps", {ps_addr}}, {"worker", {worker_addr}}});
  RuntimeOptions options;
  options.rpc_deadline_ms = 60000;
  options.telemetry = telemetry;
  options.tracing = tracing;
  options.metrics_port = telemetry ? 0 : -1;
  Pair p;
  p.ps = *Task::Start(options, TfConfig{*spec, TaskRef{"ps", 0}});
  p.worker = *Task::Start(options, TfConfig{*spec, TaskRef{"worker", 0}});
  p.client = *p.worker->CreateSession();
  std::vector<VariableDef> vars = {{"w", {DType::kFloat, {1024}}, std::string(4096, '\0')}};
  if (!p.client->CreateVariables(vars).ok()) std::abort();
  return p;
}

// Starts one configuration ("off", "metrics", "on") and runs `round_trips` round trips only,
// for a profiler: callgrind's instruction counts at two values of `round_trips` give the cost of
// one round trip without the set-up.
int Profile(const std::string& mode, int64_t round_trips) {
  spdlog::set_level(spdlog::level::warn);
  Collector collector;
  const int collector_port = testing::FreePort();
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:" + std::to_string(collector_port),
                           grpc::InsecureServerCredentials());
  builder.RegisterService(&collector);
  auto server = builder.BuildAndStart();
  setenv("OTEL_EXPORTER_OTLP_ENDPOINT",
         ("http://127.0.0.1:" + std::to_string(collector_port)).c_str(), 1);
  Pair p = StartPair(mode != "off", mode == "on");
  const std::string gradient(4096, '\0');
  std::vector<std::string> values;
  for (int64_t i = 0; i < round_trips; ++i) {
    if (!p.client->PullAll(&values).ok() || !p.client->Push(0, gradient, 0.0f).ok()) std::abort();
  }
  p.worker.reset();
  p.ps.reset();
  printf("%lld round trips, %lld spans received by the collector\n",
         static_cast<long long>(round_trips), static_cast<long long>(collector.spans.load()));
  server->Shutdown();
  return 0;
}

// One configuration of the comparison: telemetry on/off, tracing on/off, the sampler's env.
struct Setup {
  const char* name;
  bool telemetry;
  bool tracing;
  const char* sampler;  // OTEL_TRACES_SAMPLER; nullptr: unset (the shipped default)
  const char* sampler_arg;
  Pair pair;
  std::vector<double> seconds;      // wall, per round trip, one per round
  std::vector<double> cpu_seconds;  // the process's CPU (both tasks, every thread), per round trip
};

Pair StartSetup(const Setup& s) {
  if (s.sampler == nullptr) {
    unsetenv("OTEL_TRACES_SAMPLER");
  } else {
    setenv("OTEL_TRACES_SAMPLER", s.sampler, 1);
  }
  if (s.sampler_arg == nullptr) {
    unsetenv("OTEL_TRACES_SAMPLER_ARG");
  } else {
    setenv("OTEL_TRACES_SAMPLER_ARG", s.sampler_arg, 1);
  }
  return StartPair(s.telemetry, s.tracing);
}

int Run(int rounds, double seconds_per_round) {
  spdlog::set_level(spdlog::level::warn);
  // An in-process OTLP collector for the spans.
  Collector collector;
  const int collector_port = testing::FreePort();
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:" + std::to_string(collector_port),
                           grpc::InsecureServerCredentials());
  builder.RegisterService(&collector);
  auto server = builder.BuildAndStart();
  setenv("OTEL_EXPORTER_OTLP_ENDPOINT",
         ("http://127.0.0.1:" + std::to_string(collector_port)).c_str(), 1);

  Setup setups[] = {
      {"telemetry off", false, false, nullptr, nullptr, {}, {}, {}},
      {"metrics only", true, false, nullptr, nullptr, {}, {}, {}},
      {"default (tail + 1%)", true, true, nullptr, nullptr, {}, {}, {}},
      {"10% sampled", true, true, "traceidratio", "0.1", {}, {}, {}},
      {"100% sampled", true, true, "always_on", nullptr, {}, {}, {}},
  };
  for (Setup& s : setups) s.pair = StartSetup(s);
  const std::string gradient(4096, '\0');
  std::vector<std::string> values;
  for (int r = 0; r < rounds; ++r) {
    for (Setup& s : setups) {
      const bench::PerOp t = bench::WallAndCpuPerOp(seconds_per_round, [&] {
        if (!s.pair.client->PullAll(&values).ok() || !s.pair.client->Push(0, gradient, 0.0f).ok()) {
          std::abort();
        }
      });
      s.seconds.push_back(t.wall);
      s.cpu_seconds.push_back(t.cpu);
    }
  }
  printf("Pull+Push of a 4 KiB variable, worker and ps on loopback, %d interleaved rounds\n",
         rounds);
  printf("  %-20s %10s %10s %12s %12s\n", "set-up", "us/trip", "rate/off", "rounds", "CPU us/trip");
  printf("  %-20s %10s %10s %12s %12s\n", "", "(median)", "(medians)", "(min-max)", "(CPU/off)");
  const Setup& off = setups[0];
  for (const Setup& s : setups) {
    std::vector<double> ratios;
    for (size_t r = 0; r < s.seconds.size(); ++r) ratios.push_back(off.seconds[r] / s.seconds[r]);
    printf("  %-20s %10.1f %10.3f  %.2f-%.2f %6.1f (%.3f)\n", s.name,
           bench::Median(s.seconds) * 1e6, bench::Median(off.seconds) / bench::Median(s.seconds),
           *std::min_element(ratios.begin(), ratios.end()),
           *std::max_element(ratios.begin(), ratios.end()), bench::Median(s.cpu_seconds) * 1e6,
           bench::Median(s.cpu_seconds) / bench::Median(off.cpu_seconds));
  }
  printf(
      "  (rate/off: the ratio of median wall times, 1 = free; CPU/off: process CPU per round\n"
      "   trip over telemetry off's, the cost a busy machine's wall clock hides, 1 = free)\n");
  for (Setup& s : setups) {
    s.pair.worker.reset();
    s.pair.ps.reset();
  }
  printf("  spans received by the collector: %lld\n",
         static_cast<long long>(collector.spans.load()));

  printf("\nRecorders, ns per call (1 thread / 2 threads contending on one series)\n");
  prometheus::Histogram prom(std::vector<double>(std::begin(telemetry::names::kLatencyBuckets),
                                                 std::end(telemetry::names::kLatencyBuckets)));
  telemetry::AtomicHistogram ours(telemetry::names::kLatencyBuckets);
  auto prom_observe = [&](double v) { prom.Observe(v); };
  auto our_observe = [&](double v) { ours.Observe(v); };
  printf("  prometheus::Histogram::Observe:     %6.1f / %6.1f\n", NanosPerCall(1, prom_observe),
         NanosPerCall(2, prom_observe));
  printf("  AtomicHistogram::Observe:           %6.1f / %6.1f\n", NanosPerCall(1, our_observe),
         NanosPerCall(2, our_observe));
  telemetry::RpcMetrics rpc({{"ps", 0}, {"worker", 0}});
  const int method = telemetry::RpcMetrics::MethodIndex("trainscope.v1.ParameterService/Pull");
  const int role = rpc.RoleIndex("ps");
  auto client_call = [&](double v) {
    rpc.ClientAttemptStarted(method, role);
    rpc.ClientAttemptEnded(method, 0, role, 0, v, 120, 4200, 5.0);
  };
  printf("  one client call's metrics (A66 +    %6.1f / %6.1f\n", NanosPerCall(1, client_call),
         NanosPerCall(2, client_call));
  printf("    sizes, deadline, per-peer)\n");
  server->Shutdown();
  return 0;
}

}  // namespace
}  // namespace trainscope

int main(int argc, char** argv) {
  for (int i = 1; i + 2 < argc; ++i) {
    if (std::strcmp(argv[i], "--profile") == 0) {
      return trainscope::Profile(argv[i + 1], std::atoll(argv[i + 2]));
    }
  }
  const trainscope::bench::RoundOptions o = trainscope::bench::ParseRoundOptions(argc, argv);
  return trainscope::Run(o.rounds, o.seconds_per_round);
}
