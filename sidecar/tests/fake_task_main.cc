// sidecar_fake_task: a stand-in training task for the sidecar's tests and bench. It serves
// TaskService.Heartbeat with a scripted answer (phase, waiting peers, steps, delays, another
// identity, an oversized answer), and InjectFault for heartbeat delays. With --count N it serves
// N tasks role:0..N-1 on consecutive ports from --port (the footprint bench).

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "grpcpp/grpcpp.h"
#include "trainscope/v1/runtime.grpc.pb.h"

namespace {

namespace pb = ::trainscope::v1;

struct FakeOptions {
  std::string host = "127.0.0.1";
  int port = 0;
  int count = 1;
  std::string role = "worker";
  int index = 0;
  std::string cluster_name = "default";
  std::string answer_role;  // Identity to answer with, when different.
  int answer_index = -1;
  std::string answer_cluster;
  std::string listen_address;  // Reported listen address (default: the real one).
  std::string phase = "training";
  double steps_per_s = 10;
  bool expects_progress = true;
  std::vector<std::string> waiting_on;    // role:index@host:port
  std::vector<std::string> peer_failing;  // role:index@host:port: peers it fails to reach
  std::vector<std::string> peer_ok;       // role:index@host:port: peers it calls, answered
  double peer_latency_ms = 2;             // The recent latency of each --peer_ok peer
  std::string waiting_error = "connection refused";
  std::string peer_error = "connection timed out";  // last_error of each --peer_failing peer
  int heartbeat_delay_ms = 0;
  int oversized_bytes = 0;
  std::string metrics_address;
  double last_step_seconds = 0.1;
  double stall_after_s = -1;  // Steps stop moving after this many seconds (-1: never).
  int64_t claim_pid = 0;      // The pid to report (0: its own), as a lying task would.
};

std::atomic<bool> g_stop{false};

double Now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

pb::Phase PhaseOf(const std::string& p) {
  if (p == "starting") return pb::PHASE_STARTING;
  if (p == "creating_session") return pb::PHASE_CREATING_SESSION;
  if (p == "done") return pb::PHASE_DONE;
  if (p == "serving") return pb::PHASE_SERVING;
  return pb::PHASE_TRAINING;
}

class FakeTaskService final : public pb::TaskService::Service {
 public:
  FakeTaskService(const FakeOptions& o, int index, std::string address)
      : o_(o), index_(index), address_(std::move(address)), start_(Now()) {
    incarnation_ = (static_cast<uint64_t>(getpid()) << 20) ^ static_cast<uint64_t>(start_ * 1e6);
  }

  grpc::Status Heartbeat(grpc::ServerContext*, const pb::HeartbeatRequest*,
                         pb::HeartbeatResponse* r) override {
    int delay = delay_ms_.load();
    if (delay > 0) std::this_thread::sleep_for(std::chrono::milliseconds(delay));
    double now = Now();
    pb::TaskIdentity* id = r->mutable_identity();
    id->mutable_task()->set_role(o_.answer_role.empty() ? o_.role : o_.answer_role);
    id->mutable_task()->set_index(o_.answer_index >= 0 ? o_.answer_index : index_);
    id->set_cluster_name(o_.answer_cluster.empty() ? o_.cluster_name : o_.answer_cluster);
    id->set_runtime_version("fake-0");
    id->set_incarnation(incarnation_);
    id->set_listen_address(o_.listen_address.empty() ? address_ : o_.listen_address);
    id->set_pid(o_.claim_pid > 0 ? o_.claim_pid : getpid());
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    id->set_hostname(o_.oversized_bytes > 0 ? std::string(o_.oversized_bytes, 'x') : host);
    r->set_phase(PhaseOf(o_.phase));
    double elapsed = now - start_;
    if (o_.stall_after_s >= 0) elapsed = std::min(elapsed, o_.stall_after_s);
    bool training = o_.phase == "training";
    r->set_steps(training ? static_cast<int64_t>(elapsed * o_.steps_per_s) : 0);
    r->set_expects_progress(training && o_.expects_progress);
    r->set_last_step_seconds(training ? o_.last_step_seconds : 0);
    if (!o_.waiting_on.empty()) {
      pb::Waiting* w = r->mutable_waiting();
      w->set_what("CreateSession");
      w->set_since_unix_seconds(start_);
      for (const std::string& spec : o_.waiting_on) {
        pb::PeerView* p = Peer(spec, w->add_peers());
        p->set_consecutive_failures(static_cast<int64_t>(elapsed * 2));
        p->set_last_error(o_.waiting_error);
        p->set_seconds_since_success(-1);
      }
    }
    for (const std::string& spec : o_.peer_ok) {
      pb::PeerView* p = Peer(spec, r->add_peers());
      p->set_connected(true);
      p->set_latency_seconds(o_.peer_latency_ms / 1000 * (0.9 + 0.2 * (now - std::floor(now))));
      p->set_step_share(0.5 / static_cast<double>(o_.peer_ok.size()));
    }
    for (const std::string& spec : o_.peer_failing) {
      pb::PeerView* p = Peer(spec, r->add_peers());
      p->set_connected(false);
      p->set_consecutive_failures(10);
      p->set_last_error(o_.peer_error);
      p->set_seconds_since_success(30);
    }
    r->mutable_resources()->set_threads(3);
    r->mutable_resources()->set_resident_bytes(10 << 20);
    r->set_unix_seconds(now);
    r->set_metrics_address(o_.metrics_address);
    return grpc::Status::OK;
  }

