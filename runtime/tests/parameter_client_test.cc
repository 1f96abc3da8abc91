// ParameterClient against real ps tasks in this process: each ps serves the runtime's own
// ParameterService and TaskService (NewParameterService, NewTaskService, with a real
// ParameterStore, FaultInjector and the rest) on 127.0.0.1, and the worker's client reaches them
// over real gRPC channels. Covered: placement and creation, pulls and pushes to several ps at
// once, a ps that does not answer (the FaultInjector's wedge) within the deadline and within the
// patience, a lost Push answer retried and applied once, a stopped ps, and a ps restarted with a
// new incarnation, with and without a checkpoint.
#include "trainscope/runtime/parameter_client.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "callers.h"
#include "fault_injector.h"
#include "heartbeat.h"
#include "internal.h"
#include "parameter_store.h"
#include "ps_memory.h"
#include "task_impl.h"
#include "task_metrics.h"
#include "task_status.h"
#include "trainer_registry.h"
#include "trainscope/common/clock.h"
#include "trainscope/v1/runtime.grpc.pb.h"

namespace trainscope {
namespace {

using std::chrono::milliseconds;

std::string Floats(const std::vector<float>& v) {
  std::string bytes(v.size() * sizeof(float), '\0');
  std::memcpy(bytes.data(), v.data(), bytes.size());
  return bytes;
}

std::vector<float> FloatsOf(const std::string& bytes) {
  std::vector<float> v(bytes.size() / sizeof(float));
  std::memcpy(v.data(), bytes.data(), v.size() * sizeof(float));
  return v;
}

VariableDef Variable(const std::string& name, std::vector<float> values) {
  const int64_t n = static_cast<int64_t>(values.size());
  return {name, {DType::kFloat, {n}}, Floats(values)};
}

// Whom the ps tasks know: nothing dials these addresses (mutual TLS is off, so no caller's
// address is checked); the trainer registry reads the roles.
ClusterSpec ThreePsCluster() {
  return *ClusterSpec::FromJobs({{"worker", {"127.0.0.1:1", "127.0.0.1:2"}},
                                 {"ps", {"127.0.0.1:3", "127.0.0.1:4", "127.0.0.1:5"}}});
}

// One ps task: what its process holds, its two services and its gRPC server. Restart ends the
// process and starts another on the same port, with a new incarnation, as a restarted ps would.
class ServedPs {
 public:
  struct Options {
    uint64_t incarnation = 0;
    int drop_push_answers = 0;  // The first N Push answers are lost after applying.
    // Restored from a checkpoint: its step and the variables, with their values.
    std::optional<int64_t> restored_step;
    std::vector<VariableDef> restored;
  };

  ServedPs(int index, Options options) : self_{"ps", index} { Serve(0, std::move(options)); }
  ~ServedPs() { Stop(); }

  void Stop() {
    if (!process_) return;
    process_->faults.Release();  // A wedged call returns, so that the server can end.
    process_->server->Shutdown(std::chrono::system_clock::now() + milliseconds(100));
    process_.reset();
  }
  void Restart(Options options) {
    Stop();
    Serve(port_, std::move(options));
  }

  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  const TaskRef& self() const { return self_; }
  ParameterStore& store() { return process_->store; }
  FaultInjector& faults() { return process_->faults; }
  const TaskStatus& status() const { return process_->status; }
  std::optional<std::vector<float>> Value(const std::string& name) {
    TensorSpec spec;
    std::string bytes;
    if (!process_->store.Read(name, &spec, &bytes).ok()) return std::nullopt;
    return FloatsOf(bytes);
  }

 private:
  struct Process {
    Process(const TaskRef& self, const Options& o)
        : cluster(ThreePsCluster()),
          metrics("test", self, &status, 0),
          faults(0, o.drop_push_answers),
          store(ParameterStoreOptions{self.ShortName(), 0}),
          memory(o.incarnation),
          callers(cluster, self, /*mutual_tls=*/false, nullptr, &metrics),
          trainers(cluster, self) {}
    ClusterSpec cluster;
    TaskStatus status;
    TaskMetrics metrics;
    FaultInjector faults;
    ParameterStore store;
    RecentRequests recent_pushes{4096};
    PsMemory memory;
    Callers callers;
    TrainerRegistry trainers;
    std::unique_ptr<grpc::Service> parameter_service;
    std::unique_ptr<grpc::Service> task_service;
    std::unique_ptr<grpc::Server> server;
  };

