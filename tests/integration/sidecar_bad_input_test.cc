// Bad input must not crash the sidecar: garbage or oversized heartbeat answers, a task that
// answers with another identity, a malformed cluster spec, a peer sidecar that sends nonsense.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <fstream>
#include <thread>
#include <vector>

#include "grpcpp/grpcpp.h"
#include "sidecar_harness.h"
#include "trainscope/common/clock.h"
#include "trainscope/common/http_client.h"
#include "trainscope/sidecar/exchange_keys.h"
#include "trainscope/sidecar/v1/sidecar.grpc.pb.h"
#include "wait.h"

namespace trainscope::testing {
namespace {

using sidecar::TaskState;
using std::chrono::milliseconds;
using std::chrono::seconds;

// A TCP server on 127.0.0.1:`port` that answers every connection with `reply` and closes it.
class RawServer {
 public:
  RawServer(int port, std::string reply) : reply_(std::move(reply)) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(port));
    if (bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || listen(fd_, 16)) {
      ADD_FAILURE() << "cannot listen on " << port;
    }
    thread_ = std::thread([this] {
      while (!stop_) {
        int c = accept(fd_, nullptr, nullptr);
        if (c < 0) continue;
        char buf[4096];
        timeval tv{0, 100000};
        setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        (void)!recv(c, buf, sizeof(buf), 0);
        (void)!send(c, reply_.data(), reply_.size(), MSG_NOSIGNAL);
        close(c);
      }
    });
  }
  ~RawServer() {
    stop_ = true;
    shutdown(fd_, SHUT_RDWR);
    close(fd_);
    thread_.join();
  }

 private:
  int fd_ = -1;
  std::string reply_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

std::string Garbage(size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 7919 + 13) % 251);
  return s;
}

TEST(SidecarBadInput, GarbageOnTheTaskPort) {
  int port = FreePort();
  RawServer garbage(port, Garbage(70000));
  Cluster cluster = {{"ps", {"127.0.0.1:" + std::to_string(port)}}};
  Sidecar sidecar(cluster, {});
  std::this_thread::sleep_for(seconds(2));
  auto ps = sidecar.Task("ps:0");
  ASSERT_TRUE(ps) << sidecar.Describe();
  EXPECT_EQ(ps->state, TaskState::kMissing) << sidecar.Describe();
  EXPECT_NE(ps->reason.find("never answered"), std::string::npos) << ps->reason;
  EXPECT_TRUE(sidecar.process().Running());
  EXPECT_EQ(sidecar.Get("/healthz"), "ok\n");
}

TEST(SidecarBadInput, OversizedHeartbeatAnswer) {
  std::string address = FreeAddress();
  auto fake = StartFakeTask(address, "ps", 0, {"--oversized_bytes", "3000000"});
  Sidecar sidecar({{"ps", {address}}}, {});
  std::this_thread::sleep_for(seconds(2));
  auto ps = sidecar.Task("ps:0");
  ASSERT_TRUE(ps) << sidecar.Describe();
  EXPECT_EQ(ps->state, TaskState::kMissing) << sidecar.Describe();
  EXPECT_NE(ps->reason.find("not a valid heartbeat"), std::string::npos) << ps->reason;
  EXPECT_TRUE(sidecar.process().Running());
}

TEST(SidecarBadInput, AnswerFromAnotherCluster) {
  std::string address = FreeAddress();
  auto fake = StartFakeTask(address, "ps", 0, {"--answer_cluster", "someone-else"});
  Sidecar sidecar({{"ps", {address}}}, {"--cluster_name", "ours"});
  std::this_thread::sleep_for(seconds(2));
  auto ps = sidecar.Task("ps:0");
  ASSERT_TRUE(ps) << sidecar.Describe();
  EXPECT_EQ(ps->state, TaskState::kMissing) << sidecar.Describe();
  EXPECT_NE(ps->reason.find("answers as cluster \"someone-else\""), std::string::npos)
      << ps->reason;
  EXPECT_NE(ps->reason.find("check the cluster spec"), std::string::npos) << ps->reason;
}

