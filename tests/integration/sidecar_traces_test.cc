// The sidecar as the node's trace agent, with real processes: a ps and a worker export their spans
// over OTLP to a real trainscope-sidecar, which joins the halves of each ps request and lists
// the slow ones; a ps slowed on purpose shows first, with its time under queue; every single
// request slowed or failed at random is listed, both halves.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <regex>
#include <set>
#include <thread>

#include "nlohmann/json.hpp"
#include "sidecar_harness.h"
#include "trainscope/v1/runtime.grpc.pb.h"

namespace trainscope::testing {
namespace {

using nlohmann::json;
using sidecar::TaskState;
using std::chrono::seconds;

json GetJson(Sidecar& sidecar, const std::string& path) {
  json j = json::parse(sidecar.Get(path), nullptr, /*allow_exceptions=*/false);
  return j.is_discarded() ? json::object() : j;
}

// The first slow request that satisfies `pred`, waiting up to `timeout`.
std::optional<json> WaitForSlow(Sidecar& sidecar, const std::function<bool(const json&)>& pred,
                                std::chrono::milliseconds timeout,
                                const std::string& query = "?limit=100") {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    json list = GetJson(sidecar, "/api/v1/traces/slow" + query);
    if (list.contains("requests") && list["requests"].is_array()) {
      for (const json& r : list["requests"]) {
        if (pred(r)) return r;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return std::nullopt;
}

int Ctl(const std::vector<std::string>& args) {
  Process ctl(BinPath("trainscopectl"), args);
  return ctl.Wait(seconds(10)).value_or(-1);
}

TEST(SidecarTraces, JoinsWorkerAndPsSpansAndListsTheSlowRequestFirst) {
  Cluster cluster = {{"ps", {FreeAddress()}}, {"worker", {FreeAddress()}}};
  const int grpc_port = FreePort();
  Sidecar sidecar(cluster, {"--grpc_port", std::to_string(grpc_port)});
  const std::map<std::string, std::string> otel = {
      {"OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:" + std::to_string(grpc_port)},
      {"OTEL_BSP_SCHEDULE_DELAY", "100"}};
  auto env = [&](const std::string& role) {
    auto e = otel;
    e["TF_CONFIG"] = TfConfig(cluster, role, 0);
    return e;
  };
  Process ps(BinPath("linear_regression"), {"--enable_fault_injection"}, env("ps"));
  Process worker(BinPath("linear_regression"),
                 {"--steps", "100000000", "--step_delay_ms", "5", "--log_every", "100000"},
                 env("worker"));
  ASSERT_TRUE(sidecar.WaitForState("worker:0", TaskState::kUp, seconds(20), "training"))
      << sidecar.Describe();

  // Both halves of a request, joined: same trace, the ps span's parent is the worker's span.
  auto joined = WaitForSlow(
      sidecar,
      [](const json& r) { return r.value("has_client", false) && r.value("has_server", false); },
      seconds(20));
  ASSERT_TRUE(joined) << sidecar.Get("/api/v1/traces/slow") << "\n" << ps.Output();
  const json& r = *joined;
  EXPECT_EQ(r["worker"], "worker:0");
  EXPECT_EQ(r["ps"], "ps:0");
  EXPECT_EQ(r["client_span_id"], r["server_parent_span_id"]) << r.dump();
  const std::string trace_id = r["trace_id"];
  ASSERT_EQ(trace_id.size(), 32u);
  json trace = GetJson(sidecar, "/api/v1/traces/" + trace_id);
  ASSERT_TRUE(trace.contains("spans")) << trace.dump();
  const json* client = nullptr;
  const json* server = nullptr;
  for (const json& s : trace["spans"]) {
    EXPECT_EQ(s["trace_id"], trace_id);
    if (s["kind"] == "client") client = &s;
    if (s["kind"] == "server") server = &s;
  }
  ASSERT_TRUE(client && server) << trace.dump();
  EXPECT_EQ((*client)["task"], "worker:0");
  EXPECT_EQ((*server)["task"], "ps:0");
  EXPECT_EQ((*server)["parent_span_id"], (*client)["span_id"]);
  EXPECT_EQ((*server)["peer_task"], "worker:0");

  // Slow the ps on purpose for about a second: those requests lead the list, mostly queueing.
  const std::string ps_address = cluster["ps"][0];
  ASSERT_EQ(Ctl({"fault", "--task", ps_address, "--parameter_delay_ms", "300"}), 0);
  std::this_thread::sleep_for(seconds(1));
  ASSERT_EQ(Ctl({"fault", "--task", ps_address, "--parameter_delay_ms", "0"}), 0);
  auto slowest = WaitForSlow(
      sidecar,
      [](const json& x) {
        return x.value("has_client", false) && x.value("has_server", false) &&
               x.contains("queue_ms");
      },
      seconds(10), "?limit=1");
  ASSERT_TRUE(slowest) << sidecar.Get("/api/v1/traces/slow");
  const json& s = *slowest;
  EXPECT_GE(s["duration_ms"].get<double>(), 300) << s.dump();
  EXPECT_GE(s["queue_ms"].get<double>(), 0.5 * s["duration_ms"].get<double>()) << s.dump();
  EXPECT_TRUE(s.contains("network_ms") && s["network_ms"].is_number()) << s.dump();
  EXPECT_EQ(s["status"], "OK") << s.dump();

  // The list is slowest first, and filters work.
  json all = GetJson(sidecar, "/api/v1/traces/slow?limit=50");
  double prev = 1e18;
  for (const json& x : all["requests"]) {
    EXPECT_LE(x["duration_ms"].get<double>(), prev);
    prev = x["duration_ms"].get<double>();
  }
  json pulls = GetJson(sidecar, "/api/v1/traces/slow?method=Pull&ps=ps:0");
  for (const json& x : pulls["requests"])
    EXPECT_EQ(x["method"], "trainscope.v1.ParameterService/Pull");

  std::string metrics = sidecar.Get("/metrics");
  EXPECT_NE(metrics.find("trainscope_sidecar_traces_spans_received_total"), std::string::npos);
  EXPECT_EQ(metrics.find("trainscope_sidecar_traces_spans_received_total 0\n"), std::string::npos)
      << metrics;
  EXPECT_NE(sidecar.Get("/").find("Slow ps requests"), std::string::npos);
  EXPECT_EQ(sidecar.Get("/api/v1/traces/nothex"), "");  // 400, not a crash.
}

TEST(SidecarTraces, ForwardsEverythingToTheUpstream) {
  Cluster cluster = {{"ps", {FreeAddress()}}, {"worker", {FreeAddress()}}};
  const int upstream_port = FreePort();
  Sidecar upstream(cluster, {"--grpc_port", std::to_string(upstream_port)});
  const int grpc_port = FreePort();
  Sidecar sidecar(cluster, {"--grpc_port", std::to_string(grpc_port), "--otlp_upstream",
                            "http://127.0.0.1:" + std::to_string(upstream_port)});
  auto env = [&](const std::string& role) {
    return std::map<std::string, std::string>{
        {"OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:" + std::to_string(grpc_port)},
        {"OTEL_BSP_SCHEDULE_DELAY", "100"},
        {"TF_CONFIG", TfConfig(cluster, role, 0)}};
  };
  Process ps(BinPath("linear_regression"), {}, env("ps"));
  Process worker(BinPath("linear_regression"),
                 {"--steps", "100000000", "--step_delay_ms", "5", "--log_every", "100000"},
                 env("worker"));
  auto both = [](const json& r) {
    return r.value("has_client", false) && r.value("has_server", false);
  };
  ASSERT_TRUE(WaitForSlow(upstream, both, seconds(20))) << upstream.Describe();
  std::string metrics = sidecar.Get("/metrics");
  EXPECT_EQ(metrics.find("trainscope_sidecar_traces_forwarded_spans_total 0\n"), std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("trainscope_sidecar_traces_forward_failures_total 0\n"), std::string::npos)
      << metrics;
}

// Has the ps delay each of its calls, with `probability`, by `ms` (InjectFault).
void InjectRandomDelays(const std::string& ps_address, double probability, int64_t ms) {
  auto stub =
      v1::TaskService::NewStub(grpc::CreateChannel(ps_address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  v1::InjectFaultRequest request;
  request.set_random_delay_probability(probability);
  request.set_random_delay_ms(ms);
  v1::InjectFaultResponse response;
  grpc::Status st = stub->InjectFault(&context, request, &response);
  ASSERT_TRUE(st.ok()) << st.error_message();
}

// The trace ids of the calls the ps logged it delayed by `ms`.
std::set<std::string> DelayedTraces(const std::string& ps_log, int64_t ms) {
  std::set<std::string> ids;
  const std::regex line("trace=([0-9a-f]{32}) fault injected: this call delayed " +
                        std::to_string(ms) + " ms \\(at random\\)");
  for (auto it = std::sregex_iterator(ps_log.begin(), ps_log.end(), line);
       it != std::sregex_iterator(); ++it) {
    ids.insert((*it)[1]);
  }
  return ids;
}

// The trace ids in a list whose request has both halves.
std::set<std::string> BothHalves(const json& list) {
  std::set<std::string> ids;
  if (!list.contains("requests")) return ids;
  for (const json& r : list["requests"]) {
    if (r.value("has_client", false) && r.value("has_server", false)) ids.insert(r["trace_id"]);
  }
  return ids;
}

// Every single slow or failed request, both halves, reaches the node's sidecar: ps calls slowed
// at random past the slow threshold are in its slow list, those slowed past the worker's
// deadline in its errors list, with the worker's span and the ps's (and its queue time).
TEST(SidecarTraces, EverySlowAndFailedRequestArrivesWithBothHalves) {
  Cluster cluster = {{"ps", {FreeAddress()}}, {"worker", {FreeAddress()}}};
  const int grpc_port = FreePort();
  Sidecar sidecar(cluster, {"--grpc_port", std::to_string(grpc_port), "--slow_per_key", "1"});
  auto env = [&](const std::string& role) {
    return std::map<std::string, std::string>{
        {"OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:" + std::to_string(grpc_port)},
        {"OTEL_BSP_SCHEDULE_DELAY", "100"},
        {"TF_CONFIG", TfConfig(cluster, role, 0)}};
  };
  Process ps(BinPath("linear_regression"), {"--enable_fault_injection"}, env("ps"));
  Process worker(BinPath("linear_regression"),
                 // A short deadline is the point: calls past it are traced as failed (and
                 // retried by the runtime, as by default).
                 {"--steps", "100000000", "--log_every", "100000", "--rpc_deadline_ms", "300"},
                 env("worker"));
  ASSERT_TRUE(sidecar.WaitForState("worker:0", TaskState::kUp, seconds(20), "training"))
      << sidecar.Describe();
  const std::string ps_address = cluster["ps"][0];
  InjectRandomDelays(ps_address, 0.02, 150);  // Slow (over 100 ms), within the deadline.
  std::this_thread::sleep_for(seconds(3));
  InjectRandomDelays(ps_address, 0.02, 400);  // Past the worker's 300 ms deadline.
  std::this_thread::sleep_for(seconds(3));
  InjectRandomDelays(ps_address, 0, 0);

  const std::set<std::string> slowed = DelayedTraces(ps.Output(), 150);
  const std::set<std::string> failed = DelayedTraces(ps.Output(), 400);
  ::testing::Test::RecordProperty("slowed", static_cast<int>(slowed.size()));
  ::testing::Test::RecordProperty("failed", static_cast<int>(failed.size()));
  ASSERT_GE(slowed.size(), 3u) << ps.Output();
  ASSERT_GE(failed.size(), 3u) << ps.Output();
  auto missing = [](const std::set<std::string>& want, const std::set<std::string>& have) {
    std::vector<std::string> out;
    std::set_difference(want.begin(), want.end(), have.begin(), have.end(),
                        std::back_inserter(out));
    return out;
  };
  std::vector<std::string> slow_missing, failed_missing;
  const auto deadline = std::chrono::steady_clock::now() + seconds(20);
  do {
    slow_missing = missing(slowed, BothHalves(GetJson(sidecar, "/api/v1/traces/slow?limit=1000")));
    failed_missing =
        missing(failed, BothHalves(GetJson(sidecar, "/api/v1/traces/errors?limit=1000")));
    if (slow_missing.empty() && failed_missing.empty()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  } while (std::chrono::steady_clock::now() < deadline);
  EXPECT_TRUE(slow_missing.empty())
      << slow_missing.size() << " of " << slowed.size() << " slowed requests missing, e.g. "
      << slow_missing.front() << ": " << sidecar.Get("/api/v1/traces/" + slow_missing.front());
  EXPECT_TRUE(failed_missing.empty())
      << failed_missing.size() << " of " << failed.size() << " failed requests missing, e.g. "
      << failed_missing.front() << ": " << sidecar.Get("/api/v1/traces/" + failed_missing.front());

  // What one of them says: the ps's queue holds the delay; both halves say why they were kept.
  json trace = GetJson(sidecar, "/api/v1/traces/" + *slowed.begin());
  ASSERT_TRUE(trace.contains("requests") && !trace["requests"].empty()) << trace.dump();
  const json& r = trace["requests"][0];
  EXPECT_GE(r["duration_ms"].get<double>(), 150) << r.dump();
  ASSERT_TRUE(r.contains("queue_ms") && r["queue_ms"].is_number()) << r.dump();
  EXPECT_GE(r["queue_ms"].get<double>(), 140) << r.dump();
  EXPECT_NE(r.value("kept", "").find("slow"), std::string::npos) << r.dump();
  json errors = GetJson(sidecar, "/api/v1/traces/errors?limit=1000");
  for (const json& e : errors["requests"]) {
    if (failed.count(e["trace_id"]) == 0) continue;
    EXPECT_EQ(e["status"], "DEADLINE_EXCEEDED") << e.dump();
    EXPECT_NE(e.value("kept", "").find("error"), std::string::npos) << e.dump();
  }
}

}  // namespace
}  // namespace trainscope::testing
