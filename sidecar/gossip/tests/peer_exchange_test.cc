// The exchange's gRPC side (PeerExchange): three sidecars' exchanges, each on a real gRPC server
// on loopback, learn each other's records, hear a leave, refuse a node keyed otherwise, and
// fetch another node's snapshots. The protocol itself is tested without transport
// (exchange_core_test.cc); this is what only real calls show.
#include "trainscope/sidecar/peer_exchange.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "process.h"
#include "trainscope/sidecar/exchange_keys.h"

namespace trainscope::sidecar {
namespace {

constexpr char kKeyA[] = "the cluster key, at least thirty-two bytes long";
constexpr char kKeyB[] = "another cluster's key, also thirty-two bytes long";

// One node: its exchange, served on its own gRPC server at 127.0.0.1:<port>.
class Node {
 public:
  Node(const std::string& self, std::vector<std::string> peers, const char* key) {
    ExchangeOptions o;
    o.cluster = "c";
    o.self = self;
    o.hostname = self;
    o.peers = std::move(peers);
    o.membership.period_s = 0.05;
    o.sync_interval_s = 0.2;
    if (key != nullptr) o.keys = *ExchangeKeys::FromSecrets({key});
    exchange_ = std::make_unique<PeerExchange>(std::move(o), [this] {
      std::lock_guard lock(mu_);
      return views_;
    });
    grpc::ServerBuilder builder;
    builder.AddListeningPort(self, grpc::InsecureServerCredentials());
    builder.RegisterService(exchange_->service());
    builder.RegisterService(exchange_->snapshots_service());
    exchange_->SetStacksProvider([self](const std::string& task, bool fresh) {
      pb::StackList list;
      list.set_task(task);
      list.set_node(self);
      list.add_snapshots()->set_trigger(fresh ? "demand" : "hung");
      return absl::StatusOr<pb::StackList>(list);
    });
    server_ = builder.BuildAndStart();
    exchange_->Start();
  }
  ~Node() { Stop(); }

  void Stop() {
    if (!server_) return;
    exchange_->Stop();
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(200));
    server_.reset();
  }

  void SetTask(const std::string& role, int index, TaskState state) {
    TaskView v;
    v.cluster = "c";
    v.task = {role, index};
    v.state = state;
    v.reason = std::string(StateName(state));
    std::lock_guard lock(mu_);
    views_ = {v};
  }

  PeerExchange& exchange() { return *exchange_; }

  // The state of `task` in the record this node holds of `node`; nullopt when it holds none.
  std::optional<std::string> StateIn(const std::string& node, const std::string& task) const {
    const auto snapshot = exchange_->snapshot();
    auto it = snapshot->records.find(node);
    if (it == snapshot->records.end()) return std::nullopt;
    for (const pb::TaskView& t : it->second->record.tasks()) {
      if (t.name() == task) return t.state();
    }
    return std::nullopt;
  }

  std::optional<MemberStatus> StatusOf(const std::string& id) const {
    for (const Member& m : exchange_->snapshot()->members) {
      if (m.id == id) return m.status;
    }
    return std::nullopt;
  }