TEST(SidecarBadInput, AnswerAsAnotherTask) {
  std::string address = FreeAddress();
  auto fake = StartFakeTask(address, "ps", 0, {"--answer_role", "worker", "--answer_index", "3"});
  Sidecar sidecar({{"ps", {address}}}, {});
  std::this_thread::sleep_for(seconds(2));
  auto ps = sidecar.Task("ps:0");
  ASSERT_TRUE(ps) << sidecar.Describe();
  EXPECT_EQ(ps->state, TaskState::kMissing);
  EXPECT_NE(ps->reason.find("task worker:3"), std::string::npos) << ps->reason;
}

TEST(SidecarBadInput, MalformedClusterSpecIsAClearErrorAtStart) {
  struct Case {
    std::string tf_config;
    std::string expected;
  } cases[] = {
      {"{\"cluster\": {\"ps\": [\"127.0.0.1:1\"]", "not valid JSON"},
      {"{\"cluster\": {\"ps\": [\"localhost\"]}}", "ps:0: bad address 'localhost'"},
      {"[1, 2]", "must be a JSON object"},
      {"{\"cluster\": {\"ps\": \"127.0.0.1:1\"}}", "job 'ps' must be a list"},
      {"{\"clusterr\": {}}", "no \"cluster\""},
      {"{\"cluster\": {\"ps\": [\"a:1\"]}, \"task\": {\"type\": \"ps\", \"index\": 7}}",
       "task index 7 is out of range"},
  };
  for (const Case& c : cases) {
    Process p(BinPath("trainscope-sidecar"),
              {"--http_port", std::to_string(FreePort()), "--grpc_port", "-1"},
              {{"TF_CONFIG", c.tf_config}});
    auto code = p.Wait(seconds(10));
    ASSERT_TRUE(code) << c.tf_config;
    EXPECT_EQ(*code, 2) << c.tf_config << "\n" << p.Output();
    EXPECT_NE(p.Output().find(c.expected), std::string::npos) << p.Output();
    EXPECT_NE(p.Output().find("TF_CONFIG"), std::string::npos) << p.Output();
  }
  Process none(BinPath("trainscope-sidecar"), {"--http_port", std::to_string(FreePort())},
               {{"TF_CONFIG", ""}});
  EXPECT_EQ(none.Wait(seconds(10)), 2);
  EXPECT_NE(none.Output().find("no cluster spec"), std::string::npos) << none.Output();
}

// TF_CONFIG as TensorFlow gives it: an evaluator's (outside the cluster) and a chief's work for
// the sidecar; without one of its own, it takes the job's from a process beside it (a TFJob pod,
// where the operator sets TF_CONFIG in the tensorflow container only).
TEST(SidecarBadInput, ChiefAndEvaluatorTfConfigAndOneFoundBesideIt) {
  const std::string cluster =
      R"("cluster": {"chief": ["127.0.0.1:1"], "ps": ["127.0.0.1:2", "127.0.0.1:3"],
                     "worker": ["127.0.0.1:4", "127.0.0.1:5"]})";
  for (const char* task :
       {R"({"type": "evaluator", "index": 0})", R"({"type": "chief", "index": 0})", "{}"}) {
    Process p(BinPath("trainscope-sidecar"), {"--check_config"},
              {{"TF_CONFIG", "{" + cluster + ", \"task\": " + task + "}"}});
    EXPECT_EQ(p.Wait(seconds(10)), 0) << task << "\n" << p.Output();
    EXPECT_NE(p.Output().find("cluster spec from TF_CONFIG is valid: 5 tasks"), std::string::npos)
        << p.Output();
  }
  Process holder("/bin/sleep", {"60"},
                 {{"TF_CONFIG", "{" + cluster + R"(, "task": {"type": "worker", "index": 1}})"}});
  auto comm = [&] {
    std::ifstream in("/proc/" + std::to_string(holder.pid()) + "/comm");
    std::string name;
    std::getline(in, name);
    return name;
  };
  ASSERT_TRUE(WaitUntil([&] { return comm() == "sleep"; }, seconds(10)));  // Exec'd, env and all.
  Process beside(BinPath("trainscope-sidecar"), {"--check_config"}, {{"TF_CONFIG", ""}});
  EXPECT_EQ(beside.Wait(seconds(10)), 0) << beside.Output();
  EXPECT_NE(beside.Output().find("cluster spec from TF_CONFIG of pid " +
                                 std::to_string(holder.pid()) + " (sleep) is valid: 5 tasks"),
            std::string::npos)
      << beside.Output();
}