  grpc::Status InjectFault(grpc::ServerContext*, const pb::InjectFaultRequest* req,
                           pb::InjectFaultResponse* resp) override {
    delay_ms_.store(static_cast<int>(req->heartbeat_delay_ms()));
    resp->set_heartbeat_delay_ms(req->heartbeat_delay_ms());
    return grpc::Status::OK;
  }

  void SetDelay(int ms) { delay_ms_.store(ms); }

 private:
  // `p` named from "role:index@host:port".
  static pb::PeerView* Peer(const std::string& spec, pb::PeerView* p) {
    size_t at = spec.find('@');
    std::string name = spec.substr(0, at);
    size_t colon = name.find(':');
    p->mutable_peer()->set_role(name.substr(0, colon));
    p->mutable_peer()->set_index(std::stoi(name.substr(colon + 1)));
    p->set_address(at == std::string::npos ? "" : spec.substr(at + 1));
    return p;
  }

  const FakeOptions& o_;
  int index_;
  std::string address_;
  double start_;
  uint64_t incarnation_ = 0;
  std::atomic<int> delay_ms_{0};
};

}  // namespace

int main(int argc, char** argv) {
  FakeOptions o;
  CLI::App app{"sidecar_fake_task: scripted TaskService.Heartbeat for tests"};
  app.add_option("--host", o.host);
  app.add_option("--port", o.port, "Port of the first task");
  app.add_option("--count", o.count, "Tasks to serve, role:index..index+count-1");
  app.add_option("--role", o.role);
  app.add_option("--index", o.index);
  app.add_option("--cluster_name", o.cluster_name);
  app.add_option("--answer_role", o.answer_role);
  app.add_option("--answer_index", o.answer_index);
  app.add_option("--answer_cluster", o.answer_cluster);
  app.add_option("--listen_address", o.listen_address, "Listen address to report");
  app.add_option("--phase", o.phase, "starting|creating_session|training|serving|done");
  app.add_option("--steps_per_s", o.steps_per_s);
  app.add_option("--stall_after_s", o.stall_after_s);
  app.add_option("--claim_pid", o.claim_pid, "Report this pid instead of its own");
  app.add_option("--last_step_seconds", o.last_step_seconds);
  app.add_option("--waiting_on", o.waiting_on, "role:index@host:port (repeat)");
  app.add_option("--waiting_error", o.waiting_error);
  app.add_option("--peer_failing", o.peer_failing, "role:index@host:port it cannot reach (repeat)");
  app.add_option("--peer_error", o.peer_error, "The last error of each --peer_failing peer");
  app.add_option("--peer_ok", o.peer_ok, "role:index@host:port it calls, answered (repeat)");
  app.add_option("--peer_latency_ms", o.peer_latency_ms, "Recent latency of each --peer_ok peer");
  app.add_option("--heartbeat_delay_ms", o.heartbeat_delay_ms);
  app.add_option("--oversized_bytes", o.oversized_bytes, "Pad the answer to this size");
  app.add_option("--metrics_address", o.metrics_address);
  CLI11_PARSE(app, argc, argv);

  if (o.port <= 0) {
    std::cerr << "sidecar_fake_task: --port is required\n";
    return 2;
  }
  std::signal(SIGTERM, [](int) { g_stop.store(true); });
  std::signal(SIGINT, [](int) { g_stop.store(true); });
  std::vector<std::unique_ptr<FakeTaskService>> services;
  std::vector<std::unique_ptr<grpc::Server>> servers;
  for (int i = 0; i < o.count; ++i) {
    int want = o.port + i;
    int bound = 0;
    grpc::ServerBuilder b;
    b.AddListeningPort(o.host + ":" + std::to_string(want), grpc::InsecureServerCredentials(),
                       &bound);
    b.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::NUM_CQS, 1);
    b.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::MIN_POLLERS, 1);
    b.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::MAX_POLLERS, 2);
    auto service =
        std::make_unique<FakeTaskService>(o, o.index + i, o.host + ":" + std::to_string(want));
    b.RegisterService(service.get());
    auto server = b.BuildAndStart();
    if (!server || bound == 0) {
      std::cerr << "sidecar_fake_task: cannot listen on " << o.host << ":" << want << "\n";
      return 1;
    }
    service->SetDelay(o.heartbeat_delay_ms);
    std::cout << "serving " << o.role << ":" << (o.index + i) << " at " << o.host << ":" << bound
              << std::endl;
    services.push_back(std::move(service));
    servers.push_back(std::move(server));
  }
  std::cout << "ready" << std::endl;
  while (!g_stop.load()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  for (auto& s : servers) s->Shutdown(std::chrono::system_clock::now());
  return 0;
}
