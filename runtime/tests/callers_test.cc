// Callers: the telemetry peer index of each caller, and the mutual-TLS identity check. The check
// is exercised through a real TaskService on loopback, whose callers present no certificate:
// under mutual TLS a state-changing call (Done) is refused naming both tasks and counted; without
// it the same call goes through.
#include "callers.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "fault_injector.h"
#include "heartbeat.h"
#include "task_impl.h"
#include "task_metrics.h"
#include "task_status.h"
#include "trainer_registry.h"
#include "trainscope/telemetry/names.h"
#include "trainscope/telemetry/telemetry.h"
#include "trainscope/v1/runtime.grpc.pb.h"

namespace trainscope {
namespace {

ClusterSpec ChiefCluster() {
  return *ClusterSpec::FromJobs({{"chief", {"127.0.0.1:1"}},
                                 {"worker", {"127.0.0.1:2", "127.0.0.1:3"}},
                                 {"ps", {"127.0.0.1:4", "127.0.0.1:5"}}});
}

v1::TaskId Id(const std::string& role, int index) {
  v1::TaskId id;
  id.set_role(role);
  id.set_index(index);
  return id;
}

std::unique_ptr<telemetry::Telemetry> TelemetryOf(const ClusterSpec& cluster) {
  telemetry::TelemetryOptions o;
  o.name = "ps:0";
  o.peers = cluster.AllTasks();
  o.metrics_port = -1;  // Nothing served: only the peer indexes matter here.
  return *telemetry::Telemetry::Create(std::move(o), nullptr);
}

double IdentityRefusals(const TaskMetrics& metrics) {
  std::vector<prometheus::MetricFamily> families;
  metrics.Collect(&families);
  for (const prometheus::MetricFamily& f : families) {
    if (f.name == telemetry::names::kIdentityRefused) return f.metric.at(0).counter.value;
  }
  ADD_FAILURE() << "no " << telemetry::names::kIdentityRefused;
  return -1;
}

TEST(CallersTest, IndexIsTheCallersPlaceAmongTheClustersTasksOrMinusOne) {
  const ClusterSpec cluster = ChiefCluster();
  const std::vector<TaskRef> all = cluster.AllTasks();
  auto telemetry = TelemetryOf(cluster);
  TaskStatus status;
  TaskMetrics metrics("test", {"ps", 0}, &status, 0);
  Callers callers(cluster, {"ps", 0}, false, telemetry.get(), &metrics);
  for (size_t i = 0; i < all.size(); ++i) {
    SCOPED_TRACE(all[i].ShortName());
    EXPECT_EQ(callers.Index(Id(all[i].role, all[i].index)), static_cast<int>(i));
  }
  struct Case {
    std::string role;
    int index;
  };
  for (const Case& c : {Case{"worker", 2}, Case{"ps", -1}, Case{"evaluator", 0}, Case{"", 0}}) {
    SCOPED_TRACE(c.role + ":" + std::to_string(c.index));
    EXPECT_EQ(callers.Index(Id(c.role, c.index)), -1);
  }
  Callers without_telemetry(cluster, {"ps", 0}, false, nullptr, &metrics);
  EXPECT_EQ(without_telemetry.Index(Id("worker", 0)), -1);
}

TEST(CallersTest, WithoutMutualTlsOrForACallerTheSpecDoesNotKnowTheCheckPasses) {
  TaskStatus status;
  TaskMetrics metrics("test", {"ps", 0}, &status, 0);
  Callers plain(ChiefCluster(), {"ps", 0}, /*mutual_tls=*/false, nullptr, &metrics);
  Callers mutual(ChiefCluster(), {"ps", 0}, /*mutual_tls=*/true, nullptr, &metrics);
  grpc::ServerContext context;  // No call: neither check reaches the certificate.
  EXPECT_TRUE(plain.Check(context, Id("worker", 0), "Push").ok());
  EXPECT_TRUE(mutual.Check(context, Id("worker", 9), "Push").ok());
  EXPECT_TRUE(mutual.Check(context, Id("evaluator", 0), "Push").ok());
  EXPECT_EQ(IdentityRefusals(metrics), 0);
}

// A ps:0 TaskService on 127.0.0.1:0 (plain text) with real parts, and a stub to it.
class ServedTask {
 public:
  explicit ServedTask(bool mutual_tls)
      : cluster_(ChiefCluster()),
        metrics_("test", self_, &status_, 0),
        trainers_(cluster_, self_),
        callers_(cluster_, self_, mutual_tls, nullptr, &metrics_) {
    v1::TaskIdentity identity;
    *identity.mutable_task() = Id("ps", 0);
    service_ = NewTaskService({self_, false, nullptr, &trainers_, &faults_, identity, &callers_,
                               Heartbeat(&status_, identity, "", nullptr), nullptr});
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    stub_ = v1::TaskService::NewStub(grpc::CreateChannel("127.0.0.1:" + std::to_string(port),
                                                         grpc::InsecureChannelCredentials()));
  }
  ~ServedTask() { server_->Shutdown(); }

  // worker:0 handshakes at incarnation 5, then says it is done.
  grpc::Status HandshakeThenDone(v1::DoneResponse* done) {
    v1::HandshakeRequest hello;
    *hello.mutable_from()->mutable_task() = Id("worker", 0);
    hello.mutable_from()->set_incarnation(5);
    v1::HandshakeResponse answer;
    grpc::ClientContext c1;
    grpc::Status st = stub_->Handshake(&c1, hello, &answer);
    if (!st.ok()) return st;
    v1::DoneRequest request;
    *request.mutable_from() = Id("worker", 0);
    request.set_incarnation(5);
    grpc::ClientContext c2;
    return stub_->Done(&c2, request, done);
  }
  const TaskMetrics& metrics() const { return metrics_; }

 private:
  const TaskRef self_{"ps", 0};
  ClusterSpec cluster_;
  TaskStatus status_;
  TaskMetrics metrics_;
  TrainerRegistry trainers_;
  FaultInjector faults_;
  Callers callers_;
  std::unique_ptr<grpc::Service> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::TaskService::Stub> stub_;
};

TEST(CallersTest, UnderMutualTlsACallerWithoutACertificateNamingItIsRefusedAndCounted) {
  ServedTask task(/*mutual_tls=*/true);
  v1::DoneResponse done;
  grpc::Status st = task.HandshakeThenDone(&done);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  const std::string& m = st.error_message();
  EXPECT_EQ(m.rfind("ps:0 refused Done from worker:0 at ipv4:127.0.0.1:", 0), 0u) << m;
  EXPECT_NE(m.find(": its certificate names nothing, not 127.0.0.1 (the host the cluster spec "
                   "gives it)"),
            std::string::npos)
      << m;
  EXPECT_EQ(IdentityRefusals(task.metrics()), 1);
}

TEST(CallersTest, WithoutMutualTlsTheSameCallGoesThrough) {
  ServedTask task(/*mutual_tls=*/false);
  v1::DoneResponse done;
  grpc::Status st = task.HandshakeThenDone(&done);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(done.workers_remaining(), 2);  // chief:0 and worker:1 still train.
  EXPECT_EQ(IdentityRefusals(task.metrics()), 0);
}

}  // namespace
}  // namespace trainscope
