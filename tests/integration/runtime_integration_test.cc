// The runtime's classic failures, each caused for real with the linear_regression binary on
// loopback, and the message the user sees checked word for word where it matters.
#include <arpa/inet.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <regex>
#include <thread>

#include "absl/strings/str_cat.h"
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

// TaskService.InjectFault on the task at `address`.
grpc::Status InjectFault(const std::string& address, const v1::InjectFaultRequest& request) {
  auto stub =
      v1::TaskService::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  v1::InjectFaultResponse response;
  return stub->InjectFault(&context, request, &response);
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
  auto ps = c.Start("ps", 0);
  // It exits by itself; how soon is not asserted (60 s only catches a hang).
  auto code = ps->Wait(60s);
  ASSERT_TRUE(code.has_value()) << "ps did not exit within 60 s: " << ps->Output();
  EXPECT_NE(*code, 0);
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
  auto w = worker_view.Start("worker", 0);
  // At once rather than after a wait: without --session_timeout_s a worker that waited would
  // wait forever, so its exit at all is the proof (60 s only catches a hang).
  auto code = w->Wait(60s);
  ASSERT_TRUE(code.has_value()) << w->Output();
  EXPECT_NE(*code, 0);
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

// A ps slower than the deadline is waited out for --ps_patience_s (the point of this test: a
// short one), then the worker gives up naming the method, the ps, its address, the deadline, the
// attempts and the wait.
TEST(RuntimeIntegration, SlowPsIsDeadlineExceededNamingMethodTaskAndDeadline) {
  Cluster c(1, 1);
  auto ps = c.Start("ps", 0, {"--enable_fault_injection"});
  auto w = c.Start("worker", 0,
                   {"--steps", "100000", "--step_delay_ms", "5", "--rpc_deadline_ms", "200",
                    "--ps_patience_s", "3"});
  ASSERT_TRUE(w->WaitForOutput("training:", 20s)) << w->Output();
  // Slow the ps mid-training, as an overloaded ps would be.
  v1::InjectFaultRequest request;
  request.set_parameter_delay_ms(500);
  ASSERT_TRUE(InjectFault(c.jobs["ps"][0], request).ok());
  auto code = w->Wait(30s);
  ASSERT_TRUE(code.has_value()) << w->Output();
  EXPECT_NE(*code, 0);
  EXPECT_TRUE(std::regex_search(
      w->Output(),
      std::regex("DEADLINE_EXCEEDED: (Pull|Push) from worker:0 to ps:0 at " + c.jobs["ps"][0] +
                 " exceeded its deadline of 200 ms \\(--rpc_deadline_ms\\) after "
                 "[0-9]+ attempts in [0-9.]+ s \\(--ps_patience_s 3\\)")))
      << w->Output();
  EXPECT_NE(w->Output().find("worker:0 waits on ps:0 at " + c.jobs["ps"][0]), std::string::npos)
      << w->Output();
}

// A ps too slow (or stopped, or restarting) while the worker creates its variables and pulls
// them first is waited out with the default patience, as in a step: training goes on once the
// ps answers in time.
TEST(RuntimeIntegration, SlowPsAtTheStartIsWaitedOutWithTheDefaultPatience) {
  Cluster c(1, 1);
  auto ps = c.Start("ps", 0, {"--enable_fault_injection", "--testing_ps_delay_ms", "400"});
  // A deadline below the ps's delay is the point: every attempt fails until the delay goes.
  auto w = c.Start("worker", 0, {"--steps", "20", "--rpc_deadline_ms", "200"});
  ASSERT_TRUE(w->WaitForOutput("worker:0 waits on ps:0 at " + c.jobs["ps"][0], 20s)) << w->Output();
  EXPECT_NE(w->Output().find("CreateVariable failed; retrying for up to 10 min 0 s "
                             "(--ps_patience_s)"),
            std::string::npos)
      << w->Output();
  std::this_thread::sleep_for(2s);
  EXPECT_TRUE(w->Running()) << w->Output();
  ASSERT_TRUE(InjectFault(c.jobs["ps"][0], v1::InjectFaultRequest()).ok());  // No delay.
  auto code = w->Wait(20s);
  ASSERT_TRUE(code.has_value()) << w->Output();
  EXPECT_EQ(*code, 0) << w->Output();
  EXPECT_NE(w->Output().find("worker:0 reached ps:0 again after waiting"), std::string::npos)
      << w->Output();
  EXPECT_NE(w->Output().find("final loss"), std::string::npos) << w->Output();
}

TEST(RuntimeIntegration, FaultInjectionIsRefusedUnlessEnabled) {
  Cluster c(1, 1);
  auto ps = c.Start("ps", 0);
  ASSERT_TRUE(ps->WaitForOutput("listening on", 10s));
  EXPECT_EQ(InjectFault(c.jobs["ps"][0], v1::InjectFaultRequest()).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
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
  // The worker creates its variables at once: the 4-byte bias may be held before the weights
  // are refused (as under TSan's slowness), so "holds 0 B" or "holds 4 B".
  const std::string head = "RESOURCE_EXHAUSTED: CreateVariable from worker:0 to ps:0 at " +
                           c.jobs["ps"][0] +
                           " failed: ps:0 cannot hold variable 'linear/w/part_0' "
                           "(float32[1000], 3.9 KiB): it holds ";
  const std::string tail =
      " B and would need 3.9 KiB of its 1000 B budget (--ps_memory_limit_bytes=1000)";
  const std::string out = w->Output();
  EXPECT_TRUE(out.find(head + "0" + tail) != std::string::npos ||
              out.find(head + "4" + tail) != std::string::npos)
      << out;
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
  // A worker finishes its step, reports the loss and leaves: stopped, not done (on Kubernetes
  // SIGTERM is an eviction), so it does not tell the ps it finished...
  w->Signal(SIGTERM);
  auto wcode = w->Wait(10s);
  ASSERT_TRUE(wcode.has_value());
  EXPECT_EQ(*wcode, 0) << w->Output();
  EXPECT_NE(w->Output().find("received SIGTERM: leaving (stopped, not done"), std::string::npos)
      << w->Output();
  EXPECT_NE(w->Output().find("final loss"), std::string::npos);
  EXPECT_NE(w->Output().find("leaves without saying it is done"), std::string::npos);
  // ...and the ps keeps serving, its variables kept for the worker's return.
  std::this_thread::sleep_for(1s);
  EXPECT_TRUE(ps->Running()) << ps->Output();
  EXPECT_EQ(ps->Output().find("finished training"), std::string::npos) << ps->Output();

  // A ps stops on SIGTERM too, while its worker still trains.
  Cluster c2(1, 1);
  auto ps2 = c2.Start("ps", 0);
  auto w2 = c2.Start("worker", 0, {"--steps", "100000", "--step_delay_ms", "5"});
  ASSERT_TRUE(w2->WaitForOutput("training:", 20s)) << w2->Output();
  ps2->Signal(SIGTERM);
  auto code2 = ps2->Wait(10s);
  ASSERT_TRUE(code2.has_value()) << ps2->Output();
  EXPECT_EQ(*code2, 0) << ps2->Output();
  EXPECT_NE(ps2->Output().find("ps:0 received SIGTERM: leaving"), std::string::npos);
  ps->Signal(SIGTERM);
  ASSERT_EQ(ps->Wait(10s).value_or(-1), 0) << ps->Output();

  // SIGUSR1 asks a worker to finish training now: it is done, and its ps exits by itself.
  Cluster c3(1, 1);
  auto ps3 = c3.Start("ps", 0);
  auto w3 = c3.Start("worker", 0, {"--steps", "100000", "--step_delay_ms", "5"});
  ASSERT_TRUE(w3->WaitForOutput("training:", 20s)) << w3->Output();
  w3->Signal(SIGUSR1);
  ASSERT_EQ(w3->Wait(10s).value_or(-1), 0) << w3->Output();
  EXPECT_NE(w3->Output().find("received SIGUSR1: finishing training now"), std::string::npos);
  ASSERT_EQ(ps3->Wait(10s).value_or(-1), 0) << ps3->Output();
  EXPECT_NE(ps3->Output().find("all 1 trainers are done"), std::string::npos) << ps3->Output();
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

namespace trainscope {
namespace {

// A fresh directory under /tmp for one test's checkpoints, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    char path[] = "/tmp/trainscope_ckpt_XXXXXX";
    if (mkdtemp(path) != nullptr) path_ = path;
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  operator const std::string&() const { return path_; }  // NOLINT: used as the path.

 private:
  std::string path_;
};

// The integer after `prefix` in `text` (the first occurrence), or -1.
int64_t NumberAfter(const std::string& text, const std::string& prefix) {
  std::smatch m;
  if (!std::regex_search(text, m, std::regex(prefix + "([0-9]+)"))) return -1;
  return std::stoll(m[1]);
}

std::vector<std::string> CheckpointArgs(const std::string& dir, std::vector<std::string> more) {
  std::vector<std::string> args = {"--checkpoint_dir", dir, "--checkpoint_every_steps", "50"};
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

// kill -9 of the only ps mid-training: it comes back with the newest checkpoint, the worker
// notices the new incarnation, goes on from the checkpoint's step and finishes.
TEST(RuntimeIntegration, PsKilledMidTrainingRestoresTheNewestCheckpointAndTrainingFinishes) {
  const TempDir temp;
  const std::string& dir = temp;
  Cluster c(1, 1);
  auto ps = c.Start("ps", 0, {"--checkpoint_dir", dir});
  auto w = c.Start("worker", 0, CheckpointArgs(dir, {"--steps", "800", "--step_delay_ms", "5"}));
  ASSERT_TRUE(w->WaitForOutput("checkpoint of step 150 saved", 30s)) << w->Output();
  ps->Signal(SIGKILL);
  ASSERT_TRUE(ps->Wait(5s).has_value());
  auto ps2 = c.Start("ps", 0, {"--checkpoint_dir", dir});
  auto code = w->Wait(60s);
  ASSERT_TRUE(code.has_value()) << w->Output();
  EXPECT_EQ(*code, 0) << w->Output() << ps2->Output();
  const std::string out = w->Output();
  EXPECT_NE(out.find("ps:0 restarted (incarnation"), std::string::npos) << out;
  const int64_t restored = NumberAfter(ps2->Output(), "variables \\([^)]*\\) of step ");
  ASSERT_GE(restored, 150) << ps2->Output();
  // Steps lost: at most one interval (50) and the steps of the write in flight.
  const int64_t was_at = NumberAfter(out, "going on from step [0-9]+ \\(was at step ");
  ASSERT_GT(was_at, 0) << out;
  EXPECT_LE(was_at - restored, 60) << out;
  EXPECT_NE(out.find("going on from step " + std::to_string(restored + 1)), std::string::npos)
      << out;
  EXPECT_NE(out.find("after 800 steps"), std::string::npos) << out;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(out, m, std::regex(R"(final loss ([0-9.]+) \(initial ([0-9.]+))")));
  EXPECT_LT(std::stod(m[1]) * 10, std::stod(m[2])) << out;
  auto ps_code = ps2->Wait(10s);
  ASSERT_TRUE(ps_code.has_value()) << ps2->Output();
  EXPECT_EQ(*ps_code, 0) << ps2->Output();
}

// Two ps, two workers: ps:1 restarted restores its own shard only; both workers go on, finish,
// and the new ps:1 accepts their Done (they handshook with it again), so every task ends.
TEST(RuntimeIntegration, OneOfTwoPsKilledRestoresItsShardAndEveryTaskEnds) {
  const TempDir temp;
  const std::string& dir = temp;
  Cluster c(2, 2);
  auto ps0 = c.Start("ps", 0, {"--checkpoint_dir", dir});
  auto ps1 = c.Start("ps", 1, {"--checkpoint_dir", dir});
  auto w0 = c.Start("worker", 0, CheckpointArgs(dir, {"--steps", "600", "--step_delay_ms", "5"}));
  auto w1 = c.Start("worker", 1, {"--steps", "600", "--step_delay_ms", "5"});
  ASSERT_TRUE(w0->WaitForOutput("checkpoint of step 100 saved", 30s)) << w0->Output();
  ps1->Signal(SIGKILL);
  ASSERT_TRUE(ps1->Wait(5s).has_value());
  auto ps1b = c.Start("ps", 1, {"--checkpoint_dir", dir});
  for (Process* w : {w0.get(), w1.get()}) {
    ASSERT_EQ(w->Wait(60s).value_or(-1), 0) << w->Output();
    EXPECT_NE(w->Output().find("ps:1 restarted (incarnation"), std::string::npos) << w->Output();
  }
  EXPECT_NE(ps1b->Output().find("ps:1 restored 1 variables"), std::string::npos) << ps1b->Output();
  for (Process* ps : {ps0.get(), ps1b.get()}) {
    ASSERT_EQ(ps->Wait(10s).value_or(-1), 0) << ps->Output();
    EXPECT_NE(ps->Output().find("all 2 trainers are done"), std::string::npos) << ps->Output();
  }
}

// Without a checkpoint, the worker says what happened instead of a bare NOT_FOUND.
TEST(RuntimeIntegration, PsRestartedWithoutCheckpointSaysItLostItsVariables) {
  Cluster c(1, 1);
  auto ps = c.Start("ps", 0);
  auto w = c.Start("worker", 0, {"--steps", "100000", "--step_delay_ms", "5"});
  ASSERT_TRUE(w->WaitForOutput("training:", 20s)) << w->Output();
  std::this_thread::sleep_for(300ms);
  ps->Signal(SIGKILL);
  ASSERT_TRUE(ps->Wait(5s).has_value());
  auto ps2 = c.Start("ps", 0);
  auto code = w->Wait(60s);
  ASSERT_TRUE(code.has_value()) << w->Output();
  EXPECT_NE(*code, 0);
  EXPECT_TRUE(std::regex_search(
      w->Output(),
      std::regex("ps:0 restarted \\(incarnation [0-9a-f]{16} -> [0-9a-f]{16}\\) and lost its "
                 "variables; no checkpoint in --checkpoint_dir to restore from")))
      << w->Output();
}

// The checkpoint files in `dir`, oldest first (their names sort by step).
std::vector<std::string> CheckpointFiles(const std::string& dir) {
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() == ".tsckpt") files.push_back(entry.path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

// The step in a checkpoint's file name (ckpt-000000000150.tsckpt -> 150).
int64_t StepOf(const std::string& path) {
  const std::string name = std::filesystem::path(path).stem().string();
  return std::stoll(name.substr(name.find('-') + 1));
}

// The newest checkpoint is corrupt: refused, naming the file and why; the one before is used,
// and a whole cluster restarted resumes from it. Which steps have a checkpoint is not fixed: one
// that falls due while the last is still being written is skipped (slow disks, sanitizers).
TEST(RuntimeIntegration, CorruptNewestCheckpointIsRefusedAndThePreviousOneUsed) {
  const TempDir temp;
  const std::string& dir = temp;
  {
    Cluster c(1, 1);
    auto ps = c.Start("ps", 0, {"--checkpoint_dir", dir});
    auto w = c.Start("worker", 0, CheckpointArgs(dir, {"--steps", "200", "--step_delay_ms", "5"}));
    ASSERT_EQ(w->Wait(30s).value_or(-1), 0) << w->Output();
    ASSERT_EQ(ps->Wait(10s).value_or(-1), 0) << ps->Output();
  }
  const std::vector<std::string> files = CheckpointFiles(dir);
  ASSERT_GE(files.size(), 2u) << "two checkpoints at least, in " << dir;
  const std::string& newest = files.back();
  const std::string& previous = files[files.size() - 2];
  {
    FILE* f = fopen(newest.c_str(), "r+b");
    ASSERT_NE(f, nullptr) << newest;
    fseek(f, 60, SEEK_SET);
    fputc(0x5a, f);
    fclose(f);
  }
  Cluster c(1, 1);
  auto ps = c.Start("ps", 0, {"--checkpoint_dir", dir});
  auto w = c.Start("worker", 0, CheckpointArgs(dir, {"--steps", "300"}));
  ASSERT_EQ(w->Wait(30s).value_or(-1), 0) << w->Output();
  EXPECT_NE(ps->Output().find("refused a checkpoint: " + newest +
                              ": corrupt checkpoint: checksum mismatch"),
            std::string::npos)
      << ps->Output();
  EXPECT_NE(ps->Output().find(absl::StrCat("of step ", StepOf(previous), " from ", previous)),
            std::string::npos)
      << ps->Output();
  EXPECT_NE(w->Output().find(
                absl::StrCat("resuming at step ", StepOf(previous) + 1, " from a checkpoint")),
            std::string::npos)
      << w->Output();
}

// Every task killed mid-training and started again with the same --checkpoint_dir: training
// goes on from the newest checkpoint's step.
TEST(RuntimeIntegration, WholeClusterRestartedResumesFromTheNewestCheckpoint) {
  const TempDir temp;
  const std::string& dir = temp;
  Cluster c(1, 1);
  auto ps = c.Start("ps", 0, {"--checkpoint_dir", dir});
  auto w = c.Start("worker", 0, CheckpointArgs(dir, {"--steps", "600", "--step_delay_ms", "5"}));
  ASSERT_TRUE(w->WaitForOutput("checkpoint of step 200 saved", 30s)) << w->Output();
  w->Signal(SIGKILL);
  ps->Signal(SIGKILL);
  ASSERT_TRUE(w->Wait(5s).has_value());
  ASSERT_TRUE(ps->Wait(5s).has_value());
  const std::string before = w->Output();
  const std::regex saved("checkpoint of step ([0-9]+) saved");
  int64_t newest = 0;
  for (auto it = std::sregex_iterator(before.begin(), before.end(), saved);
       it != std::sregex_iterator(); ++it) {
    newest = std::max<int64_t>(newest, std::stoll((*it)[1]));
  }
  auto ps2 = c.Start("ps", 0, {"--checkpoint_dir", dir});
  auto w2 = c.Start("worker", 0, CheckpointArgs(dir, {"--steps", "600"}));
  ASSERT_EQ(w2->Wait(30s).value_or(-1), 0) << w2->Output();
  EXPECT_NE(w2->Output().find("resuming at step " + std::to_string(newest + 1)), std::string::npos)
      << "newest checkpoint: " << newest << "\n"
      << w2->Output();
  EXPECT_NE(w2->Output().find("after 600 steps"), std::string::npos) << w2->Output();
}

// A restored ps says what it restored where it is cheap (Handshake, heartbeat), and only its
// incarnation in Pull answers: the hot path carries no checkpoint path.
TEST(RuntimeIntegration, RestoredPsSaysWhatItRestoredOffTheHotPath) {
  const TempDir temp;
  const std::string& dir = temp;
  Cluster c(1, 1);
  auto ps = c.Start("ps", 0, {"--checkpoint_dir", dir});
  auto w = c.Start("worker", 0, CheckpointArgs(dir, {"--steps", "100000", "--step_delay_ms", "5"}));
  ASSERT_TRUE(w->WaitForOutput("checkpoint of step 100 saved", 30s)) << w->Output();
  w->Signal(SIGKILL);
  ps->Signal(SIGKILL);
  ASSERT_TRUE(w->Wait(5s).has_value());
  ASSERT_TRUE(ps->Wait(5s).has_value());
  auto ps2 = c.Start("ps", 0, {"--checkpoint_dir", dir});
  ASSERT_TRUE(ps2->WaitForOutput("listening on", 10s)) << ps2->Output();
  auto channel = grpc::CreateChannel(c.jobs["ps"][0], grpc::InsecureChannelCredentials());
  grpc::ClientContext hs_context;
  v1::HandshakeResponse hs;
  ASSERT_TRUE(
      v1::TaskService::NewStub(channel)->Handshake(&hs_context, v1::HandshakeRequest(), &hs).ok());
  EXPECT_TRUE(hs.ps_state().restored());
  EXPECT_GE(hs.ps_state().restored_step(), 100);
  EXPECT_NE(hs.ps_state().restored_from().find(".tsckpt"), std::string::npos);
  grpc::ClientContext hb_context;
  v1::HeartbeatResponse hb;
  ASSERT_TRUE(
      v1::TaskService::NewStub(channel)->Heartbeat(&hb_context, v1::HeartbeatRequest(), &hb).ok());
  EXPECT_EQ(hb.ps_state().restored_step(), hs.ps_state().restored_step());
  grpc::ClientContext pull_context;
  v1::PullRequest pull;
  pull.add_names("linear/b");
  v1::PullResponse answer;
  ASSERT_TRUE(v1::ParameterService::NewStub(channel)->Pull(&pull_context, pull, &answer).ok());
  EXPECT_EQ(answer.ps_state().incarnation(), hs.ps_state().incarnation());
  EXPECT_FALSE(answer.ps_state().restored());
  EXPECT_TRUE(answer.ps_state().restored_from().empty());
}

// A Push whose answer is lost after the ps applied it is retried with the same request id and
// answered without being applied twice.
TEST(RuntimeIntegration, RetriedPushIsAppliedOnce) {
  Cluster c(1, 1);
  auto ps = c.Start("ps", 0, {"--testing_drop_push_answers", "1"});
  ASSERT_TRUE(ps->WaitForOutput("listening on", 10s)) << ps->Output();
  auto channel = grpc::CreateChannel(c.jobs["ps"][0], grpc::InsecureChannelCredentials());
  auto params = v1::ParameterService::NewStub(channel);
  auto tensor = [](float value, v1::Tensor* t) {
    t->set_dtype(v1::DT_FLOAT);
    t->add_shape(1);
    t->set_content(std::string(reinterpret_cast<const char*>(&value), sizeof(value)));
  };
  {
    grpc::ClientContext context;
    v1::CreateVariableRequest create;
    create.set_name("v");
    create.mutable_from()->set_role("worker");
    tensor(1.0f, create.mutable_initial());
    v1::CreateVariableResponse created;
    ASSERT_TRUE(params->CreateVariable(&context, create, &created).ok());
  }
  v1::PushRequest push;
  push.set_name("v");
  push.mutable_from()->set_role("worker");
  tensor(1.0f, push.mutable_gradient());
  push.set_learning_rate(0.25f);
  push.set_sender_incarnation(77);
  push.set_sequence(1);
  for (int attempt = 0; attempt < 2; ++attempt) {
    grpc::ClientContext context;
    v1::PushResponse answer;
    grpc::Status st = params->Push(&context, push, &answer);
    if (attempt == 0) {
      EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE) << st.error_message();
    } else {
      EXPECT_TRUE(st.ok()) << st.error_message();
      EXPECT_TRUE(answer.duplicate());
    }
  }
  grpc::ClientContext context;
  v1::PullRequest pull;
  pull.add_names("v");
  v1::PullResponse pulled;
  ASSERT_TRUE(params->Pull(&context, pull, &pulled).ok());
  float value = 0;
  std::memcpy(&value, pulled.values(0).content().data(), sizeof(value));
  EXPECT_FLOAT_EQ(value, 0.75f);  // 1 - 0.25 * 1, once.
  EXPECT_NE(ps->Output().find("was applied already: answering OK, not applying it twice"),
            std::string::npos)
      << ps->Output();

  // The real client retries a lost answer with the same id: 5 steps, 2 variables, 10 updates.
  Cluster c2(1, 1);
  auto ps2 = c2.Start("ps", 0, {"--testing_drop_push_answers", "1"});
  auto w2 = c2.Start("worker", 0, {"--steps", "5"});
  ASSERT_EQ(w2->Wait(30s).value_or(-1), 0) << w2->Output();
  ASSERT_EQ(ps2->Wait(10s).value_or(-1), 0) << ps2->Output();
  EXPECT_NE(ps2->Output().find("was applied already"), std::string::npos) << ps2->Output();
  EXPECT_NE(ps2->Output().find("after applying 10 updates"), std::string::npos) << ps2->Output();
}

}  // namespace
}  // namespace trainscope
