// Sidecar integration-test helpers; see sidecar_harness.h.
#include "sidecar_harness.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <thread>

#include "trainscope/common/http_client.h"
#include "trainscope/sidecar/api.h"

namespace trainscope::testing {

std::string FreeAddress() { return "127.0.0.1:" + std::to_string(FreePort()); }

std::string WriteSpecFile(const Cluster& cluster) {
  char tmpl[] = "/tmp/trainscope-sidecar-spec-XXXXXX";
  int fd = mkstemp(tmpl);
  close(fd);
  std::string json = TfConfig(cluster, cluster.begin()->first, 0);
  std::ofstream(tmpl) << json;
  return tmpl;
}

const std::string& HarnessKey() {
  static const std::string key =
      "harness-cluster-key-" + std::to_string(getpid()) + "-0123456789abcdef";
  return key;
}

const std::string& HarnessKeyFile() {
  static const std::string path = [] {
    char tmpl[] = "/tmp/trainscope-exchange-key-XXXXXX";
    const int fd = mkstemp(tmpl);  // 0600, as the docs ask.
    close(fd);
    std::ofstream(tmpl) << HarnessKey() << "\n";
    return std::string(tmpl);
  }();
  return path;
}

Sidecar::Sidecar(const Cluster& cluster, std::vector<std::string> extra_args) {
  spec_path_ = WriteSpecFile(cluster);
  http_port_ = FreePort();
  std::vector<std::pair<std::string, std::string>> defaults = {
      {"--cluster_spec", spec_path_},  {"--http_port", std::to_string(http_port_)},
      {"--http_address", "127.0.0.1"}, {"--grpc_port", std::to_string(FreePort())},
      {"--peer_sidecars", "none"},     {"--exchange_key_file", HarnessKeyFile()}};
  // kNoExchangeKey: this sidecar gets no key (a user who set none).
  if (auto it = std::find(extra_args.begin(), extra_args.end(), kNoExchangeKey);
      it != extra_args.end()) {
    extra_args.erase(it);
    defaults.pop_back();
  }
  std::vector<std::string> args;
  for (const auto& [flag, value] : defaults) {
    if (std::find(extra_args.begin(), extra_args.end(), flag) != extra_args.end()) continue;
    args.push_back(flag);
    args.push_back(value);
  }
  for (size_t i = 0; i + 1 < extra_args.size(); ++i) {
    if (extra_args[i] == "--http_port") http_port_ = std::stoi(extra_args[i + 1]);
  }
  for (auto& a : extra_args) args.push_back(std::move(a));
  process_ = std::make_unique<Process>(BinPath("trainscope-sidecar"), args);
  process_->WaitForOutput("http on", std::chrono::seconds(10));
}

Sidecar::~Sidecar() {
  process_.reset();
  std::remove(spec_path_.c_str());
}

std::string Sidecar::Get(const std::string& path) {
  auto r = trainscope::HttpGet(http(), path, 2000);
  if (!r.ok() || r->status != 200) return "";
  return r->body;
}

std::vector<sidecar::TaskView> Sidecar::Tasks(const std::string& query) {
  std::string body = Get("/api/v1/tasks" + query);
  auto views = sidecar::ParseTaskViews(body);
  if (!views.ok()) return {};
  return *views;
}

std::optional<sidecar::TaskView> Sidecar::Task(const std::string& name) {
  for (auto& v : Tasks()) {
    if (v.task.ShortName() == name) return v;
  }
  return std::nullopt;
}

std::optional<sidecar::TaskView> Sidecar::WaitForState(const std::string& name,
                                                       sidecar::TaskState state,
                                                       std::chrono::milliseconds timeout,
                                                       const std::string& reason_has) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    auto v = Task(name);
    if (v && v->state == state && v->reason.find(reason_has) != std::string::npos) return v;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return std::nullopt;
}

std::string Sidecar::Describe() {
  std::string out;
  for (const auto& v : Tasks()) {
    out += v.task.ShortName() + " " + std::string(sidecar::StateName(v.state)) + ": " + v.reason +
           "\n";
  }
  // A sidecar that died (a sanitizer's report aborts it) says so, with its output.
  const std::optional<int> code = process_->Wait(std::chrono::milliseconds(0));
  if (code) out += "--- the sidecar EXITED with status " + std::to_string(*code) + " ---\n";
  return out + "--- sidecar output ---\n" + process_->Output();
}

TokenFile::TokenFile() {
  char tmpl[] = "/tmp/trainscope-api-token-XXXXXX";
  const int fd = mkstemp(tmpl);
  close(fd);
  path_ = tmpl;
  std::ofstream(path_) << kTestToken << "\n";
  chmod(path_.c_str(), 0600);
}

TokenFile::~TokenFile() { std::remove(path_.c_str()); }

std::unique_ptr<Process> StartTask(const Cluster& cluster, const std::string& role, int index,
                                   std::vector<std::string> extra_args) {
  return std::make_unique<Process>(
      BinPath("linear_regression"), std::move(extra_args),
      std::map<std::string, std::string>{{"TF_CONFIG", TfConfig(cluster, role, index)}});
}

std::unique_ptr<Process> StartFakeTask(const std::string& address, const std::string& role,
                                       int index, std::vector<std::string> extra_args) {
  size_t colon = address.rfind(':');
  std::vector<std::string> args = {
      "--host",  address.substr(0, colon), "--port", address.substr(colon + 1), "--role", role,
      "--index", std::to_string(index)};
  for (auto& a : extra_args) args.push_back(std::move(a));
  auto p = std::make_unique<Process>(BinPath("sidecar_fake_task"), args);
  p->WaitForOutput("ready", std::chrono::seconds(10));
  return p;
}

std::string StalledWorker::Start() {
  using sidecar::TaskState;
  cluster = {{"ps", {FreeAddress()}}, {"worker", {FreeAddress()}}};
  ps = StartTask(cluster, "ps", 0);
  worker = StartTask(cluster, "worker", 0, LongTraining({"--enable_fault_injection"}));
  sidecar = std::make_unique<Sidecar>(cluster, std::vector<std::string>{"--stall_after_s", "1.5"});
  const auto timeout = std::chrono::seconds(30);
  if (!sidecar->WaitForState("worker:0", TaskState::kUp, timeout, "training") ||
      !sidecar->WaitForState("ps:0", TaskState::kUp, timeout)) {
    return "the cluster did not come up:\n" + sidecar->Describe();
  }
  Process fault(BinPath("trainscopectl"),
                {"fault", "--task", cluster["worker"][0], "--deadlock_training"});
  if (fault.Wait(timeout) != 0) return "trainscopectl fault failed: " + fault.Output();
  if (!sidecar->WaitForState("worker:0", TaskState::kStalled, timeout)) {
    return "worker:0 never stalled:\n" + sidecar->Describe();
  }
  return "";
}

std::vector<std::string> LongTraining(std::vector<std::string> more) {
  std::vector<std::string> args = {"--steps", "100000000",   "--step_delay_ms",
                                   "5",       "--log_every", "100000"};
  for (auto& m : more) args.push_back(std::move(m));
  return args;
}

}  // namespace trainscope::testing
