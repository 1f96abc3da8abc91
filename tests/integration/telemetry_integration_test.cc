// A task's telemetry seen from outside: its /metrics carries the gRFC A66 call histograms for
// Pull and Push, deadline-exceeded counts once a ps is slowed past the deadline, process and
// training metrics (GPU ones exactly when NVML reports a GPU here), and passes `promtool check
// metrics`.
#include <dlfcn.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include "nlohmann/json.hpp"
#include "process.h"
#include "trainscope/v1/runtime.grpc.pb.h"

namespace trainscope {
namespace {

using namespace std::chrono_literals;
using testing::Process;

std::string Addr(int port) { return "127.0.0.1:" + std::to_string(port); }

// The value of the first sample whose line starts with `prefix`, or -1.
double Sample(const std::string& metrics, const std::string& prefix) {
  size_t pos = 0;
  while ((pos = metrics.find(prefix, pos)) != std::string::npos) {
    if (pos == 0 || metrics[pos - 1] == '\n') {
      size_t end = metrics.find('\n', pos);
      std::string line = metrics.substr(pos, end - pos);
      return std::stod(line.substr(line.rfind(' ') + 1));
    }
    pos += prefix.size();
  }
  return -1;
}

// The GPUs NVML reports here, asked as the runtime asks (libnvidia-ml.so.1 loaded at run time,
// telemetry/src/system_metrics.cc): 0 without the library, a driver or a device.
unsigned int NvmlDeviceCount() {
  void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) return 0;
  auto init = reinterpret_cast<int (*)()>(dlsym(lib, "nvmlInit_v2"));
  auto count = reinterpret_cast<int (*)(unsigned int*)>(dlsym(lib, "nvmlDeviceGetCount_v2"));
  unsigned int n = 0;
  if (init == nullptr || count == nullptr || init() != 0 || count(&n) != 0) n = 0;
  return n;
}

// The sum of every sample whose line starts with `prefix`.
double SumSamples(const std::string& metrics, const std::string& prefix) {
  double sum = 0;
  size_t pos = 0;
  while ((pos = metrics.find(prefix, pos)) != std::string::npos) {
    if (pos == 0 || metrics[pos - 1] == '\n') {
      size_t end = metrics.find('\n', pos);
      std::string line = metrics.substr(pos, end - pos);
      sum += std::stod(line.substr(line.rfind(' ') + 1));
    }
    pos += prefix.size();
  }
  return sum;
}

void InjectDelay(const std::string& address, int ms) {
  auto stub =
      v1::TaskService::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  v1::InjectFaultRequest request;
  request.set_parameter_delay_ms(ms);
  v1::InjectFaultResponse response;
  ASSERT_TRUE(stub->InjectFault(&context, request, &response).ok());
}

// Polls `port`'s /metrics until `pred` holds; the last body either way.
template <typename Pred>
std::string WaitForMetrics(int port, Pred pred, std::chrono::seconds timeout) {
  std::string body;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  do {
    body = testing::HttpGet("127.0.0.1", port, "/metrics").value_or("");
    if (pred(body)) break;
    std::this_thread::sleep_for(100ms);
  } while (std::chrono::steady_clock::now() < deadline);
  return body;
}

bool PromtoolAccepts(const std::string& metrics, std::string* output) {
  char path[] = "/tmp/trainscope-metrics-XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0) return false;
  std::ofstream(path) << metrics;
  close(fd);
  const std::string command = std::string("promtool check metrics < ") + path + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  char buf[4096];
  while (pipe && fgets(buf, sizeof(buf), pipe)) *output += buf;
  const int rc = pipe ? pclose(pipe) : -1;
  unlink(path);
  return rc == 0;
}

TEST(TelemetryIntegration, TaskMetricsCoverCallsDeadlinesProcessAndTraining) {
  const std::map<std::string, std::vector<std::string>> jobs = {
      {"ps", {Addr(testing::FreePort())}}, {"worker", {Addr(testing::FreePort())}}};
  const int ps_metrics = testing::FreePort();
  const int worker_metrics = testing::FreePort();
  Process ps(testing::BinPath("linear_regression"),
             {"--metrics_port", std::to_string(ps_metrics), "--enable_fault_injection",
              "--disable_tracing"},
             {{"TF_CONFIG", testing::TfConfig(jobs, "ps", 0)}});
  Process worker(
      testing::BinPath("linear_regression"),
      {"--metrics_port", std::to_string(worker_metrics), "--steps", "100000", "--step_delay_ms",
       // A short deadline is the point: calls past it are counted DEADLINE_EXCEEDED (and
       // retried by the runtime, as by default).
       "5", "--rpc_deadline_ms", "300", "--disable_tracing"},
      {{"TF_CONFIG", testing::TfConfig(jobs, "worker", 0)}});
  ASSERT_TRUE(worker.WaitForOutput("training:", 20s)) << worker.Output();

  const std::string pull = "grpc_method=\"trainscope.v1.ParameterService/Pull\"";
  const std::string push = "grpc_method=\"trainscope.v1.ParameterService/Push\"";
  std::string w = WaitForMetrics(
      worker_metrics,
      [](const std::string& m) { return Sample(m, "trainscope_training_steps_total") >= 20; }, 20s);
  // Client side: A66 attempt histograms for Pull and Push with their buckets and peer role.
  EXPECT_GT(Sample(w, "grpc_client_attempt_duration_seconds_count{" + pull +
                          ",grpc_status=\"OK\",peer_role=\"ps\"}"),
            0)
      << w;
  EXPECT_GT(Sample(w, "grpc_client_attempt_duration_seconds_count{" + push +
                          ",grpc_status=\"OK\",peer_role=\"ps\"}"),
            0);
  EXPECT_NE(w.find("grpc_client_attempt_duration_seconds_bucket{" + pull +
                   ",grpc_status=\"OK\",peer_role=\"ps\",le=\"0.0001\"}"),
            std::string::npos);
  EXPECT_GT(Sample(w, "grpc_client_attempt_started_total{" + push + ",peer_role=\"ps\"}"), 0);
  EXPECT_GT(Sample(w, "grpc_client_call_duration_seconds_count{" + pull), 0);
  EXPECT_GT(Sample(w, "trainscope_rpc_client_deadline_seconds_count{" + pull), 0);
  EXPECT_GT(
      Sample(w, "trainscope_rpc_peer_calls_total{" + push + ",peer_role=\"ps\",peer_task=\"0\"}"),
      0);
  // Training and process metrics.
  EXPECT_GE(Sample(w, "trainscope_training_loss"), 0);
  EXPECT_GT(Sample(w, "trainscope_training_step_duration_seconds_count"), 0);
  EXPECT_GT(Sample(w, "trainscope_training_examples_total"), 0);
  EXPECT_GT(Sample(w, "process_resident_memory_bytes"), 0);
  EXPECT_GT(Sample(w, "process_cpu_seconds_total"), 0);
  EXPECT_GT(Sample(w, "process_open_fds"), 0);
  EXPECT_GT(Sample(w, "trainscope_node_memory_total_bytes"), 0);
  // GPU series exactly when NVML reports a GPU on this host.
  if (NvmlDeviceCount() > 0) {
    EXPECT_GT(Sample(w, "trainscope_gpu_memory_total_bytes{"), 0) << "NVML reports a GPU here";
  } else {
    EXPECT_EQ(w.find("trainscope_gpu_"), std::string::npos) << "no GPU here, so no GPU series";
  }

  // Slow the ps past the worker's 300 ms deadline: both sides count DEADLINE_EXCEEDED.
  // Waited for as asserted: an attempt's families are recorded one after another, so a scrape
  // may see its DEADLINE_EXCEEDED in one (message sizes) before the duration.
  InjectDelay(jobs.at("ps")[0], 400);
  const std::regex deadline_exceeded(
      "grpc_client_attempt_duration_seconds_count\\{grpc_method=\"trainscope.v1."
      "ParameterService/(Pull|Push)\",grpc_status=\"DEADLINE_EXCEEDED\",peer_role=\"ps\"\\} "
      "[1-9]");
  w = WaitForMetrics(
      worker_metrics,
      [&](const std::string& m) {
        return std::regex_search(m, deadline_exceeded) &&
               SumSamples(m, "trainscope_rpc_peer_errors_total{") > 0 &&
               SumSamples(m, "trainscope_rpc_peer_deadline_exceeded_total{") > 0;
      },
      20s);
  EXPECT_TRUE(std::regex_search(w, deadline_exceeded)) << w;
  EXPECT_GT(SumSamples(w, "trainscope_rpc_peer_errors_total{"), 0);
  EXPECT_GT(SumSamples(w, "trainscope_rpc_peer_deadline_exceeded_total{"), 0);
  std::string p = WaitForMetrics(
      ps_metrics,
      [](const std::string& m) {
        return m.find(
                   "grpc_server_call_duration_seconds_count{grpc_method=\"trainscope.v1."
                   "ParameterService/") != std::string::npos &&
               m.find("grpc_status=\"DEADLINE_EXCEEDED\"") != std::string::npos;
      },
      20s);
  EXPECT_NE(p.find("grpc_status=\"DEADLINE_EXCEEDED\",peer_role=\"worker\""), std::string::npos)
      << p;
  // The worker waits the slow ps out (the runtime retries), saying so once.
  EXPECT_TRUE(worker.WaitForOutput("(no answer within 300 ms)", 10s)) << worker.Output();
  EXPECT_NE(worker.Output().find("worker:0 waits on ps:0 at " + jobs.at("ps")[0]),
            std::string::npos)
      << worker.Output();
  InjectDelay(jobs.at("ps")[0], 0);

  // ps metrics.
  EXPECT_EQ(Sample(p, "trainscope_ps_variables"), 2);
  EXPECT_GT(Sample(p, "trainscope_ps_bytes_held"), 0);
  EXPECT_GT(Sample(p, "trainscope_ps_updates_applied_total"), 0);
  EXPECT_GT(Sample(p, "trainscope_ps_apply_seconds_count"), 0);
  EXPECT_GT(Sample(p, "grpc_server_call_started_total{" + push + ",peer_role=\"worker\"}"), 0);

  std::string promtool;
  EXPECT_TRUE(PromtoolAccepts(w, &promtool)) << promtool;
  promtool.clear();
  EXPECT_TRUE(PromtoolAccepts(p, &promtool)) << promtool;
}

}  // namespace
}  // namespace trainscope

