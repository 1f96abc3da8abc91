// The wiring (sidecar.cc) in one process: a Sidecar watches an in-process task that answers
// TaskService.Heartbeat on loopback, and its HTTP API says what the parts decided. What it
// checks is the way the values go: the watcher's views reach the page, the API and /metrics, and
// a stuck task's reason says where it waits (the keeper's and the diagnosis' part), with no
// part calling back into the wiring for them.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "process.h"
#include "trainscope/common/clock.h"
#include "trainscope/common/http_client.h"
#include "trainscope/sidecar/sidecar.h"
#include "trainscope/v1/runtime.grpc.pb.h"
#include "wait.h"

namespace trainscope::sidecar {
namespace {

namespace rpb = ::trainscope::v1;

// worker:0 as it answers its heartbeat: training, its steps rising until `stall` is set, and a
// Pull to ps:0 in flight since then.
class FakeWorker final : public rpb::TaskService::Service {
 public:
  explicit FakeWorker(std::string address) : address_(std::move(address)) {}

  grpc::Status Heartbeat(grpc::ServerContext*, const rpb::HeartbeatRequest*,
                         rpb::HeartbeatResponse* r) override {
    const double now = UnixSeconds();
    rpb::TaskIdentity* id = r->mutable_identity();
    id->mutable_task()->set_role("worker");
    id->mutable_task()->set_index(0);
    id->set_cluster_name("c");
    id->set_incarnation(7);
    id->set_listen_address(address_);
    id->set_pid(0);  // No process to read or capture: this is the test's own.
    r->set_phase(rpb::PHASE_TRAINING);
    r->set_expects_progress(true);
    if (!stall) steps_ = static_cast<int64_t>((now - start_) * 100);
    r->set_steps(steps_);
    r->set_unix_seconds(now);
    if (stall) {
      rpb::InflightCall* c = r->add_inflight();
      c->set_method("Pull");
      c->mutable_peer()->set_role("ps");
      c->mutable_peer()->set_index(0);
      c->set_age_seconds(now - stalled_at);
      c->set_tid(4242);
    }
    return grpc::Status::OK;
  }

  std::atomic<bool> stall{false};
  std::atomic<double> stalled_at{0};

 private:
  const std::string address_;
  const double start_ = UnixSeconds();
  std::atomic<int64_t> steps_{0};
};

bool Within15s(const std::function<bool()>& done) {
  return ::trainscope::testing::WaitUntil(done, std::chrono::seconds(15),
                                          std::chrono::milliseconds(50));
}

std::string Get(int port, const std::string& path) {
  auto r = HttpGet(absl::StrCat("127.0.0.1:", port), path, 2000);
  return r.ok() ? r->body : "";
}

TEST(SidecarWiring, ViewsReachTheApiAndAStuckTasksReasonSaysWhereItWaits) {
  const int ps_port = testing::FreePort();
  const int worker_port = testing::FreePort();
  const std::string worker_address = absl::StrCat("127.0.0.1:", worker_port);
  FakeWorker worker(worker_address);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(worker_address, grpc::InsecureServerCredentials());
  builder.RegisterService(&worker);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);

  SidecarOptions o;
  o.tf_config = absl::StrCat(R"({"cluster": {"ps": ["127.0.0.1:)", ps_port, R"("], "worker": [")",
                             worker_address, R"("]}})");
  o.cluster_name = "c";
  o.http_address = "127.0.0.1";
  o.http_port = 0;
  o.grpc_port = -1;
  o.stall_after_s = 1;
  o.stack_snapshots = false;
  auto sidecar = Sidecar::Create(o);
  ASSERT_TRUE(sidecar.ok()) << sidecar.status();
  (*sidecar)->Start();
  const int port = (*sidecar)->http_port();

  EXPECT_TRUE(Within15s([&] {
    return Get(port, "/api/v1/tasks").find(R"("name":"worker:0")") != std::string::npos &&
           Get(port, "/api/v1/tasks?local=1").find(R"("state":"up")") != std::string::npos;
  })) << Get(port, "/api/v1/tasks");
  EXPECT_NE(
      Get(port, "/metrics").find(R"(trainscope_task_up{cluster="c",role="worker",task="0"} 1)"),
      std::string::npos);

  worker.stalled_at = UnixSeconds();
  worker.stall = true;
  EXPECT_TRUE(Within15s([&] {
    const std::string body = Get(port, "/api/v1/tasks");
    return body.find(R"("state":"stalled")") != std::string::npos &&
           body.find("thread 4242 waiting") != std::string::npos &&
           body.find("in Pull to ps:0") != std::string::npos;
  })) << Get(port, "/api/v1/tasks");
  // The text form of the same view (trainscopectl status reads it) says it too.
  EXPECT_NE(Get(port, "/api/v1/tasks?local=1").find("thread 4242 waiting"), std::string::npos);

  (*sidecar)->Stop();
  server->Shutdown();
}

}  // namespace
}  // namespace trainscope::sidecar