// Clients that send their request a byte at a time, forever (slowloris), must not take the
// page and the API down: 200 of them (more than the old server's threads, queue and backlog
// together), from 10 addresses other than the API's client; the API answers every time, and
// the server ends every slow request though its client never stops sending (the deadline is
// for the whole request, not for each read). A request with an oversized header is refused.
TEST(SidecarBadInput, SlowClientsDoNotHoldTheApi) {
  Sidecar sidecar({{"ps", {FreeAddress()}}}, {});
  ASSERT_FALSE(sidecar.Get("/api/v1/tasks").empty()) << sidecar.process().Output();
  constexpr int kSlow = 200;
  std::atomic<int> connected{0};
  std::atomic<int> ended{0};  // Slow requests the server ended while their client still sent.
  std::vector<std::thread> slow;
  for (int i = 0; i < kSlow; ++i) {
    slow.emplace_back([&, i] {
      int fd = socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in source{};
      source.sin_family = AF_INET;
      source.sin_addr.s_addr = htonl(INADDR_LOOPBACK + 1 + static_cast<uint32_t>(i % 10));
      sockaddr_in addr{};
      addr.sin_family = AF_INET;
      addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      addr.sin_port = htons(static_cast<uint16_t>(sidecar.http_port()));
      if (bind(fd, reinterpret_cast<sockaddr*>(&source), sizeof(source)) == 0 &&
          connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
        ++connected;
        const std::string start = "GET / HTTP/1.1\r\nX-Slow: ";
        (void)!send(fd, start.data(), start.size(), MSG_NOSIGNAL);
        const auto give_up = std::chrono::steady_clock::now() + seconds(60);
        while (std::chrono::steady_clock::now() < give_up) {
          char c;
          const ssize_t n = recv(fd, &c, 1, MSG_DONTWAIT);
          const bool waiting = n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
          if (!waiting || send(fd, "x", 1, MSG_NOSIGNAL) != 1) {
            ++ended;  // An answer, the end of the stream, or a reset.
            break;
          }
          std::this_thread::sleep_for(milliseconds(200));
        }
      }
      close(fd);
    });
  }
  std::this_thread::sleep_for(seconds(1));
  int answered = 0;
  for (int i = 0; i < 5; ++i) answered += sidecar.Get("/api/v1/tasks").empty() ? 0 : 1;
  for (auto& t : slow) t.join();
  EXPECT_EQ(answered, 5) << "the API did not answer every time while " << kSlow
                         << " slow clients were connected";
  EXPECT_EQ(connected.load(), kSlow);
  EXPECT_EQ(ended.load(), connected.load())
      << "slow requests that the server let trickle on for a minute";
  EXPECT_TRUE(sidecar.process().Running());

  auto big =
      trainscope::HttpGet(sidecar.http(), "/api/v1/tasks?" + std::string(64 * 1024, 'a'), 2000);
  EXPECT_TRUE(!big.ok() || big->status >= 400) << "a 64 KiB request line was served";
  EXPECT_FALSE(sidecar.Get("/api/v1/tasks").empty());
}

