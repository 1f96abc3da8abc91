// What the cluster key costs one exchange message (exchange_keys.h), against what the message
// costs anyway: a Ping carrying 40 nodes' records (about 32 KiB, the gossip budget) parsed and
// serialized once, as gRPC does, versus signed, and verified.
//   build/bin/exchange_keys_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only
#include <benchmark/benchmark.h>

#include <string>

#include "trainscope/sidecar/exchange_keys.h"
#include "trainscope/sidecar/v1/sidecar.pb.h"

namespace {

namespace v1 = trainscope::sidecar::v1;
using trainscope::sidecar::ExchangeKeys;

constexpr double kNow = 1.7e9;

v1::PingRequest FortyNodes() {
  v1::PingRequest req;
  req.mutable_header()->set_cluster("bench");
  req.mutable_header()->set_node("10.0.0.1:4317");
  req.set_target("10.0.0.2:4317");
  for (int n = 0; n < 40; ++n) {
    v1::NodeRecord* r = req.mutable_gossip()->add_records();
    r->set_node("10.0.0." + std::to_string(n) + ":4317");
    r->set_version(1000 + n);
    r->set_made_at(kNow);
    v1::TaskView* t = r->add_tasks();
    t->set_role("worker");
    t->set_task(n);
    t->set_name("worker:" + std::to_string(n));
    t->set_state("up");
    t->set_reason(std::string(600, 'r'));
  }
  return req;
}

void BM_ParseAndSerialize(benchmark::State& state) {
  const std::string wire = FortyNodes().SerializeAsString();
  for (auto _ : state) {
    v1::PingRequest req;
    req.ParseFromString(wire);
    benchmark::DoNotOptimize(req.SerializeAsString());
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(wire.size()));
}
BENCHMARK(BM_ParseAndSerialize);

void BM_Sign(benchmark::State& state) {
  auto keys = *ExchangeKeys::FromSecrets({"bench-cluster-key-0123456789abcdef"});
  v1::PingRequest req = FortyNodes();
  for (auto _ : state) keys->Sign(&req, kNow);
}
BENCHMARK(BM_Sign);

void BM_Verify(benchmark::State& state) {
  auto keys = *ExchangeKeys::FromSecrets({"bench-cluster-key-0123456789abcdef"});
  v1::PingRequest req = FortyNodes();
  double now = kNow;
  for (auto _ : state) {
    state.PauseTiming();
    now += 1e-6;  // A new message each time (else it is refused as a replay before the MAC).
    keys->Sign(&req, now);
    state.ResumeTiming();
    benchmark::DoNotOptimize(keys->Verify(req, now).ok());
  }
}
BENCHMARK(BM_Verify);

}  // namespace

BENCHMARK_MAIN();
