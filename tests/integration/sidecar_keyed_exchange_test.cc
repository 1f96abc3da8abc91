// Two real sidecars with a cluster key (--exchange_key_file), and a process of the same network
// that tries to lie to them: without the key (forged SILENT updates and dead-worker records, as
// from the other node), and with it (a replay; a lie no node could tell of another). No view
// changes, each refusal is counted by reason, and the refusals tell nothing of the cluster.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <thread>

#include "grpcpp/grpcpp.h"
#include "sidecar_harness.h"
#include "trainscope/sidecar/exchange_keys.h"
#include "trainscope/sidecar/v1/sidecar.grpc.pb.h"

namespace trainscope::testing {
namespace {

using sidecar::TaskState;
using std::chrono::seconds;
namespace v1 = sidecar::v1;

const char kKey[] = "trainscope-test-cluster-key-0123456789";

double UnixNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// What a forger sends, "from" node `as`: `as` is silent with a generation from the future, and
// its worker is dead in a record far ahead.
v1::PingRequest Lie(const std::string& as, const std::string& to) {
  v1::PingRequest req;
  req.mutable_header()->set_protocol_version(1);
  req.mutable_header()->set_cluster("default");
  req.mutable_header()->set_node(as);
  req.mutable_header()->set_generation(static_cast<uint64_t>(UnixNow() * 1e9));
  req.set_target(to);
  v1::MemberUpdate* u = req.mutable_gossip()->add_members();
  u->set_node(as);
  u->set_status(v1::MemberUpdate::SILENT);
  u->set_generation(~uint64_t{0} >> 1);
  u->set_incarnation(1u << 30);
  v1::NodeRecord* r = req.mutable_gossip()->add_records();
  r->set_node(as);
  r->set_generation(static_cast<uint64_t>(UnixNow() * 1e9));
  r->set_version(1000000);
  r->set_made_at(UnixNow() + 3600);
  v1::TaskView* t = r->add_tasks();
  t->set_role("worker");
  t->set_task(0);
  t->set_name("worker:0");
  t->set_state("dead");
  t->set_reason("forged");
  return req;
}

grpc::Status Send(const std::string& address, const v1::PingRequest& req) {
  auto stub =
      v1::Exchange::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + seconds(5));
  v1::PingResponse resp;
  return stub->Ping(&ctx, req, &resp);
}

double Counter(const std::string& metrics, const std::string& series) {
  size_t at = metrics.find("\n" + series + " ");
  return at == std::string::npos ? -1 : std::stod(metrics.substr(at + series.size() + 2));
}

TEST(SidecarKeyedExchange, LiesFromTheNetworkChangeNoView) {
  const std::string key_file = ::testing::TempDir() + "/exchange-" + std::to_string(getpid());
  std::ofstream(key_file) << kKey << "\n";
  chmod(key_file.c_str(), 0600);
  Cluster cluster = {{"ps", {FreeAddress()}}, {"worker", {FreeAddress()}}};
  auto ps = StartFakeTask(cluster["ps"][0], "ps", 0, {"--phase", "serving"});
  auto worker = StartFakeTask(cluster["worker"][0], "worker", 0,
                              {"--phase", "training", "--steps_per_s", "20"});
  const std::string a = "127.0.0.1:" + std::to_string(FreePort());
  const std::string b = "127.0.0.1:" + std::to_string(FreePort());
  auto port = [](const std::string& id) { return id.substr(id.rfind(':') + 1); };
  Sidecar sa(cluster, {"--grpc_port", port(a), "--local_tasks", "ps:0", "--peer_sidecars", b,
                       "--exchange_key_file", key_file});
  Sidecar sb(cluster, {"--grpc_port", port(b), "--local_tasks", "worker:0", "--peer_sidecars", a,
                       "--exchange_key_file", key_file});
  for (Sidecar* s : {&sa, &sb}) {
    for (const char* t : {"ps:0", "worker:0"}) {
      ASSERT_TRUE(s->WaitForState(t, TaskState::kUp, seconds(20))) << t << "\n" << s->Describe();
    }
  }

  // Without the key: ten lies to each, as from the other node. Refused, without the cluster's
  // name in the refusal.
  for (int i = 0; i < 10; ++i) {
    for (auto [to, as] : {std::pair{a, b}, std::pair{b, a}}) {
      grpc::Status s = Send(to, Lie(as, to));
      EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << s.error_message();
      EXPECT_NE(s.error_message().find("unsigned"), std::string::npos) << s.error_message();
      EXPECT_EQ(s.error_message().find("default"), std::string::npos) << s.error_message();
    }
  }
  // With the key: a message replayed is refused; a lie about another node is not believed.
  auto keys = sidecar::ExchangeKeys::FromSecrets({kKey});
  ASSERT_TRUE(keys.ok());
  v1::PingRequest signed_lie = Lie(b, a);
  (*keys)->Sign(&signed_lie, UnixNow());
  EXPECT_TRUE(Send(a, signed_lie).ok()) << "a signed message is taken (its lies are not)";
  grpc::Status replay = Send(a, signed_lie);
  EXPECT_NE(replay.error_message().find("replay"), std::string::npos) << replay.error_message();

  std::this_thread::sleep_for(seconds(2));
  for (Sidecar* s : {&sa, &sb}) {
    for (const char* t : {"ps:0", "worker:0"}) {
      auto view = s->Task(t);
      ASSERT_TRUE(view) << s->Describe();
      EXPECT_EQ(view->state, TaskState::kUp) << t << ": " << view->reason << "\n" << s->Describe();
    }
    const std::string metrics = s->Get("/metrics");
    EXPECT_EQ(Counter(metrics, "trainscope_sidecar_exchange_authenticated"), 1) << metrics;
    EXPECT_GE(Counter(metrics, "trainscope_sidecar_exchange_refused_total{reason=\"unsigned\"}"),
              10)
        << metrics;
    EXPECT_EQ(Counter(metrics, "trainscope_sidecar_members{status=\"alive\"}"), 1) << metrics;
    EXPECT_EQ(Counter(metrics, "trainscope_sidecar_members{status=\"silent\"}"), 0) << metrics;
  }
  EXPECT_EQ(
      Counter(sa.Get("/metrics"), "trainscope_sidecar_exchange_refused_total{reason=\"replayed\"}"),
      1);
  unlink(key_file.c_str());
}

// Secure by default: a sidecar given no key (and no mutual TLS) opens no exchange. It watches
// its own node, says so in its log, /metrics and the page's API, names why for the other nodes'
// tasks, and nothing sent to its gRPC port as the exchange is taken; the keyed peer never hears
// from it and says so.
TEST(SidecarKeyedExchange, WithoutAKeyTheExchangeIsClosedAndSaysWhy) {
  Cluster cluster = {{"ps", {FreeAddress()}}, {"worker", {FreeAddress()}}};
  auto ps = StartFakeTask(cluster["ps"][0], "ps", 0, {"--phase", "serving"});
  auto worker = StartFakeTask(cluster["worker"][0], "worker", 0,
                              {"--phase", "training", "--steps_per_s", "20"});
  const std::string a = "127.0.0.1:" + std::to_string(FreePort());
  const std::string b = "127.0.0.1:" + std::to_string(FreePort());
  auto port = [](const std::string& id) { return id.substr(id.rfind(':') + 1); };
  Sidecar keyed(cluster, {"--grpc_port", port(a), "--local_tasks", "ps:0", "--peer_sidecars", b});
  Sidecar closed(cluster, {"--grpc_port", port(b), "--local_tasks", "worker:0", "--peer_sidecars",
                           a, kNoExchangeKey});
  ASSERT_TRUE(closed.WaitForState("worker:0", TaskState::kUp, seconds(20))) << closed.Describe();
  auto ps_there = closed.WaitForState("ps:0", TaskState::kUnreachable, seconds(10),
                                      "the exchange, which is closed here");
  ASSERT_TRUE(ps_there) << closed.Describe();
  EXPECT_NE(ps_there->reason.find("no cluster key (--exchange_key_file"), std::string::npos)
      << ps_there->reason;
  EXPECT_NE(closed.process().Output().find("THE EXCHANGE WITH THE OTHER NODES' SIDECARS IS CLOSED"),
            std::string::npos)
      << closed.process().Output();
  const std::string metrics = closed.Get("/metrics");
  EXPECT_EQ(Counter(metrics, "trainscope_sidecar_exchange_closed"), 1) << metrics;
  EXPECT_EQ(Counter(metrics, "trainscope_sidecar_exchange_authenticated"), 1) << metrics;
  EXPECT_EQ(Counter(keyed.Get("/metrics"), "trainscope_sidecar_exchange_closed"), 0);
  // The page's banner says it from the API.
  EXPECT_NE(closed.Get("/api/v1/tasks").find("\"exchange_closed\":\"no cluster key"),
            std::string::npos);
  EXPECT_NE(keyed.Get("/api/v1/tasks").find("\"exchange_closed\":\"\""), std::string::npos);

  // A lie sent to the closed sidecar's port as the exchange: nothing there takes it.
  for (int i = 0; i < 5; ++i) {
    grpc::Status s = Send(b, Lie(a, b));
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNIMPLEMENTED) << s.error_message();
  }
  auto still = closed.Task("worker:0");
  ASSERT_TRUE(still);
  EXPECT_EQ(still->state, TaskState::kUp) << still->reason;
  // The keyed sidecar never hears the closed one: its task is unreachable, and why.
  auto unheard =
      keyed.WaitForState("worker:0", TaskState::kUnreachable, seconds(20), "has never answered");
  EXPECT_TRUE(unheard) << keyed.Describe();
}

}  // namespace
}  // namespace trainscope::testing