  void Serve(int port, Options o) {
    process_ = std::make_unique<Process>(self_, o);
    Process& p = *process_;
    for (const VariableDef& v : o.restored)
      ASSERT_TRUE(p.store.Create(v.name, v.spec, v.initial, "a checkpoint").ok());
    if (o.restored_step)
      p.memory.SetRestored(*o.restored_step, "/ckpt/step-" + std::to_string(*o.restored_step));
    v1::TaskIdentity identity;
    *identity.mutable_task() = TaskIdToProto(self_);
    identity.set_incarnation(o.incarnation);
    p.parameter_service = NewParameterService({&p.store, nullptr, &p.metrics, &p.status, &p.faults,
                                               &p.recent_pushes, &p.callers, &p.memory});
    p.task_service =
        NewTaskService({self_, false, nullptr, &p.trainers, &p.faults, identity, &p.callers,
                        Heartbeat(&p.status, identity, "", &p.memory), &p.memory});
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:" + std::to_string(port), grpc::InsecureServerCredentials(),
                             &port_);
    builder.RegisterService(p.parameter_service.get());
    builder.RegisterService(p.task_service.get());
    p.server = builder.BuildAndStart();
    ASSERT_NE(p.server, nullptr);
    ASSERT_NE(port_, 0);
  }

  const TaskRef self_;
  int port_ = 0;
  std::unique_ptr<Process> process_;
};

// A ps process started empty at `incarnation`.
ServedPs::Options FreshPs(uint64_t incarnation, int drop_push_answers = 0) {
  ServedPs::Options o;
  o.incarnation = incarnation;
  o.drop_push_answers = drop_push_answers;
  return o;
}

// A ps process at `incarnation` that restored `variables` from the checkpoint of `step`.
ServedPs::Options RestoredPs(uint64_t incarnation, int64_t step,
                             std::vector<VariableDef> variables) {
  ServedPs::Options o = FreshPs(incarnation);
  o.restored_step = step;
  o.restored = std::move(variables);
  return o;
}

class ParameterClientTest : public ::testing::Test {
 protected:
  // `n` ps tasks, ps:i at incarnation 0x100 + i.
  void StartPs(int n, int drop_push_answers = 0) {
    for (int i = 0; i < n; ++i) {
      ps_.push_back(std::make_unique<ServedPs>(i, FreshPs(0x100u + i, drop_push_answers)));
    }
  }

  // worker:`worker`'s client of every ps, after handshaking with each as CreateSession does.
  std::unique_ptr<ParameterClient> Client(int rpc_deadline_ms, double patience_s, int worker = 0) {
    v1::TaskIdentity identity;
    *identity.mutable_task() = TaskIdToProto({"worker", worker});
    identity.set_incarnation(0x77 + worker);
    std::vector<Session::Peer> peers;
    for (auto& ps : ps_) {
      peers.push_back({ps->self(), ps->address(),
                       MakePeerChannel(ps->address(), grpc::InsecureChannelCredentials()),
                       status_.Peer(ps->self(), ps->address()), -1});
    }
    for (const Session::Peer& peer : peers) {
      auto hello = HandshakeWith(peer, identity, 2000);
      EXPECT_TRUE(hello.ok()) << hello.status();
    }
    sessions_.push_back(
        std::make_unique<Session>(std::move(peers), nullptr, &status_, identity, nullptr));
    return NewParameterClient(sessions_.back().get(), {"worker", worker}, rpc_deadline_ms,
                              patience_s);
  }

