// The exchange's gRPC side (PeerExchange): three sidecars' exchanges, each on a real gRPC server
// on loopback, learn each other's records, hear a leave, refuse a node keyed otherwise, and
// fetch another node's snapshots. The protocol itself is tested without transport
// (exchange_core_test.cc); this is what only real calls show.
#include "trainscope/sidecar/peer_exchange.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "process.h"
#include "trainscope/sidecar/exchange_keys.h"
#include "wait.h"

namespace trainscope::sidecar {
namespace {

constexpr char kKeyA[] = "the cluster key, at least thirty-two bytes long";
constexpr char kKeyB[] = "another cluster's key, also thirty-two bytes long";

// One node: its exchange, served on its own gRPC server at 127.0.0.1:<port>.
class Node {
 public:
  Node(const std::string& self, std::vector<std::string> peers, const char* key,
       OperatorCredential* credential = nullptr) {
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
      pb::StackSnapshot* snapshot = list.add_snapshots();
      snapshot->set_trigger(fresh ? "demand" : "hung");
      snapshot->add_threads()->add_frames()->set_pc(0x7f0012345678);
      return absl::StatusOr<pb::StackList>(list);
    });
    exchange_->SetOperatorCredential(credential);
    // It holds inc-1, with a snapshot of worker:0 and 20 slow requests of its window.
    exchange_->SetEvidenceProvider([self](const std::string& id, double from, double to) {
      pb::NodeEvidence e;
      e.set_node(self);
      if (id != "inc-1") return e;
      e.set_held(true);
      e.mutable_incident()->set_id(id);
      pb::IncidentEvidence* kept = e.mutable_incident()->add_evidence();
      kept->set_task("worker:0");
      kept->mutable_snapshot()->set_summary(std::string(300, 's'));
      for (int i = 0; i < 20; ++i) {
        pb::RequestSummary* r = e.mutable_slow()->add_requests();
        r->set_trace_id(std::string(32, 'a'));
        r->set_start_unix(from + (to - from) * i / 20);
      }
      return e;
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
bool Within10s(const std::function<bool()>& done) {
  return ::trainscope::testing::WaitUntil(done, std::chrono::seconds(10));
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
  EXPECT_TRUE(Within10s([&] {
    return nodes[2]->StateIn(ids[0], "ps:0") == "up" &&
           nodes[0]->StateIn(ids[1], "worker:0") == "up" &&
           nodes[1]->StateIn(ids[2], "worker:1") == "up";
  }));

  // A change is news: it reaches the others without waiting for anti-entropy's turn.
  nodes[0]->SetTask("ps", 0, TaskState::kHung);
  nodes[0]->exchange().Poke();
  EXPECT_TRUE(Within10s([&] {
    return nodes[1]->StateIn(ids[0], "ps:0") == "hung" &&
           nodes[2]->StateIn(ids[0], "ps:0") == "hung";
  }));
  const ExchangeStats stats = nodes[1]->exchange().stats();
  EXPECT_TRUE(stats.authenticated);
  EXPECT_GT(stats.messages_received, 0);
  EXPECT_GT(stats.records_learned, 0);

  // A node that stops says so: the others hear it left, not that it died.
  nodes[2]->Stop();
  EXPECT_TRUE(Within10s([&] {
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
  EXPECT_TRUE(Within10s([&] { return b.StateIn(ids[0], "ps:0") == "up"; }));
  EXPECT_TRUE(Within10s([&] {
    const ExchangeStats s = a.exchange().stats();
    int64_t refused = 0;
    for (int64_t r : s.refused) refused += r;
    return refused > 0;
  }));
  EXPECT_EQ(a.StateIn(ids[2], "worker:1"), std::nullopt);
  EXPECT_EQ(b.StateIn(ids[2], "worker:1"), std::nullopt);
}

// The operator's token as a test holds it, with the refusals counted.
class TestCredential final : public OperatorCredential {
 public:
  explicit TestCredential(std::string token) : token_(std::move(token)) {}
  std::string Token() override { return token_; }
  void CountRefusal(std::string_view reason) override {
    std::lock_guard lock(mu_);
    ++refused_[std::string(reason)];
  }
  int refused(const std::string& reason) {
    std::lock_guard lock(mu_);
    return refused_[reason];
  }

 private:
  const std::string token_;
  std::mutex mu_;
  std::map<std::string, int> refused_;
};

TEST(PeerExchange, FetchesAnotherNodesSnapshotsAndSaysWhyNot) {
  const std::vector<std::string> ids = Ids(2);
  TestCredential token_a("the operator's token, thirty-two bytes");
  TestCredential token_b("the operator's token, thirty-two bytes");
  Node a(ids[0], {ids[1]}, nullptr, &token_a);
  Node b(ids[1], {ids[0]}, nullptr, &token_b);
  auto kept = a.exchange().FetchStacks(ids[1], "worker:0", false, 3000, 1 << 20);
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_EQ(kept->node(), ids[1]);
  EXPECT_EQ(kept->task(), "worker:0");
  ASSERT_EQ(kept->snapshots_size(), 1);
  EXPECT_EQ(kept->snapshots(0).trigger(), "hung");
  EXPECT_EQ(kept->snapshots(0).threads(0).frames(0).pc(), 0x7f0012345678u);  // Proven: kept.
  auto fresh = a.exchange().FetchStacks(ids[1], "worker:0", true, 3000, 1 << 20);
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  EXPECT_EQ(fresh->snapshots(0).trigger(), "demand");
  EXPECT_EQ(token_b.refused("bad_token"), 0);
}

TEST(PeerExchange, WithoutTheOperatorsTokenNoFreshCaptureAndNoAddresses) {
  const std::vector<std::string> ids = Ids(3);
  TestCredential token_b("the operator's token, thirty-two bytes");
  TestCredential other("another operator's token, thirty-two");
  Node a(ids[0], Others(ids, ids[0]), nullptr);  // No token file.
  Node b(ids[1], Others(ids, ids[1]), nullptr, &token_b);
  Node c(ids[2], Others(ids, ids[2]), nullptr, &other);
  auto kept = a.exchange().FetchStacks(ids[1], "worker:0", false, 3000, 1 << 20);
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_EQ(kept->snapshots(0).threads(0).frames(0).pc(), 0u);  // Read, without addresses.
  auto fresh = a.exchange().FetchStacks(ids[1], "worker:0", true, 3000, 1 << 20);
  ASSERT_FALSE(fresh.ok());
  EXPECT_NE(std::string(fresh.status().message()).find("carries no operator's credential"),
            std::string::npos)
      << fresh.status();
  auto wrong = c.exchange().FetchStacks(ids[1], "worker:0", true, 3000, 1 << 20);
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(std::string(wrong.status().message()).find("does not hold here"), std::string::npos)
      << wrong.status();
  // b has a token, a none: a's own tasks are never captured on b's word.
  auto to_a = b.exchange().FetchStacks(ids[0], "worker:0", true, 3000, 1 << 20);
  ASSERT_FALSE(to_a.ok());
  EXPECT_NE(std::string(to_a.status().message()).find("it has no --api_token_file"),
            std::string::npos)
      << to_a.status();
  EXPECT_EQ(token_b.refused("no_credential"), 1);
  EXPECT_EQ(token_b.refused("bad_token"), 1);
}

TEST(PeerExchange, AnAnswerOverTheBoundOrANodeGoneIsNamed) {
  const std::vector<std::string> ids = Ids(2);
  Node a(ids[0], {ids[1]}, nullptr);
  Node b(ids[1], {ids[0]}, nullptr);

  // An answer over the bound is refused; a node that is not there is named.
  auto big = a.exchange().FetchStacks(ids[1], "worker:0", false, 3000, 8);
  EXPECT_FALSE(big.ok());
  b.Stop();
  auto gone = a.exchange().FetchStacks(ids[1], "worker:0", false, 1000, 1 << 20);
  ASSERT_FALSE(gone.ok());
  EXPECT_NE(std::string(gone.status().message()).find(ids[1]), std::string::npos) << gone.status();
}

TEST(PeerExchange, FetchesAnotherNodesEvidenceOnlyForTheClusterAndWithinTheBound) {
  const std::vector<std::string> ids = Ids(3);
  Node a(ids[0], Others(ids, ids[0]), kKeyA);
  Node b(ids[1], Others(ids, ids[1]), kKeyA);
  Node stranger(ids[2], Others(ids, ids[2]), kKeyB);
  auto held = a.exchange().FetchEvidence(ids[1], "inc-1", 100, 200, 3000, 1 << 20);
  ASSERT_TRUE(held.ok()) << held.status();
  EXPECT_EQ(held->node(), ids[1]);
  EXPECT_TRUE(held->held());
  EXPECT_EQ(held->incident().evidence(0).snapshot().summary().size(), 300u);
  EXPECT_EQ(held->slow().requests_size(), 20);
  EXPECT_EQ(held->dropped(), "");
  auto none = a.exchange().FetchEvidence(ids[1], "inc-2", 100, 200, 3000, 1 << 20);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_FALSE(none->held());

  // Cut to the bound: the requests first, the snapshot last, saying so.
  auto cut = a.exchange().FetchEvidence(ids[1], "inc-1", 100, 200, 3000, 600);
  ASSERT_TRUE(cut.ok()) << cut.status();
  EXPECT_LT(cut->slow().requests_size(), 20);
  EXPECT_TRUE(cut->incident().evidence(0).has_snapshot());
  EXPECT_NE(cut->dropped().find("request(s) and 0 snapshot(s) left out"), std::string::npos)
      << cut->dropped();
  EXPECT_LE(cut->ByteSizeLong(), 600u);

  // Another cluster's node learns nothing.
  auto refused = stranger.exchange().FetchEvidence(ids[1], "inc-1", 100, 200, 3000, 1 << 20);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition) << refused.status();
  EXPECT_NE(std::string(refused.status().message()).find("refuses"), std::string::npos)
      << refused.status();
}

}  // namespace
}  // namespace trainscope::sidecar