TEST(SidecarBadInput, PeersThatAreNoSidecarOrSpeakNonsense) {
  // An old-style peer (HTTP on the port given) and a port that sends garbage.
  int http_port = FreePort();
  int garbage_port = FreePort();
  RawServer http(http_port, "HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n{}");
  RawServer garbage(garbage_port, Garbage(5000));
  std::string ps_address = FreeAddress();
  std::string worker_address = FreeAddress();
  auto ps = StartFakeTask(ps_address, "ps", 0, {"--phase", "serving"});
  int grpc_port = FreePort();
  Sidecar sidecar(
      {{"ps", {ps_address}}, {"worker", {worker_address}}},
      {"--local_tasks", "ps:0", "--grpc_port", std::to_string(grpc_port), "--peer_sidecars",
       "127.0.0.1:" + std::to_string(http_port) + ",127.0.0.1:" + std::to_string(garbage_port)});
  ASSERT_TRUE(sidecar.WaitForState("ps:0", TaskState::kUp, seconds(10))) << sidecar.Describe();
  auto worker =
      sidecar.WaitForState("worker:0", TaskState::kUnreachable, seconds(10), "never answered");
  ASSERT_TRUE(worker) << sidecar.Describe();
  EXPECT_NE(worker->reason.find("no sidecar reports on it"), std::string::npos) << worker->reason;

  // A real gRPC client that says the wrong things.
  auto stub = sidecar::v1::Exchange::NewStub(grpc::CreateChannel(
      "127.0.0.1:" + std::to_string(grpc_port), grpc::InsecureChannelCredentials()));
  // Signed with the cluster key: nonsense from a node that holds it.
  auto keys = sidecar::ExchangeKeys::FromSecrets({HarnessKey()});
  ASSERT_TRUE(keys.ok()) << keys.status();
  auto ping = [&](sidecar::v1::PingRequest request) {
    (*keys)->Sign(&request, trainscope::UnixSeconds());
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + seconds(5));
    sidecar::v1::PingResponse response;
    return stub->Ping(&ctx, request, &response);
  };
  sidecar::v1::PingRequest request;
  request.mutable_header()->set_protocol_version(1);
  request.mutable_header()->set_cluster("another-run");
  request.mutable_header()->set_node("127.0.0.9:4317");
  grpc::Status s = ping(request);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(s.error_message().find("belongs to another cluster"), std::string::npos)
      << s.error_message();
  EXPECT_EQ(s.error_message().find("default"), std::string::npos)
      << "a refusal tells the cluster's name: " << s.error_message();
  request.mutable_header()->set_cluster("default");
  request.mutable_header()->set_protocol_version(99);
  s = ping(request);
  EXPECT_NE(s.error_message().find("speaks exchange protocol 99, this sidecar 1"),
            std::string::npos)
      << s.error_message();
  // Records that are no records: refused and counted, the rest goes on.
  request.mutable_header()->set_protocol_version(1);
  sidecar::v1::NodeRecord* bad = request.mutable_gossip()->add_records();
  bad->set_node("127.0.0.9:4317");
  bad->set_version(1);
  sidecar::v1::TaskView* t = bad->add_tasks();
  t->set_role("worker");
  t->set_state("exploded");
  EXPECT_TRUE(ping(request).ok());
  // Too much: refused by gRPC before it reaches the exchange.
  request.mutable_gossip()->Clear();
  request.set_target(std::string(5 << 20, 'x'));
  EXPECT_EQ(ping(request).error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);

  EXPECT_TRUE(sidecar.process().Running());
  ASSERT_TRUE(sidecar.WaitForState("ps:0", TaskState::kUp, seconds(5))) << sidecar.Describe();
  const std::string metrics = sidecar.Get("/metrics");
  EXPECT_NE(metrics.find("trainscope_sidecar_exchange_records_refused_total 1"), std::string::npos)
      << metrics;
  // Each peer's error, once it was probed, says what answers there.
  std::string tasks;
  for (int i = 0; i < 50; ++i) {
    tasks = sidecar.Get("/api/v1/tasks");
    if (tasks.find("does not speak gRPC answers there") != std::string::npos) break;
    std::this_thread::sleep_for(milliseconds(100));
  }
  EXPECT_NE(tasks.find("something that does not speak gRPC answers there (wrong port?)"),
            std::string::npos)
      << tasks;
  // Peers that answer as something else are misconfigured, not out of reach: this node is not
  // cut off from the network, however long it has heard from no sidecar.
  std::this_thread::sleep_for(seconds(2));
  tasks = sidecar.Get("/api/v1/tasks");
  EXPECT_EQ(tasks.find("cut off"), std::string::npos) << tasks;
  EXPECT_NE(tasks.find("\"isolated\":false"), std::string::npos) << tasks;
}

}  // namespace
}  // namespace trainscope::testing