  std::vector<std::unique_ptr<ServedPs>> ps_;
  TaskStatus status_;  // The worker's.
  std::vector<std::unique_ptr<Session>> sessions_;
};

// Two variables of the same size: "a" on ps:0, "b" on ps:1 (PlaceVariables).
std::vector<VariableDef> TwoVariables() {
  return {Variable("a", {1, 2, 3, 4}), Variable("b", {10, 20, 30, 40})};
}

TEST_F(ParameterClientTest, CreatesEachVariableOnlyOnThePsItIsPlacedOn) {
  StartPs(3);
  const std::vector<VariableDef> vars = {
      Variable("big", std::vector<float>(1000, 1)), Variable("mid1", std::vector<float>(500, 2)),
      Variable("mid2", std::vector<float>(500, 3)), Variable("small", std::vector<float>(10, 4)),
      Variable("tiny", {5})};
  const std::map<std::string, int> placement = PlaceVariables(vars, 3);
  auto client = Client(2000, 1);
  ASSERT_TRUE(client->CreateVariables(vars).ok());
  ASSERT_EQ(client->variables().size(), vars.size());
  std::set<int> used;
  for (size_t i = 0; i < vars.size(); ++i) {
    SCOPED_TRACE(vars[i].name);
    const int ps = placement.at(vars[i].name);
    used.insert(ps);
    EXPECT_EQ(client->PlacementOf(i), ps);
    EXPECT_TRUE(client->variables()[i].initial.empty());  // Dropped once created.
    for (int p = 0; p < 3; ++p) {
      std::optional<std::vector<float>> held = ps_[p]->Value(vars[i].name);
      EXPECT_EQ(held.has_value(), p == ps) << "ps:" << p;
      if (held) {
        EXPECT_EQ(*held, FloatsOf(vars[i].initial));
      }
    }
  }
  EXPECT_EQ(used.size(), 3u);  // Spread over every ps.
  // Another worker declares the same variables: each exists already and keeps its value.
  ASSERT_TRUE(ps_[placement.at("tiny")]
                  ->store()
                  .ApplyGradient("tiny", {DType::kFloat, {1}}, Floats({1}), 1, "test")
                  .ok());
  auto other = Client(2000, 1, /*worker=*/1);
  ASSERT_TRUE(other->CreateVariables(vars).ok());
  int64_t held = 0;
  for (auto& ps : ps_) held += ps->store().num_variables();
  EXPECT_EQ(held, 5);
  EXPECT_EQ(*ps_[placement.at("tiny")]->Value("tiny"), std::vector<float>{4});
}

TEST_F(ParameterClientTest, PullsAndPushesReachEveryPsOnceABatch) {
  StartPs(2);
  auto client = Client(2000, 1);
  ASSERT_TRUE(client->CreateVariables(TwoVariables()).ok());
  ASSERT_EQ(client->PlacementOf(0), 0);
  ASSERT_EQ(client->PlacementOf(1), 1);
  std::vector<std::string> values;
  ASSERT_TRUE(client->PullAll(&values).ok());
  ASSERT_EQ(values.size(), 2u);
  EXPECT_EQ(FloatsOf(values[0]), (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(FloatsOf(values[1]), (std::vector<float>{10, 20, 30, 40}));
  ASSERT_TRUE(client->PushAll({{0, Floats({2, 2, 2, 2})}, {1, Floats({4, 4, 4, 4})}}, 0.5f).ok());
  ASSERT_TRUE(client->Push(1, Floats({0, 0, 0, 2}), 1.0f).ok());
  ASSERT_TRUE(client->PullAll(&values).ok());
  EXPECT_EQ(FloatsOf(values[0]), (std::vector<float>{0, 1, 2, 3}));
  EXPECT_EQ(FloatsOf(values[1]), (std::vector<float>{8, 18, 28, 36}));
  // ps:0: two pulls and a push; ps:1 a push more. One call per ps per batch, not per variable.
  EXPECT_EQ(ps_[0]->status().Read().served_calls, 3);
  EXPECT_EQ(ps_[1]->status().Read().served_calls, 4);
  EXPECT_EQ(ps_[0]->store().updates_applied(), 1u);
  EXPECT_EQ(ps_[1]->store().updates_applied(), 2u);
  EXPECT_FALSE(status_.Read().waiting);
}

TEST_F(ParameterClientTest, CallsToSeveralPsRunAtOnce) {
  StartPs(2);
  auto client = Client(4000, 5);
  ASSERT_TRUE(client->CreateVariables(TwoVariables()).ok());
  ps_[0]->faults().ArmBlockParameterService();  // ps:0's next call blocks until released.
  absl::Status pulled;
  std::vector<std::string> values;
  std::thread pull([&] { pulled = client->PullAll(&values); });
  // ps:1 answers while ps:0 still holds its call (ps:0's is started first): they run at once.
  bool ps1_answered_while_ps0_blocked = false;
  bool listed_in_flight = false;
  const double give_up = MonotonicSeconds() + 3;
  while (MonotonicSeconds() < give_up && !ps1_answered_while_ps0_blocked) {
    std::this_thread::sleep_for(milliseconds(5));
    const bool ps0_holds = !ps_[0]->status().inflight().Oldest(4).empty();
    ps1_answered_while_ps0_blocked = ps0_holds && ps_[1]->status().Read().served_calls == 1;
    for (const InflightCalls::Call& c : status_.inflight().Oldest(4)) {
      if (std::string(c.method) == "Pull" && c.peer == ps_[0]->self()) listed_in_flight = true;
    }
  }
  ps_[0]->faults().Release();
  pull.join();
  EXPECT_TRUE(ps1_answered_while_ps0_blocked);
  EXPECT_TRUE(listed_in_flight);  // The worker's heartbeat lists the call it waits on.
  ASSERT_TRUE(pulled.ok()) << pulled;
  EXPECT_EQ(FloatsOf(values[0]), (std::vector<float>{1, 2, 3, 4}));
  EXPECT_TRUE(status_.inflight().Oldest(4).empty());  // Unlisted once it ended.
}

TEST_F(ParameterClientTest, APsThatDoesNotAnswerFailsTheCallNamingTaskPeerDeadlineAndTries) {
  struct Case {
    const char* name;
    double patience_s;
    bool retried;  // The error says how many attempts in how long.
  };
  for (const Case& c : {Case{"no patience: one attempt", 0, false},
                        Case{"0.6 s of patience: retried", 0.6, true}}) {
    SCOPED_TRACE(c.name);
    ps_.clear();
    StartPs(2);
    auto client = Client(200, c.patience_s);
    ASSERT_TRUE(client->CreateVariables(TwoVariables()).ok());
    ps_[1]->faults().ArmBlockParameterService();  // ps:1 is wedged: it never answers.
    std::vector<std::string> values;
    const double start = MonotonicSeconds();
    absl::Status st = client->PullAll(&values);
    const double took = MonotonicSeconds() - start;
    EXPECT_EQ(st.code(), absl::StatusCode::kDeadlineExceeded) << st;
    const std::string m(st.message());
    const std::string where = "Pull from worker:0 to ps:1 at " + ps_[1]->address() +
                              " exceeded its deadline of 200 ms (--rpc_deadline_ms)";
    EXPECT_EQ(m.rfind(where, 0), 0u) << m;
    EXPECT_NE(m.find(": ps:1 answered too slowly (overloaded? stopped?) or the network to it "
                     "is slow"),
              std::string::npos)
        << m;
    const std::regex tries(" after ([0-9]+) attempts in [^(]+ \\(--ps_patience_s 0\\.6\\)");
    std::smatch match;
    EXPECT_EQ(std::regex_search(m, match, tries), c.retried) << m;
    if (c.retried) {
      EXPECT_GE(std::stoi(match[1]), 2);
      EXPECT_GE(took, 0.6);
    }
    EXPECT_LT(took, 4.0);
    // The worker's heartbeat: waiting on ps:1, whose calls failed; ps:0's succeeded.
    const TaskStatus::Snapshot s = status_.Read();
    ASSERT_TRUE(s.waiting);
    ASSERT_EQ(s.waiting_on.size(), 1u);
    EXPECT_EQ(s.waiting_on[0].peer, ps_[1]->self());
    EXPECT_GE(s.waiting_on[0].consecutive_failures, c.retried ? 2 : 1);
    status_.StopWaiting();
  }
}

TEST_F(ParameterClientTest, ALostPushAnswerIsRetriedAndTheGradientAppliedOnce) {
  StartPs(1, /*drop_push_answers=*/1);
  auto client = Client(2000, 5);
  ASSERT_TRUE(client->CreateVariables({Variable("w", {1, 1})}).ok());
  absl::Status st = client->Push(0, Floats({1, 2}), 1.0f);
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_EQ(ps_[0]->store().updates_applied(), 1u);
  EXPECT_EQ(*ps_[0]->Value("w"), (std::vector<float>{0, -1}));  // Not {-1, -3}.
  // The next Push is a new request: applied.
  ASSERT_TRUE(client->Push(0, Floats({1, 1}), 1.0f).ok());
  EXPECT_EQ(*ps_[0]->Value("w"), (std::vector<float>{-1, -2}));
}

TEST_F(ParameterClientTest, AStoppedPsIsUnavailableNamingItsAddressAndTheCause) {
  StartPs(2);
  auto client = Client(500, 0.4);
  ASSERT_TRUE(client->CreateVariables(TwoVariables()).ok());
  ps_[1]->Stop();
  std::vector<std::string> values;
  absl::Status st = client->PullAll(&values);
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable) << st;
  const std::string m(st.message());
  EXPECT_EQ(m.rfind("Pull from worker:0 to ps:1 at " + ps_[1]->address() + " failed after ", 0), 0u)
      << m;
  EXPECT_NE(m.find("(--ps_patience_s 0.4)"), std::string::npos) << m;
  EXPECT_NE(m.find("is ps:1 still running"), std::string::npos) << m;
  const PeerHealth::Snapshot ps1 = status_.Peer(ps_[1]->self(), ps_[1]->address())->Read();
  EXPECT_FALSE(ps1.last_error.empty());
  EXPECT_GE(ps1.consecutive_failures, 2);
}

TEST_F(ParameterClientTest, APsRestartedFromACheckpointIsFollowedToItsStep) {
  StartPs(2);
  auto client = Client(1000, 5);
  ASSERT_TRUE(client->CreateVariables(TwoVariables()).ok());
  std::vector<std::string> values;
  ASSERT_TRUE(client->PullAll(&values).ok());
  EXPECT_EQ(client->TakeResume(), std::nullopt);
  ps_[1]->Restart(RestoredPs(0x201, 42, {Variable("b", {7, 7, 7, 7})}));
  absl::Status st = client->PullAll(&values);
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_EQ(FloatsOf(values[1]), (std::vector<float>{7, 7, 7, 7}));
  EXPECT_EQ(client->TakeResume(), 42);
  EXPECT_EQ(client->TakeResume(), std::nullopt);  // Once.
  // It handshook with the new ps: the worker knows its incarnation, and the ps knows the worker.
  EXPECT_EQ(status_.Peer(ps_[1]->self(), ps_[1]->address())->Read().peer_incarnation, 0x201u);
  // A push to the restarted ps goes on as usual, and no new restart is seen.
  ASSERT_TRUE(client->Push(1, Floats({1, 1, 1, 1}), 1.0f).ok());
  EXPECT_EQ(*ps_[1]->Value("b"), (std::vector<float>{6, 6, 6, 6}));
  EXPECT_EQ(client->TakeResume(), std::nullopt);
}

TEST_F(ParameterClientTest, APsRestartedEmptyIsExplainedNotJustRefused) {
  StartPs(2);
  auto client = Client(1000, 5);
  ASSERT_TRUE(client->CreateVariables(TwoVariables()).ok());
  ps_[1]->Restart(FreshPs(0x202));
  std::vector<std::string> values;
  absl::Status st = client->PullAll(&values);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  const std::string m(st.message());
  EXPECT_EQ(m.rfind("ps:1 restarted (incarnation 0000000000000101 -> 0000000000000202) and lost "
                    "its variables; no checkpoint in --checkpoint_dir to restore from (",
                    0),
            0u)
      << m;
  EXPECT_NE(m.find("ps:1"), std::string::npos);
}

}  // namespace
}  // namespace trainscope
