// Credentials for actions (issue 32), tried as an attacker would on loopback: floods of 16
// parallel fresh captures with no token file, with no or a wrong token (all refused, nothing
// captured or paused), and with the right token (all answered, at most one capture a second);
// and slow stacks requests (to a node whose sidecar is stopped) that must not hold up /metrics,
// /healthz or the API. The captures with a token need ptrace (root): skipped without it.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>

#include "grpcpp/grpcpp.h"
#include "sidecar_harness.h"
#include "skip.h"
#include "trainscope/common/http_client.h"
#include "trainscope/sidecar/exchange_keys.h"
#include "trainscope/sidecar/operator_proof.h"
#include "trainscope/sidecar/v1/sidecar.grpc.pb.h"
#include "wait.h"

namespace trainscope::testing {
namespace {

using sidecar::TaskState;
using std::chrono::seconds;

constexpr const char* kToken = kTestToken;
constexpr char kFresh[] = "/api/v1/stacks?task=ps:0&fresh=1";

struct Answer {
  int status = 0;  // 0: no HTTP answer.
  std::string body;
  std::string www_authenticate;
};

// `n` GETs of `path` at once, each on its own connection.
std::vector<Answer> Flood(const std::string& http, const std::string& path,
                          const std::vector<std::string>& headers, int n = 16) {
  std::vector<Answer> answers(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      auto r = trainscope::HttpGet(http, path, 30000, 16 << 20, {}, headers);
      Answer& a = answers[static_cast<size_t>(i)];
      if (!r.ok()) {
        a.body = std::string(r.status().message());
        return;
      }
      a.status = r->status;
      a.body = r->body;
      if (auto it = r->headers.find("www-authenticate"); it != r->headers.end()) {
        a.www_authenticate = it->second;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  return answers;
}

int Count(const std::vector<Answer>& answers, int status) {
  int n = 0;
  for (const Answer& a : answers) n += a.status == status;
  return n;
}

// The value of the series `series` (name and labels, exactly) in a /metrics text; -1 if absent.
double Metric(const std::string& text, const std::string& series) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(series + " ", 0) == 0) return std::stod(line.substr(series.size() + 1));
  }
  return -1;
}

char ProcState(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(in, line);
  const size_t close = line.rfind(')');
  return close == std::string::npos || close + 2 >= line.size() ? '?' : line[close + 2];
}

// Samples `pid`'s state until stopped; whether it was ever seen stopped or traced.
class PauseWatch {
 public:
  explicit PauseWatch(pid_t pid)
      : thread_([this, pid] {
          while (!stop_) {
            const char s = ProcState(pid);
            if (s == 't' || s == 'T') paused_ = true;
            std::this_thread::sleep_for(std::chrono::microseconds(200));
          }
        }) {}
  bool Stop() {
    stop_ = true;
    thread_.join();
    return paused_;
  }