namespace trainscope {
namespace {

// --log_format json: every line a task writes is one JSON object (time, level, task, msg, and
// trace_id on lines about a traced call), whatever bytes the message holds.
TEST(TelemetryIntegration, JsonLogLinesAreEachOneObject) {
  const std::map<std::string, std::vector<std::string>> jobs = {
      {"ps", {Addr(testing::FreePort())}}, {"worker", {Addr(testing::FreePort())}}};
  Process ps(testing::BinPath("linear_regression"), {"--log_format", "json"},
             {{"TF_CONFIG", testing::TfConfig(jobs, "ps", 0)}});
  Process worker(testing::BinPath("linear_regression"),
                 {"--log_format", "json", "--steps", "60", "--log_every", "20"},
                 {{"TF_CONFIG", testing::TfConfig(jobs, "worker", 0)}});
  ASSERT_EQ(worker.Wait(60s), 0) << worker.Output();
  ASSERT_EQ(ps.Wait(30s), 0) << ps.Output();
  for (const std::string& output : {worker.Output(), ps.Output()}) {
    std::istringstream lines(output);
    std::string line;
    int parsed = 0;
    while (std::getline(lines, line)) {
      if (line.empty()) continue;
      auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      ASSERT_TRUE(j.is_object()) << line;
      for (const char* key : {"time", "level", "task", "msg"}) {
        EXPECT_TRUE(j.contains(key)) << key << " in " << line;
      }
      ++parsed;
    }
    EXPECT_GT(parsed, 3) << output;
  }
  EXPECT_NE(worker.Output().find("\"task\":\"worker:0\""), std::string::npos) << worker.Output();
}

}  // namespace
}  // namespace trainscope
