// The runtime's classic failures, each caused for real with the linear_regression binary on
// loopback, and the message the user sees checked word for word where it matters.
#include <arpa/inet.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <regex>
#include <thread>

#include "process.h"
#include "trainscope/v1/runtime.grpc.pb.h"

namespace trainscope {
namespace {

using namespace std::chrono_literals;
using testing::Process;

std::string Addr(int port) { return "127.0.0.1:" + std::to_string(port); }

// A cluster of `num_ps` ps and `num_workers` workers on free loopback ports.
struct Cluster {
  Cluster(int num_ps, int num_workers) {
    for (int i = 0; i < num_ps; ++i) jobs["ps"].push_back(Addr(testing::FreePort()));
    for (int i = 0; i < num_workers; ++i) jobs["worker"].push_back(Addr(testing::FreePort()));
  }
  std::unique_ptr<Process> Start(const std::string& role, int index,
                                 std::vector<std::string> args = {}) const {
    return std::make_unique<Process>(
        testing::BinPath("linear_regression"), std::move(args),
        std::map<std::string, std::string>{{"TF_CONFIG", testing::TfConfig(jobs, role, index)}});
  }
  std::map<std::string, std::vector<std::string>> jobs;
};

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

TEST(RuntimeIntegration, TwoPsTwoWorkersConvergeAndEndCleanly) {
  Cluster c(2, 2);
  auto ps0 = c.Start("ps", 0);
  auto ps1 = c.Start("ps", 1);
  auto w0 = c.Start("worker", 0);
  auto w1 = c.Start("worker", 1);
  for (Process* w : {w0.get(), w1.get()}) {
    auto code = w->Wait(60s);
    ASSERT_TRUE(code.has_value()) << w->Output();
    EXPECT_EQ(*code, 0) << w->Output();
    std::smatch m;
    const std::string out = w->Output();
    ASSERT_TRUE(
        std::regex_search(out, m, std::regex(R"(final loss ([0-9.]+) \(initial ([0-9.]+))")))
        << out;
    const double final_loss = std::stod(m[1]);
    const double initial_loss = std::stod(m[2]);
    EXPECT_LT(final_loss * 10, initial_loss) << out;
  }
  // The ps tasks exit by themselves once both workers said they are done.
  for (Process* ps : {ps0.get(), ps1.get()}) {
    auto code = ps->Wait(10s);
    ASSERT_TRUE(code.has_value()) << ps->Output();
    EXPECT_EQ(*code, 0) << ps->Output();
    EXPECT_NE(ps->Output().find("all 2 trainers are done"), std::string::npos);
  }
  // Variables were sharded over both ps tasks.
  EXPECT_NE(ps0->Output().find("created variable 'linear/w/part_"), std::string::npos);
  EXPECT_NE(ps1->Output().find("created variable 'linear/w/part_"), std::string::npos);
}

TEST(RuntimeIntegration, PortInUseNamesTaskPortAndHolder) {
  Cluster c(1, 1);
  const int port = std::stoi(c.jobs["ps"][0].substr(10));
  testing::ListeningSocket holder(port);
  ASSERT_GE(holder.fd(), 0);
  auto start = std::chrono::steady_clock::now();
  auto ps = c.Start("ps", 0);
  auto code = ps->Wait(5s);
  ASSERT_TRUE(code.has_value()) << "ps did not exit within 5 s: " << ps->Output();
  EXPECT_NE(*code, 0);
  EXPECT_LT(Seconds(start), 5.0);
  EXPECT_NE(ps->Output().find("ps:0 cannot listen on " + c.jobs["ps"][0] +
                              ": address already in use (held by pid " + std::to_string(getpid())),
            std::string::npos)
      << ps->Output();
}

TEST(RuntimeIntegration, MissingPsTimesOutNamingItsAddressAndLastError) {
  Cluster c(2, 1);
  auto ps0 = c.Start("ps", 0);
  auto start = std::chrono::steady_clock::now();
  auto w = c.Start("worker", 0, {"--session_timeout_s", "3", "--session_log_interval_s", "1"});
  auto code = w->Wait(20s);
  ASSERT_TRUE(code.has_value()) << w->Output();
  EXPECT_NE(*code, 0);
  EXPECT_GE(Seconds(start), 3.0);
  const std::string out = w->Output();
  EXPECT_NE(out.find("worker:0 gave up on CreateSession after 3 s (--session_timeout_s); still "
                     "missing ps:1 at " +
                     c.jobs["ps"][1] + " (connection refused)"),
            std::string::npos)
      << out;
  // The periodic log line, TensorFlow's "still waiting" made specific.
  EXPECT_NE(
      out.find("CreateSession still waiting for /job:ps/replica:0/task:1 at " + c.jobs["ps"][1]),
      std::string::npos)
      << out;
  EXPECT_NE(out.find("(last error: connection refused)"), std::string::npos) << out;
}

TEST(RuntimeIntegration, DifferentClusterSpecsFailAtOnceSayingHow) {
  Cluster ps_view(1, 1);
  Cluster worker_view = ps_view;
  worker_view.jobs["worker"].push_back(Addr(testing::FreePort()));
  auto ps = ps_view.Start("ps", 0);
  auto start = std::chrono::steady_clock::now();
  auto w = worker_view.Start("worker", 0);
  auto code = w->Wait(10s);
  ASSERT_TRUE(code.has_value()) << w->Output();
  EXPECT_NE(*code, 0);
  EXPECT_LT(Seconds(start), 5.0);
  const std::string out = w->Output();
  EXPECT_NE(
      out.find("the cluster specs differ between worker:0 and ps:0 at " + ps_view.jobs["ps"][0]),
      std::string::npos)
      << out;
  EXPECT_NE(out.find("job 'worker' lists 2 tasks [" + worker_view.jobs["worker"][0] + ", " +
                     worker_view.jobs["worker"][1] + "] in worker:0's spec but 1 [" +
                     ps_view.jobs["worker"][0] + "] in ps:0's"),
            std::string::npos)
      << out;
}

TEST(RuntimeIntegration, DifferentFeaturesNameTheVariableAndBothShapes) {
  Cluster c(1, 2);
  auto ps = c.Start("ps", 0);
  auto w0 = c.Start("worker", 0, {"--steps", "100000", "--step_delay_ms", "5"});
  ASSERT_TRUE(w0->WaitForOutput("training:", 20s)) << w0->Output();
  auto w1 = c.Start("worker", 1, {"--features", "20"});
  auto code = w1->Wait(20s);
  ASSERT_TRUE(code.has_value()) << w1->Output();
  EXPECT_NE(*code, 0);
  EXPECT_NE(w1->Output().find("INVALID_ARGUMENT: CreateVariable from worker:1 to ps:0 at " +
                              c.jobs["ps"][0] +
                              " failed: variable 'linear/w/part_0' on ps:0 is float32[16] but "
                              "worker:1 creates it as float32[20]"),
            std::string::npos)
      << w1->Output();
}

TEST(RuntimeIntegration, OtherProtocolVersionFailsAtOnceNamingBoth) {
  Cluster c(1, 1);
  auto ps = c.Start("ps", 0);
  auto w = c.Start("worker", 0, {"--testing_protocol_version", "2"});
  auto code = w->Wait(10s);
  ASSERT_TRUE(code.has_value()) << w->Output();
  EXPECT_NE(*code, 0);
  EXPECT_NE(w->Output().find("version mismatch: worker:0 runs runtime 0.1.0 with protocol "
                             "version 2 but ps:0 at " +
                             c.jobs["ps"][0] + " runs runtime 0.1.0 with protocol version 1"),
            std::string::npos)
      << w->Output();
}

TEST(RuntimeIntegration, SlowPsIsDeadlineExceededNamingMethodTaskAndDeadline) {
  Cluster c(1, 1);
  auto ps = c.Start("ps", 0, {"--enable_fault_injection"});
  auto w = c.Start("worker", 0,
                   {"--steps", "100000", "--step_delay_ms", "5", "--rpc_deadline_ms", "200"});
  ASSERT_TRUE(w->WaitForOutput("training:", 20s)) << w->Output();
  // Slow the ps mid-training, as an overloaded ps would be.
  auto stub = v1::TaskService::NewStub(
      grpc::CreateChannel(c.jobs["ps"][0], grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  v1::InjectFaultRequest request;
  request.set_parameter_delay_ms(500);
  v1::InjectFaultResponse response;
  ASSERT_TRUE(stub->InjectFault(&context, request, &response).ok());
  auto code = w->Wait(20s);
  ASSERT_TRUE(code.has_value()) << w->Output();
  EXPECT_NE(*code, 0);
  EXPECT_TRUE(std::regex_search(
      w->Output(), std::regex("DEADLINE_EXCEEDED: (Pull|Push) from worker:0 to ps:0 at " +
                              c.jobs["ps"][0] + " exceeded its deadline of 200 ms")))
      << w->Output();
}

TEST(RuntimeIntegration, FaultInjectionIsRefusedUnlessEnabled) {
  Cluster c(1, 1);
  auto ps = c.Start("ps", 0);
  ASSERT_TRUE(ps->WaitForOutput("listening on", 10s));
  auto stub = v1::TaskService::NewStub(
      grpc::CreateChannel(c.jobs["ps"][0], grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  v1::InjectFaultResponse response;
  grpc::Status st = stub->InjectFault(&context, v1::InjectFaultRequest(), &response);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED);
}

// A forged Done must not end a ps (and lose its variables): the caller must be a trainer the
// spec lists, at the incarnation of its session with that ps. A Pull answers each variable
// once.
TEST(RuntimeIntegration, ForgedDoneAndRepeatedPullAreRefusedAndThePsServesOn) {
  Cluster c(1, 1);
  auto ps = c.Start("ps", 0);
  auto w = c.Start("worker", 0, {"--steps", "100000", "--step_delay_ms", "5"});
  ASSERT_TRUE(w->WaitForOutput("training:", 20s)) << w->Output();
  auto channel = grpc::CreateChannel(c.jobs["ps"][0], grpc::InsecureChannelCredentials());
  auto tasks = v1::TaskService::NewStub(channel);
  auto done_from = [&](const std::string& role, int index, uint64_t incarnation) {
    grpc::ClientContext context;
    v1::DoneRequest request;
    request.mutable_from()->set_role(role);
    request.mutable_from()->set_index(index);
    request.set_incarnation(incarnation);
    v1::DoneResponse response;
    return tasks->Done(&context, request, &response);
  };
  grpc::Status listed = done_from("worker", 0, 12345);  // worker:0 exists, not at this incarnation
  EXPECT_EQ(listed.error_code(), grpc::StatusCode::PERMISSION_DENIED) << listed.error_message();
  EXPECT_NE(listed.error_message().find("ps:0 refused Done from worker:0"), std::string::npos)
      << listed.error_message();
  grpc::Status unknown = done_from("worker", 7, 1);
  EXPECT_EQ(unknown.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_NE(unknown.error_message().find("lists no such worker"), std::string::npos)
      << unknown.error_message();

  auto params = v1::ParameterService::NewStub(channel);
  grpc::ClientContext context;
  v1::PullRequest pull;
  for (int i = 0; i < 2; ++i) pull.add_names("linear/b");
  v1::PullResponse answer;
  grpc::Status st = params->Pull(&context, pull, &answer);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
  EXPECT_NE(st.error_message().find("names variable 'linear/b' twice"), std::string::npos)
      << st.error_message();
  EXPECT_EQ(answer.values_size(), 0);

  std::this_thread::sleep_for(500ms);
  EXPECT_TRUE(ps->Running()) << ps->Output();
  EXPECT_TRUE(w->Running()) << w->Output();
  EXPECT_NE(ps->Output().find("refused Done from worker:7"), std::string::npos) << ps->Output();
}

TEST(RuntimeIntegration, MemoryBudgetIsResourceExhaustedWithFigures) {
  Cluster c(1, 1);
  auto ps = c.Start("ps", 0, {"--ps_memory_limit_bytes", "1000"});
  auto w = c.Start("worker", 0, {"--features", "1000"});
  auto code = w->Wait(20s);
  ASSERT_TRUE(code.has_value()) << w->Output();
  EXPECT_NE(*code, 0);
  EXPECT_NE(w->Output().find("RESOURCE_EXHAUSTED: CreateVariable from worker:0 to ps:0 at " +
                             c.jobs["ps"][0] +
                             " failed: ps:0 cannot hold variable 'linear/w/part_0' "
                             "(float32[1000], 3.9 KiB): it holds 0 B and would need 3.9 KiB of "
                             "its 1000 B budget (--ps_memory_limit_bytes=1000)"),
            std::string::npos)
      << w->Output();
  EXPECT_TRUE(ps->Running()) << "the ps must refuse the variable, not die";
}

// A ps's largest message is bounded (--max_message_bytes, or its memory budget plus 1 MiB): a
// larger variable is refused before it is read into memory, in words, and the ps serves on.
TEST(RuntimeIntegration, OversizedMessageIsRefusedByThePsInWords) {
  Cluster c(1, 1);
  auto ps = c.Start("ps", 0, {"--max_message_bytes", "100000"});
  auto w = c.Start("worker", 0, {"--features", "100000"});
  auto code = w->Wait(20s);
  ASSERT_TRUE(code.has_value()) << w->Output();
  EXPECT_NE(*code, 0);
  EXPECT_NE(w->Output().find("RESOURCE_EXHAUSTED: CreateVariable from worker:0 to ps:0 at " +
                             c.jobs["ps"][0] +
                             " failed: the message (390.7 KiB) is larger than "
                             "ps:0 accepts (97.7 KiB: its --max_message_bytes"),
            std::string::npos)
      << w->Output();
  EXPECT_TRUE(ps->Running()) << ps->Output();
}

TEST(RuntimeIntegration, SigtermShutsTasksDownGracefully) {
  Cluster c(1, 1);
  auto ps = c.Start("ps", 0);
  auto w = c.Start("worker", 0, {"--steps", "100000", "--step_delay_ms", "5"});
  ASSERT_TRUE(w->WaitForOutput("training:", 20s)) << w->Output();
  // A worker finishes its step, reports the loss, tells the ps it is done and exits 0...
  w->Signal(SIGTERM);
  auto wcode = w->Wait(10s);
  ASSERT_TRUE(wcode.has_value());
  EXPECT_EQ(*wcode, 0) << w->Output();
  EXPECT_NE(w->Output().find("received SIGTERM: shutting down"), std::string::npos);
  EXPECT_NE(w->Output().find("final loss"), std::string::npos);
  // ...so the ps, its only worker done, exits by itself.
  auto code = ps->Wait(10s);
  ASSERT_TRUE(code.has_value()) << ps->Output();
  EXPECT_EQ(*code, 0) << ps->Output();

  // A ps stops on SIGTERM too, while its worker still trains.
  Cluster c2(1, 1);
  auto ps2 = c2.Start("ps", 0);
  auto w2 = c2.Start("worker", 0, {"--steps", "100000", "--step_delay_ms", "5"});
  ASSERT_TRUE(w2->WaitForOutput("training:", 20s)) << w2->Output();
  ps2->Signal(SIGTERM);
  auto code2 = ps2->Wait(10s);
  ASSERT_TRUE(code2.has_value()) << ps2->Output();
  EXPECT_EQ(*code2, 0) << ps2->Output();
}

TEST(RuntimeIntegration, BadTfConfigIsOneLineError) {
  Process p(testing::BinPath("linear_regression"), {},
            {{"TF_CONFIG", R"({"cluster": {"ps": ["127.0.0.1:1", "127.0.0.1:1"]}})"}});
  auto code = p.Wait(10s);
  ASSERT_TRUE(code.has_value());
  EXPECT_NE(*code, 0);
  EXPECT_EQ(p.Output(),
            "error: INVALID_ARGUMENT: TF_CONFIG: address '127.0.0.1:1' is listed twice: for ps:0 "
            "and for ps:1\n");
}

}  // namespace
}  // namespace trainscope