 private:
  std::mutex mu_;
  std::vector<TaskView> views_;
  std::unique_ptr<PeerExchange> exchange_;
  std::unique_ptr<grpc::Server> server_;
};

// Waits up to 10 s for `done`.
bool Eventually(const std::function<bool()>& done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return done();
}

std::vector<std::string> Ids(int n) {
  std::vector<std::string> ids;
  for (int i = 0; i < n; ++i) ids.push_back(absl::StrCat("127.0.0.1:", testing::FreePort()));
  return ids;
}

std::vector<std::string> Others(const std::vector<std::string>& ids, const std::string& self) {
  std::vector<std::string> out;
  for (const std::string& id : ids) {
    if (id != self) out.push_back(id);
  }
  return out;
}

TEST(PeerExchange, RecordsAndChangesReachEveryNodeAndALeaveIsHeard) {
  const std::vector<std::string> ids = Ids(3);
  std::vector<std::unique_ptr<Node>> nodes;
  for (const std::string& id : ids)
    nodes.push_back(std::make_unique<Node>(id, Others(ids, id), kKeyA));
  nodes[0]->SetTask("ps", 0, TaskState::kUp);
  nodes[1]->SetTask("worker", 0, TaskState::kUp);
  nodes[2]->SetTask("worker", 1, TaskState::kUp);
  for (auto& n : nodes) n->exchange().Poke();
  EXPECT_TRUE(Eventually([&] {
    return nodes[2]->StateIn(ids[0], "ps:0") == "up" &&
           nodes[0]->StateIn(ids[1], "worker:0") == "up" &&
           nodes[1]->StateIn(ids[2], "worker:1") == "up";
  }));

  // A change is news: it reaches the others without waiting for anti-entropy's turn.
  nodes[0]->SetTask("ps", 0, TaskState::kHung);
  nodes[0]->exchange().Poke();
  EXPECT_TRUE(Eventually([&] {
    return nodes[1]->StateIn(ids[0], "ps:0") == "hung" &&
           nodes[2]->StateIn(ids[0], "ps:0") == "hung";
  }));
  const ExchangeStats stats = nodes[1]->exchange().stats();
  EXPECT_TRUE(stats.authenticated);
  EXPECT_GT(stats.messages_received, 0);
  EXPECT_GT(stats.records_learned, 0);

  // A node that stops says so: the others hear it left, not that it died.
  nodes[2]->Stop();
  EXPECT_TRUE(Eventually([&] {
    return nodes[0]->StatusOf(ids[2]) == MemberStatus::kLeft &&
           nodes[1]->StatusOf(ids[2]) == MemberStatus::kLeft;
  }));
}

TEST(PeerExchange, ANodeKeyedOtherwiseIsRefusedAndNeverBelieved) {
  const std::vector<std::string> ids = Ids(3);
  Node a(ids[0], Others(ids, ids[0]), kKeyA);
  Node b(ids[1], Others(ids, ids[1]), kKeyA);
  Node stranger(ids[2], Others(ids, ids[2]), kKeyB);
  a.SetTask("ps", 0, TaskState::kUp);
  b.SetTask("worker", 0, TaskState::kUp);
  stranger.SetTask("worker", 1, TaskState::kDead);  // A forged page, were it believed.
  EXPECT_TRUE(Eventually([&] { return b.StateIn(ids[0], "ps:0") == "up"; }));
  EXPECT_TRUE(Eventually([&] {
    const ExchangeStats s = a.exchange().stats();
    int64_t refused = 0;
    for (int64_t r : s.refused) refused += r;
    return refused > 0;
  }));
  EXPECT_EQ(a.StateIn(ids[2], "worker:1"), std::nullopt);
  EXPECT_EQ(b.StateIn(ids[2], "worker:1"), std::nullopt);
}

TEST(PeerExchange, FetchesAnotherNodesSnapshotsAndSaysWhyNot) {
  const std::vector<std::string> ids = Ids(2);
  Node a(ids[0], {ids[1]}, nullptr);
  Node b(ids[1], {ids[0]}, nullptr);
  auto kept = a.exchange().FetchStacks(ids[1], "worker:0", false, 3000, 1 << 20);
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_EQ(kept->node(), ids[1]);
  EXPECT_EQ(kept->task(), "worker:0");
  ASSERT_EQ(kept->snapshots_size(), 1);
  EXPECT_EQ(kept->snapshots(0).trigger(), "hung");
  auto fresh = a.exchange().FetchStacks(ids[1], "worker:0", true, 3000, 1 << 20);
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  EXPECT_EQ(fresh->snapshots(0).trigger(), "demand");

  // An answer over the bound is refused; a node that is not there is named.
  auto big = a.exchange().FetchStacks(ids[1], "worker:0", false, 3000, 8);
  EXPECT_FALSE(big.ok());
  b.Stop();
  auto gone = a.exchange().FetchStacks(ids[1], "worker:0", false, 1000, 1 << 20);
  ASSERT_FALSE(gone.ok());
  EXPECT_NE(std::string(gone.status().message()).find(ids[1]), std::string::npos) << gone.status();
}

}  // namespace
}  // namespace trainscope::sidecar