 private:
  std::atomic<bool> stop_{false};
  std::atomic<bool> paused_{false};
  std::thread thread_;
};

const std::string kSnapshots = "trainscope_sidecar_snapshots_total";
const std::string kFailures = "trainscope_sidecar_snapshot_failures_total";

TEST(SidecarAuth, FreshCapturesWithoutATokenFileAreRefused403AndPauseNothing) {
  const std::string address = FreeAddress();
  auto task = StartFakeTask(address, "ps", 0, {"--phase", "serving"});
  Sidecar sidecar({{"ps", {address}}}, {});
  ASSERT_TRUE(sidecar.WaitForState("ps:0", TaskState::kUp, seconds(20))) << sidecar.Describe();
  PauseWatch watch(task->pid());
  const std::vector<Answer> answers = Flood(sidecar.http(), kFresh, {});
  EXPECT_FALSE(watch.Stop()) << "the task was stopped or traced during the flood";
  EXPECT_EQ(Count(answers, 403), 16) << answers[0].status << " " << answers[0].body;
  EXPECT_NE(answers[0].body.find(
                "fresh captures need a credential: start the sidecar with --api_token_file"),
            std::string::npos)
      << answers[0].body;
  // A token sent to a sidecar without a token file changes nothing.
  EXPECT_EQ(
      Count(Flood(sidecar.http(), kFresh, {std::string("Authorization: Bearer ") + kToken}, 4),
            403),
      4);
  const std::string metrics = sidecar.Get("/metrics");
  EXPECT_EQ(Metric(metrics, kSnapshots), 0) << metrics;
  EXPECT_EQ(Metric(metrics, kFailures), 0);
  EXPECT_EQ(Metric(metrics, "trainscope_sidecar_api_refused_total{reason=\"no_token_file\"}"), 20);
  // Reads stay open.
  auto kept = trainscope::HttpGet(sidecar.http(), "/api/v1/stacks?task=ps:0", 5000);
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_EQ(kept->status, 200) << kept->body;
  EXPECT_NE(sidecar.Get("/api/v1/tasks"), "");
  EXPECT_NE(sidecar.Get("/"), "");
}

TEST(SidecarAuth, FreshCapturesWithNoOrAWrongTokenAreRefused401AndPauseNothing) {
  TokenFile token;
  const std::string address = FreeAddress();
  auto task = StartFakeTask(address, "ps", 0, {"--phase", "serving"});
  Sidecar sidecar({{"ps", {address}}}, {"--api_token_file", token.path()});
  ASSERT_TRUE(sidecar.WaitForState("ps:0", TaskState::kUp, seconds(20))) << sidecar.Describe();
  PauseWatch watch(task->pid());
  const std::vector<Answer> none = Flood(sidecar.http(), kFresh, {});
  const std::vector<Answer> wrong =
      Flood(sidecar.http(), kFresh, {"Authorization: Bearer 00000000000000000000000000000000"});
  EXPECT_FALSE(watch.Stop()) << "the task was stopped or traced during the flood";
  EXPECT_EQ(Count(none, 401), 16) << none[0].status << " " << none[0].body;
  EXPECT_EQ(Count(wrong, 401), 16) << wrong[0].status << " " << wrong[0].body;
  EXPECT_EQ(none[0].www_authenticate.rfind("Bearer", 0), 0u) << none[0].www_authenticate;
  EXPECT_NE(wrong[0].www_authenticate.find("invalid_token"), std::string::npos);
  for (const Answer& a : wrong) EXPECT_EQ(a.body.find(kToken), std::string::npos);
  const std::string metrics = sidecar.Get("/metrics");
  EXPECT_EQ(Metric(metrics, kSnapshots), 0) << metrics;
  EXPECT_EQ(Metric(metrics, "trainscope_sidecar_api_refused_total{reason=\"no_credential\"}"), 16);
  EXPECT_EQ(Metric(metrics, "trainscope_sidecar_api_refused_total{reason=\"bad_token\"}"), 16);
  // Logged once a minute per client address and reason, never with the token.
  const std::string log = sidecar.process().Output();
  size_t lines = 0;
  for (size_t at = log.find("refused /api/v1/stacks"); at != std::string::npos;
       at = log.find("refused /api/v1/stacks", at + 1)) {
    ++lines;
  }
  EXPECT_EQ(lines, 2u) << log;
  EXPECT_EQ(log.find(kToken), std::string::npos);
  // trainscopectl says what it needs.
  Process ctl(BinPath("trainscopectl"), {"stacks", "ps:0", "--fresh", "--sidecar", sidecar.http()});
  EXPECT_EQ(ctl.Wait(seconds(30)).value_or(-1), 2);
  EXPECT_NE(ctl.Output().find("need a credential"), std::string::npos) << ctl.Output();
}

TEST(SidecarAuth, WithTheTokenEveryoneIsAnsweredAndCapturesAreAtMostOneASecond) {
  TRAINSCOPE_SKIP_UNLESS(geteuid() == 0, "captures need ptrace: run as root (or CAP_SYS_PTRACE)");
  TokenFile token;
  const std::string address = FreeAddress();
  auto task = StartFakeTask(address, "ps", 0, {"--phase", "serving"});
  Sidecar sidecar({{"ps", {address}}}, {"--api_token_file", token.path()});
  ASSERT_TRUE(sidecar.WaitForState("ps:0", TaskState::kUp, seconds(20))) << sidecar.Describe();
  const std::vector<std::string> auth = {std::string("Authorization: Bearer ") + kToken};
  const auto start = std::chrono::steady_clock::now();
  int answered = 0;
  int rounds = 0;
  while (std::chrono::steady_clock::now() - start < std::chrono::milliseconds(2500)) {
    const std::vector<Answer> answers = Flood(sidecar.http(), kFresh, auth);
    answered += Count(answers, 200);
    ++rounds;
    for (const Answer& a : answers) ASSERT_EQ(a.status, 200) << a.body;
  }
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const std::string metrics = sidecar.Get("/metrics");
  const double captures = Metric(metrics, kSnapshots);
  std::printf("%d rounds of 16 in %.2f s: %d answered 200, %.0f captures\n", rounds, elapsed,
              answered, captures);
  EXPECT_EQ(answered, 16 * rounds);
  EXPECT_GE(captures, 1) << metrics;
  EXPECT_LE(captures, 1 + static_cast<int>(elapsed)) << metrics;
  EXPECT_EQ(ProcState(task->pid()), 'S');  // Let go after each capture.
  // trainscopectl with the token file (here from the environment).
  Process ctl(BinPath("trainscopectl"), {"stacks", "ps:0", "--fresh", "--sidecar", sidecar.http()},
              {{"TRAINSCOPE_API_TOKEN_FILE", token.path()}});
  EXPECT_EQ(ctl.Wait(seconds(30)).value_or(-1), 0) << ctl.Output();
  EXPECT_NE(ctl.Output().find("=== ps:0 pid"), std::string::npos) << ctl.Output();
}

double UnixNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// A Snapshots.Stacks request for a fresh capture of `task`, sent straight to a sidecar's gRPC
// port as a process of the node would, speaking as node `as` of cluster "default" (the name
// /api/v1/tasks shows to anyone), with `proof` when given.
grpc::Status AskFresh(const std::string& to, const std::string& as, const std::string& task,
                      const sidecar::pb::OperatorProof* proof = nullptr) {
  namespace v1 = sidecar::v1;
  v1::StacksRequest req;
  req.mutable_header()->set_protocol_version(1);
  req.mutable_header()->set_cluster("default");
  req.mutable_header()->set_node(as);
  req.mutable_header()->set_generation(static_cast<uint64_t>(UnixNow() * 1e9));
  req.set_task(task);
  req.set_fresh(true);
  if (proof != nullptr) *req.mutable_operator_proof() = *proof;
  // Signed with the cluster key: the asker holds the cluster's configuration (a node, or anyone
  // who read the key on one), and still needs the operator's credential.
  auto keys = sidecar::ExchangeKeys::FromSecrets({HarnessKey()});
  if (keys.ok()) (*keys)->Sign(&req, UnixNow());
  auto stub = v1::Snapshots::NewStub(grpc::CreateChannel(to, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + seconds(20));
  v1::StackList resp;
  return stub->Stacks(&ctx, req, &resp);
}

// Two sidecars on loopback with the cluster key (the harness's) and no token, ps:0 on A and
// worker:0 on B, and a process that holds the cluster key and asks A's gRPC port for fresh
// captures of ps:0 as if it were B: each is refused and counted, and ps:0 is never paused.
struct TwoNodes {
  explicit TwoNodes(std::vector<std::string> flags = {})
      : cluster{{"ps", {FreeAddress()}}, {"worker", {FreeAddress()}}},
        a("127.0.0.1:" + std::to_string(FreePort())),
        b("127.0.0.1:" + std::to_string(FreePort())) {
    ps = StartFakeTask(cluster["ps"][0], "ps", 0, {"--phase", "serving"});
    worker = StartFakeTask(cluster["worker"][0], "worker", 0, {"--phase", "training"});
    auto port = [](const std::string& id) { return id.substr(id.rfind(':') + 1); };
    std::vector<std::string> fa = {"--grpc_port", port(a),           "--local_tasks",
                                   "ps:0",        "--peer_sidecars", b};
    std::vector<std::string> fb = {"--grpc_port", port(b),           "--local_tasks",
                                   "worker:0",    "--peer_sidecars", a};
    fa.insert(fa.end(), flags.begin(), flags.end());
    fb.insert(fb.end(), flags.begin(), flags.end());
    sa = std::make_unique<Sidecar>(cluster, fa);
    sb = std::make_unique<Sidecar>(cluster, fb);
  }
  Cluster cluster;
  std::string a, b;
  std::unique_ptr<Process> ps, worker;
  std::unique_ptr<Sidecar> sa, sb;
};

TEST(SidecarAuth, FreshCapturesOverTheExchangeWithoutACredentialAreRefusedAndPauseNothing) {
  TwoNodes nodes;
  ASSERT_TRUE(nodes.sa->WaitForState("ps:0", TaskState::kUp, seconds(20))) << nodes.sa->Describe();
  ASSERT_TRUE(nodes.sb->WaitForState("ps:0", TaskState::kUp, seconds(20))) << nodes.sb->Describe();
  PauseWatch watch(nodes.ps->pid());
  for (int i = 0; i < 3; ++i) {
    grpc::Status s = AskFresh(nodes.a, nodes.b, "ps:0");
    EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
    EXPECT_NE(s.error_message().find("it has no --api_token_file"), std::string::npos)
        << s.error_message();
  }
  EXPECT_FALSE(watch.Stop()) << "ps:0 was stopped or traced";
  const std::string metrics = nodes.sa->Get("/metrics");
  EXPECT_EQ(Metric(metrics, kSnapshots), 0) << metrics;
  EXPECT_EQ(Metric(metrics, "trainscope_sidecar_api_refused_total{reason=\"no_token_file\"}"), 3)
      << metrics;
}

// With the same token on both nodes: a request without a proof, or with one made with another
// token, for another node, or used before, is refused by reason; a fresh capture asked of B's
// HTTP API with the token is relayed to A with a proof and taken.
TEST(SidecarAuth, FreshCapturesOverTheExchangeNeedTheOperatorsProof) {
  TokenFile token;
  TwoNodes nodes({"--api_token_file", token.path()});
  ASSERT_TRUE(nodes.sa->WaitForState("ps:0", TaskState::kUp, seconds(20))) << nodes.sa->Describe();
  ASSERT_TRUE(nodes.sb->WaitForState("ps:0", TaskState::kUp, seconds(20))) << nodes.sb->Describe();
  const uint64_t now_ns = static_cast<uint64_t>(UnixNow() * 1e9);
  PauseWatch watch(nodes.ps->pid());
  grpc::Status none = AskFresh(nodes.a, nodes.b, "ps:0");
  const auto wrong =
      sidecar::ProveOperator("0123456789abcdef0123456789abcdef", nodes.a, "ps:0", now_ns);
  grpc::Status bad = AskFresh(nodes.a, nodes.b, "ps:0", &wrong);
  const auto elsewhere = sidecar::ProveOperator(kToken, nodes.b, "ps:0", now_ns);
  grpc::Status other_node = AskFresh(nodes.a, nodes.b, "ps:0", &elsewhere);
  const auto old = sidecar::ProveOperator(kToken, nodes.a, "ps:0", now_ns - 600'000'000'000);
  grpc::Status stale = AskFresh(nodes.a, nodes.b, "ps:0", &old);
  EXPECT_FALSE(watch.Stop()) << "ps:0 was stopped or traced";
  for (const grpc::Status* s : {&none, &bad, &other_node, &stale}) {
    EXPECT_EQ(s->error_code(), grpc::StatusCode::PERMISSION_DENIED) << s->error_message();
  }
  EXPECT_NE(none.error_message().find("carries no operator's credential"), std::string::npos)
      << none.error_message();
  std::string metrics = nodes.sa->Get("/metrics");
  EXPECT_EQ(Metric(metrics, kSnapshots), 0) << metrics;
  EXPECT_EQ(Metric(metrics, "trainscope_sidecar_api_refused_total{reason=\"no_credential\"}"), 1);
  EXPECT_EQ(Metric(metrics, "trainscope_sidecar_api_refused_total{reason=\"bad_token\"}"), 2);
  EXPECT_EQ(Metric(metrics, "trainscope_sidecar_api_refused_total{reason=\"stale_credential\"}"),
            1);
  if (geteuid() != 0) return;  // The capture itself needs ptrace; the refusals are the point.
  const auto right = sidecar::ProveOperator(kToken, nodes.a, "ps:0", now_ns);
  grpc::Status first = AskFresh(nodes.a, nodes.b, "ps:0", &right);
  EXPECT_TRUE(first.ok()) << first.error_message();
  grpc::Status replayed = AskFresh(nodes.a, nodes.b, "ps:0", &right);
  EXPECT_NE(replayed.error_message().find("used already"), std::string::npos)
      << replayed.error_message();
  // Relayed: B checks the bearer token, A the proof B made with it.
  auto relayed =
      trainscope::HttpGet(nodes.sb->http(), kFresh, 30000, 16 << 20, {}, {TokenFile::Header()});
  ASSERT_TRUE(relayed.ok()) << relayed.status();
  EXPECT_EQ(relayed->status, 200) << relayed->body;
  metrics = nodes.sa->Get("/metrics");
  EXPECT_GE(Metric(metrics, kSnapshots), 1) << metrics;  // At most one capture a second.
  EXPECT_EQ(Metric(metrics, "trainscope_sidecar_api_refused_total{reason=\"replayed_credential\"}"),
            1);
}

// Stacks requests that wait on another node's sidecar (stopped with SIGSTOP: it accepts
// connections and answers nothing) run on their own pool: /metrics, /healthz and the API answer
// meanwhile, and the waiting requests are answered too, in time.
TEST(SidecarAuth, SlowStacksRequestsDoNotHoldUpMetricsHealthOrTheApi) {
  Cluster cluster = {{"ps", {FreeAddress()}}, {"worker", {FreeAddress()}}};
  auto ps = StartFakeTask(cluster["ps"][0], "ps", 0, {"--phase", "serving"});
  auto worker = StartFakeTask(cluster["worker"][0], "worker", 0, {"--phase", "training"});
  const std::string a_node = "127.0.0.1:" + std::to_string(FreePort());
  const std::string b_node = "127.0.0.1:" + std::to_string(FreePort());
  auto port = [](const std::string& n) { return n.substr(n.rfind(':') + 1); };
  Sidecar a(cluster,
            {"--grpc_port", port(a_node), "--local_tasks", "ps:0", "--peer_sidecars", b_node});
  Sidecar b(cluster,
            {"--grpc_port", port(b_node), "--local_tasks", "worker:0", "--peer_sidecars", a_node});
  auto seen = a.WaitForState("worker:0", TaskState::kUp, seconds(30));
  ASSERT_TRUE(seen) << a.Describe();
  // Once through, so that a's channel to b is connected: a call on it then waits its deadline.
  auto warm = trainscope::HttpGet(a.http(), "/api/v1/stacks?task=worker:0", 5000);
  ASSERT_TRUE(warm.ok() && warm->status == 200) << (warm.ok() ? warm->body : "no answer");
  b.process().Signal(SIGSTOP);
  const auto held_from = std::chrono::steady_clock::now();
  std::vector<Answer> slow;
  std::thread holders([&] { slow = Flood(a.http(), "/api/v1/stacks?task=worker:0", {}, 12); });
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // All 12 are in.
  int answered = 0;
  double slowest = 0;
  for (int i = 0; i < 10; ++i) {
    for (const char* path : {"/metrics", "/healthz", "/api/v1/tasks"}) {
      const auto t0 = std::chrono::steady_clock::now();
      auto r = trainscope::HttpGet(a.http(), path, 2000);
      slowest = std::max(
          slowest, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      answered += r.ok() && r->status == 200;
    }
  }
  holders.join();
  b.process().Signal(SIGCONT);
  std::printf("30 probes while 12 stacks requests waited: %d answered, slowest %.3f s\n", answered,
              slowest);
  EXPECT_EQ(answered, 30);
  std::printf("the 12 stacks requests were answered within %.1f s, e.g. %d %s",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - held_from).count(),
              slow[0].status, slow[0].body.c_str());
  for (const Answer& s : slow) {
    EXPECT_NE(s.status, 0) << s.body;  // Answered (an error, in words), not left hanging.
    EXPECT_NE(s.status, 200) << s.body;
  }
}

}  // namespace
}  // namespace trainscope::testing
