// Pull+Push round trips through the runtime (a real ps task and a worker's ParameterClient, over
// loopback gRPC) against a bare gRPC unary service moving the same payloads, in the same run.
// Prints, per payload size, the median time per round trip of each and the ratio of their rates
// (runtime rate / bare rate; 1.0 = no overhead).
//
//   build/bin/ps_bench [--rounds 15] [--seconds_per_round 0.3] [--checkpoint_dir DIR]
//
// --checkpoint_dir: the ps starts with it and restores the checkpoint there (one written by a
// one-ps cluster, e.g. linear_regression's), so that it serves as a restored ps does.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "bench_util.h"
#include "echo.grpc.pb.h"
#include "process.h"
#include "spdlog/spdlog.h"
#include "trainscope/common/cluster_spec.h"
#include "trainscope/runtime/parameter_client.h"
#include "trainscope/runtime/task.h"

namespace trainscope {
namespace {

class EchoService final : public bench::Echo::Service {
 public:
  grpc::Status Get(grpc::ServerContext*, const bench::GetRequest* request,
                   bench::Payload* response) override {
    if (static_cast<int64_t>(stored_.size()) != request->size())
      stored_.assign(request->size(), 'x');
    response->set_content(stored_);  // One copy, as a ps copies its variable out.
    return grpc::Status::OK;
  }
  grpc::Status Put(grpc::ServerContext*, const bench::Payload* request, bench::Empty*) override {
    sink_ += request->content().empty() ? 0 : request->content()[0];
    return grpc::Status::OK;
  }

 private:
  std::string stored_;
  char sink_ = 0;
};

using Clock = std::chrono::steady_clock;

// Runs `op` repeatedly for `seconds`; returns the mean seconds per op.

int Run(int rounds, double seconds_per_round, const std::string& checkpoint_dir) {
  spdlog::set_level(spdlog::level::warn);
  const std::string ps_addr = "127.0.0.1:" + std::to_string(testing::FreePort());
  const std::string worker_addr = "127.0.0.1:" + std::to_string(testing::FreePort());
  const std::string echo_addr = "127.0.0.1:" + std::to_string(testing::FreePort());
  auto spec = ClusterSpec::FromJobs({{"ps", {ps_addr}}, {"worker", {worker_addr}}});
  RuntimeOptions options;
  options.rpc_deadline_ms = 60000;
  // The data path alone; telemetry_bench measures what telemetry adds.
  options.telemetry = false;
  options.metrics_port = -1;
  RuntimeOptions ps_options = options;
  ps_options.checkpoint_dir = checkpoint_dir;
  auto ps = Task::Start(ps_options, TfConfig{*spec, TaskRef{"ps", 0}});
  if (!ps.ok()) {
    fprintf(stderr, "cannot start the ps: %s\n", ps.status().ToString().c_str());
    return 1;
  }

  EchoService echo;
  grpc::ServerBuilder builder;
  builder.AddListeningPort(echo_addr, grpc::InsecureServerCredentials());
  builder.SetMaxReceiveMessageSize(-1);
  builder.SetMaxSendMessageSize(-1);
  builder.RegisterService(&echo);
  auto echo_server = builder.BuildAndStart();
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  auto echo_stub = bench::Echo::NewStub(
      grpc::CreateCustomChannel(echo_addr, grpc::InsecureChannelCredentials(), args));

  struct Case {
    const char* name;
    int64_t bytes;
  };
  const Case cases[] = {
      {"4 B (small RPC rate)", 4}, {"4 KiB", 4 << 10}, {"1 MiB", 1 << 20}, {"16 MiB", 16 << 20}};
  std::vector<VariableDef> vars;
  for (const Case& c : cases) {
    vars.push_back({c.name, {DType::kFloat, {c.bytes / 4}}, std::string(c.bytes, '\0')});
  }
  printf("%-22s %14s %14s %8s\n", "payload (Pull+Push)", "runtime us", "bare gRPC us", "ratio");
  bool ok = true;
  for (size_t k = 0; k < std::size(cases); ++k) {
    const Case& c = cases[k];
    // A worker session per size, holding only that variable.
    RuntimeOptions o = options;
    o.listen_address = "127.0.0.1:" + std::to_string(testing::FreePort());
    auto w = Task::Start(o, TfConfig{*spec, TaskRef{"worker", 0}});
    if (!w.ok()) {
      fprintf(stderr, "cannot start a worker: %s\n", w.status().ToString().c_str());
      return 1;
    }
    auto cl = (*w)->CreateSession();
    if (!cl.ok() || !(*cl)->CreateVariables({vars[k]}).ok()) {
      fprintf(stderr, "cannot create variable for %s\n", c.name);
      return 1;
    }
    ParameterClient* pc = *cl;
    const std::string gradient(c.bytes, '\0');
    std::vector<std::string> values;
    std::vector<double> runtime_times, bare_times;
    const double secs = c.bytes >= (16 << 20) ? seconds_per_round * 2 : seconds_per_round;
    for (int r = 0; r < rounds; ++r) {
      auto runtime_round = [&] {
        runtime_times.push_back(bench::SecondsPerOp(secs, [&] {
          ok &= pc->PullAll(&values).ok();
          ok &= pc->Push(0, gradient, 0.0f).ok();
        }));
      };
      auto bare_round = [&] {
        bare_times.push_back(bench::SecondsPerOp(secs, [&] {
          {
            grpc::ClientContext ctx;
            bench::GetRequest req;
            req.set_size(c.bytes);
            bench::Payload resp;
            ok &= echo_stub->Get(&ctx, req, &resp).ok();
          }
          {
            grpc::ClientContext ctx;
            bench::Payload req;
            req.set_content(gradient);
            bench::Empty resp;
            ok &= echo_stub->Put(&ctx, req, &resp).ok();
          }
        }));
      };
      // Alternate which goes first, so that neither always follows the other.
      if (r % 2 == 0) {
        runtime_round();
        bare_round();
      } else {
        bare_round();
        runtime_round();
      }
    }
    const double rt = bench::Median(runtime_times);
    const double bt = bench::Median(bare_times);
    printf("%-22s %14.1f %14.1f %8.2f\n", c.name, rt * 1e6, bt * 1e6, bt / rt);
  }
  echo_server->Shutdown();
  if (!ok) {
    fprintf(stderr, "some calls failed\n");
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace trainscope

int main(int argc, char** argv) {
  const trainscope::bench::RoundOptions o = trainscope::bench::ParseRoundOptions(argc, argv);
  std::string checkpoint_dir;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--checkpoint_dir") == 0) checkpoint_dir = argv[i + 1];
  }
  return trainscope::Run(o.rounds, o.seconds_per_round, checkpoint_dir);
}
