// Where a stuck task is stuck, for real: linear_regression tasks wedged three ways (a worker
// deadlocked on two mutexes, a ps whose ParameterService blocks, a ps stopped with SIGSTOP), one
// real sidecar (two for a snapshot read through another node's sidecar), and what the API,
// trainscopectl stacks and the page show. Needs ptrace (root, or CAP_SYS_PTRACE): skipped,
// saying so, without it (failed under CI=true: skip.h).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <fstream>
#include <set>
#include <thread>

#include "sidecar_harness.h"
#include "skip.h"
#include "trainscope/common/http_client.h"
#include "trainscope/sidecar/api.h"
#include "trainscope/sidecar/names.h"
#include "wait.h"

namespace trainscope::testing {
namespace {

namespace pb = sidecar::pb;
using sidecar::TaskState;
using std::chrono::seconds;

// Training that accepts injected faults.
std::vector<std::string> LongTrainingFaulty(std::vector<std::string> more = {}) {
  more.insert(more.begin(), "--enable_fault_injection");
  return LongTraining(std::move(more));
}

// The sidecar's answer to GET `path` (with the test's API token): the status code and body.
std::pair<int, std::string> Get(Sidecar& s, const std::string& path) {
  auto r = trainscope::HttpGet(s.http(), path, 20000, 8 << 20, {}, {TokenFile::Header()});
  if (!r.ok()) return {0, std::string(r.status().message())};
  return {r->status, r->body};
}

// The snapshots of `task` from /api/v1/stacks; waits until there is one with `trigger`.
std::optional<pb::StackSnapshot> WaitForSnapshot(Sidecar& s, const std::string& task,
                                                 const std::string& trigger) {
  const auto deadline = std::chrono::steady_clock::now() + seconds(20);
  while (std::chrono::steady_clock::now() < deadline) {
    auto [code, body] = Get(s, std::string(sidecar::names::kPathStacks) + "?task=" + task);
    if (code == 200) {
      auto list = sidecar::ParseStackListJson(body);
      if (list.ok()) {
        for (const pb::StackSnapshot& snap : list->snapshots()) {
          if (snap.trigger() == trigger) return snap;
        }
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return std::nullopt;
}

const pb::ThreadStack* ThreadWith(const pb::StackSnapshot& s, const std::string& function) {
  for (const pb::ThreadStack& t : s.threads()) {
    for (const pb::StackFrame& f : t.frames()) {
      if (f.function().find(function) != std::string::npos) return &t;
    }
  }
  return nullptr;
}

bool HasFrame(const pb::ThreadStack& t, const std::string& function) {
  for (const pb::StackFrame& f : t.frames()) {
    if (f.function().find(function) != std::string::npos) return true;
  }
  return false;
}

std::string Ctl(const std::vector<std::string>& args, int* code = nullptr) {
  Process ctl(BinPath("trainscopectl"), args);
  auto exit = ctl.Wait(seconds(30));
  if (code != nullptr) *code = exit.value_or(-1);
  return ctl.Output();
}

char ProcState(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(in, line);
  const size_t close = line.rfind(')');
  return close == std::string::npos || close + 2 >= line.size() ? '?' : line[close + 2];
}

// The CapEff line of /proc/PID/status ("" when unreadable).
std::string CapEff(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("CapEff:", 0) == 0) return line.substr(line.find_first_not_of(" \t", 7));
  }
  return "";
}

// The children of `pid` (its main thread's), from /proc.
std::vector<pid_t> Children(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/task/" + std::to_string(pid) + "/children");
  std::vector<pid_t> out;
  for (pid_t c; in >> c;) out.push_back(c);
  return out;
}

class SidecarStacks : public ::testing::Test {
 protected:
  void SetUp() override {
    TRAINSCOPE_SKIP_UNLESS(geteuid() == 0,
                           "snapshots need ptrace: run as root (or CAP_SYS_PTRACE)");
  }
};

TEST_F(SidecarStacks, DeadlockedWorkerNamesBothThreadsAndTheirLocks) {
  Cluster cluster = {{"ps", {FreeAddress()}}, {"worker", {FreeAddress()}}};
  auto ps = StartTask(cluster, "ps", 0);
  auto worker = StartTask(cluster, "worker", 0, LongTrainingFaulty());
  Sidecar sidecar(cluster, {"--stall_after_s", "1.5"});
  ASSERT_TRUE(sidecar.WaitForState("worker:0", TaskState::kUp, seconds(20), "training"))
      << sidecar.Describe();
  int code = 0;
  std::string out = Ctl({"fault", "--task", cluster["worker"][0], "--deadlock_training"}, &code);
  ASSERT_EQ(code, 0) << out;

  auto stalled = sidecar.WaitForState("worker:0", TaskState::kStalled, seconds(20), "deadlock?");
  ASSERT_TRUE(stalled) << sidecar.Describe();
  EXPECT_NE(stalled->reason.find("main thread in trainscope::FaultInjector::TakeAThenB"),
            std::string::npos)
      << stalled->reason;
  EXPECT_NE(stalled->reason.find("deadlock-peer"), std::string::npos) << stalled->reason;

  auto snap = WaitForSnapshot(sidecar, "worker:0", "stalled");
  ASSERT_TRUE(snap) << sidecar.Get("/api/v1/stacks?task=worker:0");
  EXPECT_TRUE(snap->stacks()) << snap->stacks_error();
  EXPECT_EQ(snap->pid(), worker->pid());
  // Taken by its capture helper: the sidecar, which listens, has no capability left.
  EXPECT_EQ(CapEff(sidecar.process().pid()), "0000000000000000");
  // Its helpers: captures (SYS_PTRACE, KILL, DAC_READ_SEARCH), look-ups (the first and last).
  const std::vector<pid_t> helpers = Children(sidecar.process().pid());
  ASSERT_EQ(helpers.size(), 2u);
  std::set<std::string> caps = {CapEff(helpers[0]), CapEff(helpers[1])};
  EXPECT_EQ(caps, (std::set<std::string>{"0000000000080024", "0000000000080004"}));
  const pb::ThreadStack* a = ThreadWith(*snap, "FaultInjector::TakeAThenB");
  const pb::ThreadStack* b = ThreadWith(*snap, "FaultInjector::TakeBThenA");
  ASSERT_TRUE(a != nullptr && b != nullptr) << snap->DebugString();
  EXPECT_EQ(a->tid(), worker->pid());  // The training (main) thread.
  EXPECT_EQ(b->name(), "deadlock-peer");
  for (const pb::ThreadStack* t : {a, b}) {
    EXPECT_TRUE(HasFrame(*t, "lock")) << t->DebugString();
    EXPECT_EQ(t->state(), "S");
    EXPECT_EQ(t->syscall(), "futex");
    EXPECT_TRUE(HasFrame(*t, "ParameterClient::PullAll") || t != a) << t->DebugString();
  }
#ifndef __clang__
  // The frames of our own code carry file and line (gcc's DWARF; elfutils 0.188 finds no line
  // in clang's without .debug_aranges, as in the sanitizer builds).
  bool lined = false;
  for (const pb::StackFrame& f : a->frames()) {
    lined |= f.function().find("TakeAThenB") != std::string::npos && f.line() > 0 &&
             f.file().find("fault_injector.cc") != std::string::npos;
  }
  EXPECT_TRUE(lined) << a->DebugString();
#endif

  // trainscopectl stacks: one block per thread, innermost frame first.
  out = Ctl({"stacks", "worker:0", "--sidecar", sidecar.http()}, &code);
  EXPECT_EQ(code, 0) << out;
  for (const char* want :
       {"=== worker:0 pid", "stuck: deadlock?", "Thread ", "\"deadlock-peer\"", "#0 ",
        "trainscope::FaultInjector::TakeAThenB()", "trainscope::FaultInjector::TakeBThenA()"}) {
    EXPECT_NE(out.find(want), std::string::npos) << want << "\n" << out;
  }
  EXPECT_LT(out.find("lock"), out.find("TakeAThenB")) << out;  // Innermost first.
  // The same as text from the API (the page's link), and the page links it.
  auto [text_code, text] = Get(sidecar, "/api/v1/stacks?task=worker:0&format=text");
  EXPECT_EQ(text_code, 200);
  EXPECT_NE(text.find("TakeBThenA"), std::string::npos) << text;
  EXPECT_NE(sidecar.Get("/").find("/api/v1/stacks?task="), std::string::npos);
  const std::string metrics = sidecar.Get("/metrics");
  EXPECT_NE(metrics.find("trainscope_sidecar_snapshots_total "), std::string::npos) << metrics;
  EXPECT_EQ(metrics.find("trainscope_sidecar_snapshots_total 0"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("trainscope_sidecar_snapshot_bytes "), std::string::npos);
}

// --stack_snapshots=false: no helper and no capability. The sidecar still tells a dead task
// (its port refuses). Run as root, the tasks keep every capability, so the sidecar may no
// longer read their fds: their processes are not verified, and their reasons say so (a
// stopped task then reads as unreachable, not hung: docs/security.md).
TEST_F(SidecarStacks, WithoutSnapshotsNoCapabilityIsLeftAndDeathsAreStillSeen) {
  Cluster cluster = {{"ps", {FreeAddress()}}, {"worker", {FreeAddress()}}};
  auto ps = StartTask(cluster, "ps", 0);
  auto worker = StartTask(cluster, "worker", 0, LongTrainingFaulty());
  Sidecar sidecar(cluster, {"--stack_snapshots=false"});
  auto up = sidecar.WaitForState("worker:0", TaskState::kUp, seconds(20), "training");
  ASSERT_TRUE(up) << sidecar.Describe();
  EXPECT_EQ(CapEff(sidecar.process().pid()), "0000000000000000");
  EXPECT_TRUE(Children(sidecar.process().pid()).empty());
  EXPECT_EQ(up->pid, 0);  // Not verified (its reason says why).
  worker->Signal(SIGKILL);
  EXPECT_TRUE(sidecar.WaitForState("worker:0", TaskState::kDead, seconds(10)))
      << sidecar.Describe();
}

TEST_F(SidecarStacks, BlockedParameterServiceIsBlamedByItsWorker) {
  Cluster cluster = {{"ps", {FreeAddress()}}, {"worker", {FreeAddress()}}};
  auto ps = StartTask(cluster, "ps", 0, {"--enable_fault_injection"});
  // A long deadline is the point: one call held by the blocked service, both of its halves
  // joined (with the default 5 s deadline the call is retried and the worker is blocked on ps:0).
  auto worker =
      StartTask(cluster, "worker", 0, LongTrainingFaulty({"--rpc_deadline_ms", "120000"}));
  Sidecar sidecar(cluster, {"--stall_after_s", "1.5"});
  ASSERT_TRUE(sidecar.WaitForState("worker:0", TaskState::kUp, seconds(20), "training"))
      << sidecar.Describe();
  int code = 0;
  std::string out = Ctl({"fault", "--task", cluster["ps"][0], "--block_parameter_service"}, &code);
  ASSERT_EQ(code, 0) << out;

  auto ps_view = sidecar.WaitForState("ps:0", TaskState::kStalled, seconds(20), "BlockForever");
  ASSERT_TRUE(ps_view) << sidecar.Describe();
  EXPECT_NE(ps_view->reason.find("its serving is stuck"), std::string::npos) << ps_view->reason;
  auto w = sidecar.WaitForState("worker:0", TaskState::kStalled, seconds(20),
                                "to ps:0 (ps:0 is stalled");
  ASSERT_TRUE(w) << sidecar.Describe();
  EXPECT_NE(w->reason.find("main thread waiting"), std::string::npos) << w->reason;

  auto ps_snap = WaitForSnapshot(sidecar, "ps:0", "stalled");
  ASSERT_TRUE(ps_snap);
  const pb::ThreadStack* blocked = ThreadWith(*ps_snap, "FaultInjector::BlockForever");
  ASSERT_NE(blocked, nullptr) << ps_snap->DebugString();
  ASSERT_GT(blocked->calls_size(), 0) << blocked->DebugString();
  EXPECT_TRUE(blocked->calls(0).served());
  EXPECT_EQ(blocked->calls(0).peer(), "worker:0");
  auto w_snap = WaitForSnapshot(sidecar, "worker:0", "stalled");
  ASSERT_TRUE(w_snap);
  const pb::ThreadStack* main = nullptr;
  for (const pb::ThreadStack& t : w_snap->threads()) {
    if (t.tid() == worker->pid()) main = &t;
  }
  ASSERT_NE(main, nullptr);
  EXPECT_TRUE(HasFrame(*main, "trainscope::ParameterClient::")) << main->DebugString();
  ASSERT_GT(main->calls_size(), 0) << main->DebugString();
  EXPECT_EQ(main->calls(0).peer(), "ps:0");
  // Both halves of the stuck call carry the same trace id. The worker may have several calls in
  // flight (one Push per variable); the one the ps serves is among them (the others may not have
  // reached the ps's handlers yet, under a sanitizer's slowness).
  EXPECT_FALSE(main->calls(0).trace_id().empty());
  bool joined = false;
  for (const pb::CallInFlight& mine : main->calls()) {
    for (const pb::CallInFlight& c : ps_snap->inflight()) joined |= c.trace_id() == mine.trace_id();
  }
  EXPECT_TRUE(joined) << ps_snap->DebugString() << main->DebugString();
}

TEST_F(SidecarStacks, StoppedPsStaysStoppedIsShownAndTrainsOnAfterSigcont) {
  Cluster cluster = {{"ps", {FreeAddress()}}, {"worker", {FreeAddress()}}};
  auto ps = StartTask(cluster, "ps", 0);
  // The flags users get: its calls to the stopped ps fail once the keepalive gives up, and the
  // runtime waits the stop out (--ps_patience_s).
  auto worker = StartTask(cluster, "worker", 0, LongTrainingFaulty());
  Sidecar sidecar(cluster, {"--stall_after_s", "1.5"});
  ASSERT_TRUE(sidecar.WaitForState("worker:0", TaskState::kUp, seconds(20), "training"))
      << sidecar.Describe();
  // Stopped before this sidecar ever heard it, the ps would be missing (never answered), not hung.
  ASSERT_TRUE(sidecar.WaitForState("ps:0", TaskState::kUp, seconds(20))) << sidecar.Describe();
  kill(ps->pid(), SIGSTOP);
  auto hung = sidecar.WaitForState("ps:0", TaskState::kHung, seconds(10));
  if (!hung) kill(ps->pid(), SIGCONT);
  ASSERT_TRUE(hung) << sidecar.Describe();
  auto snap = WaitForSnapshot(sidecar, "ps:0", "hung");
  if (!snap) kill(ps->pid(), SIGCONT);
  ASSERT_TRUE(snap);
  EXPECT_EQ(snap->process_state(), "T");
  EXPECT_TRUE(snap->stacks()) << snap->stacks_error();
  EXPECT_NE(ThreadWith(*snap, "ServeUntilDone"), nullptr) << snap->DebugString();
  // Still stopped after the capture: a snapshot must not resume what was stopped.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(ProcState(ps->pid()), 'T');
  // The worker, stalled (its call waits) or blocked (its calls fail), names the call it waits in
  // and the stopped ps.
  bool blamed = false;
  const auto until = std::chrono::steady_clock::now() + seconds(20);
  while (!blamed && std::chrono::steady_clock::now() < until) {
    auto w = sidecar.Task("worker:0");
    blamed = w && (w->state == TaskState::kStalled || w->state == TaskState::kBlocked) &&
             w->reason.find("main thread waiting") != std::string::npos &&
             w->reason.find("to ps:0") != std::string::npos &&
             w->reason.find("ps:0 is hung") != std::string::npos;
    if (!blamed) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(blamed) << sidecar.Describe() << "--- worker output ---\n" << worker->Output();

  kill(ps->pid(), SIGCONT);
  ASSERT_TRUE(sidecar.WaitForState("ps:0", TaskState::kUp, seconds(20))) << sidecar.Describe();
  const int64_t steps = sidecar.Task("worker:0")->steps;
  ASSERT_TRUE(sidecar.WaitForState("worker:0", TaskState::kUp, seconds(30)))
      << sidecar.Describe() << "--- worker output ---\n"
      << worker->Output();
  const auto deadline = std::chrono::steady_clock::now() + seconds(20);
  while (sidecar.Task("worker:0")->steps <= steps && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_GT(sidecar.Task("worker:0")->steps, steps) << sidecar.Describe();
}

// What the sidecar says of a task that claims pid `pid` (`command`), which does not hold the
// task's port.
std::string ClaimWords(pid_t pid, const std::string& command) {
  return "the task claims pid " + std::to_string(pid) + ", but pid " + std::to_string(pid) + " (" +
         command + ") does not hold its listening port";
}

// ps:0 is up with no pid, its reason says `claim`, and a fresh capture of it is refused with it.
void ExpectNeverTakenForTheTask(Sidecar& sidecar, const std::string& claim) {
  auto up = sidecar.WaitForState("ps:0", TaskState::kUp, seconds(20), claim);
  ASSERT_TRUE(up) << sidecar.Describe();
  EXPECT_EQ(up->pid, 0) << up->reason;
  auto [code, body] = Get(sidecar, "/api/v1/stacks?task=ps:0&fresh=1");
  EXPECT_NE(code, 200) << body;
  EXPECT_NE(body.find("not capturing ps:0: " + claim), std::string::npos) << body;
}

// A task that reports another process's pid (a lying or buggy task, or a pod's pid taken at face
// value): that process is never read or captured as the task, and the reason says why.
TEST_F(SidecarStacks, ATaskClaimingAnotherProcesssPidIsNeverReadAsIt) {
  Process sleeper("/bin/sleep", {"600"});
  const std::string address = FreeAddress();
  Cluster cluster = {{"ps", {address}}};
  auto task = StartFakeTask(address, "ps", 0, {"--claim_pid", std::to_string(sleeper.pid())});
  TokenFile token;
  Sidecar sidecar(cluster, {"--api_token_file", token.path()});
  const std::string claim = ClaimWords(sleeper.pid(), "sleep");
  ExpectNeverTakenForTheTask(sidecar, claim);
  // Stopped for real, it is not called hung on the sleeper's evidence: its own process is unknown.
  task->Signal(SIGSTOP);
  auto silent = sidecar.WaitForState("ps:0", TaskState::kUnreachable, seconds(20));
  task->Signal(SIGCONT);
  ASSERT_TRUE(silent) << sidecar.Describe();
  EXPECT_NE(silent->reason.find("cannot check its process here: " + claim), std::string::npos)
      << silent->reason;
  EXPECT_EQ(ProcState(sleeper.pid()), 'S');  // Never attached to.
}

// A task that reports another process's pid and that process's port as its listen address (a
// fake task pointing at an HTTP server): the port verified is the spec's, never the one the
// heartbeat names, so the server is never read, shown or captured as the task.
TEST_F(SidecarStacks, ATaskNamingAnotherProcesssPidAndPortIsNeverReadAsIt) {
  const int port = FreePort();
  const std::string other = "127.0.0.1:" + std::to_string(port);
  Process server("/usr/bin/python3",
                 {"-m", "http.server", std::to_string(port), "--bind", "127.0.0.1"});
  ASSERT_TRUE(WaitUntil([&] { return trainscope::HttpGet(other, "/", 1000).ok(); }, seconds(20)))
      << server.Output();
  const std::string address = FreeAddress();
  auto task = StartFakeTask(
      address, "ps", 0, {"--claim_pid", std::to_string(server.pid()), "--listen_address", other});
  TokenFile token;
  Sidecar sidecar({{"ps", {address}}}, {"--api_token_file", token.path()});
  ExpectNeverTakenForTheTask(sidecar, ClaimWords(server.pid(), "python3"));
  EXPECT_EQ(ProcState(server.pid()), 'S');  // Never attached to.
  const std::string metrics = sidecar.Get("/metrics");
  EXPECT_EQ(metrics.find("trainscope_sidecar_snapshots_total 1"), std::string::npos) << metrics;
}

TEST_F(SidecarStacks, BadRequestsGetClearErrors) {
  Cluster cluster = {{"ps", {FreeAddress()}}, {"worker", {FreeAddress()}}};
  auto ps = StartTask(cluster, "ps", 0);
  auto worker = StartTask(cluster, "worker", 0, LongTrainingFaulty());
  TokenFile token;
  Sidecar sidecar(cluster, {"--api_token_file", token.path()});
  ASSERT_TRUE(sidecar.WaitForState("worker:0", TaskState::kUp, seconds(20), "training"))
      << sidecar.Describe();
  auto [code, body] = Get(sidecar, "/api/v1/stacks?task=worker:9");
  EXPECT_EQ(code, 404);
  EXPECT_NE(body.find("no task worker:9 in the cluster spec (tasks: ps:0, worker:0)"),
            std::string::npos)
      << body;
  std::tie(code, body) = Get(sidecar, "/api/v1/stacks");
  EXPECT_EQ(code, 400);
  EXPECT_NE(body.find("name a task"), std::string::npos) << body;
  // A healthy task: nothing kept, but a fresh snapshot on demand.
  std::tie(code, body) = Get(sidecar, "/api/v1/stacks?task=worker:0");
  EXPECT_EQ(code, 200) << body;
  EXPECT_EQ(sidecar::ParseStackListJson(body)->snapshots_size(), 0) << body;
  int ctl_code = 0;
  std::string out = Ctl({"stacks", "worker:0", "--sidecar", sidecar.http()}, &ctl_code);
  EXPECT_EQ(ctl_code, 1) << out;
  EXPECT_NE(out.find("no snapshot of worker:0 kept"), std::string::npos) << out;
  out = Ctl({"stacks", "worker:0", "--fresh", "--sidecar", sidecar.http(), "--api_token_file",
             token.path()},
            &ctl_code);
  EXPECT_EQ(ctl_code, 0) << out;
  EXPECT_NE(out.find("(demand)"), std::string::npos) << out;
  EXPECT_NE(out.find("trainscope::examples::RunLinearRegression"), std::string::npos) << out;
  // --json: the API's stack list and nothing else, read back as the API's type.
  out = Ctl({"stacks", "worker:0", "--fresh", "--json", "--sidecar", sidecar.http(),
             "--api_token_file", token.path()},
            &ctl_code);
  EXPECT_EQ(ctl_code, 0) << out;
  absl::StatusOr<pb::StackList> list = sidecar::ParseStackListJson(out);
  ASSERT_TRUE(list.ok()) << list.status() << "\n" << out;
  EXPECT_EQ(list->task(), "worker:0");
  ASSERT_GE(list->snapshots_size(), 1) << out;
  EXPECT_NE(ThreadWith(list->snapshots(0), "trainscope::examples::RunLinearRegression"), nullptr)
      << out;
  // A task that has exited: nothing to capture, said so.
  worker->Signal(SIGKILL);
  ASSERT_TRUE(sidecar.WaitForState("worker:0", TaskState::kDead, seconds(10)))
      << sidecar.Describe();
  std::tie(code, body) = Get(sidecar, "/api/v1/stacks?task=worker:0&fresh=1");
  EXPECT_EQ(code, 409);
  EXPECT_NE(body.find("worker:0 has exited (dead"), std::string::npos) << body;
  out = Ctl({"stacks", "worker:9", "--sidecar", sidecar.http()}, &ctl_code);
  EXPECT_EQ(ctl_code, 2) << out;
  EXPECT_NE(out.find("no task worker:9"), std::string::npos) << out;
}

// A snapshot read from another node's sidecar over the exchange, and one over the asker's size
// limit refused in words. (On namespace nodes: tests/multinode/stacks_test.py.)
TEST_F(SidecarStacks, AnotherNodesSidecarFetchesTheSnapshot) {
  Cluster cluster = {{"ps", {FreeAddress()}}, {"worker", {FreeAddress(), FreeAddress()}}};
  auto ps = StartTask(cluster, "ps", 0);
  auto worker = StartTask(cluster, "worker", 0, LongTrainingFaulty());
  auto other = StartTask(cluster, "worker", 1, LongTrainingFaulty());
  std::vector<std::string> nodes;
  for (int i = 0; i < 3; ++i) nodes.push_back("127.0.0.1:" + std::to_string(FreePort()));
  auto peers = [&](int self) {
    std::string p;
    for (int i = 0; i < 3; ++i) {
      if (i != self) p += (p.empty() ? "" : ",") + nodes[i];
    }
    return p;
  };
  auto port = [&](int i) { return nodes[i].substr(nodes[i].rfind(':') + 1); };
  const std::string a_node = nodes[0];
  Sidecar a(cluster, {"--grpc_port", port(0), "--local_tasks", "worker:0", "--peer_sidecars",
                      peers(0), "--stall_after_s", "1.5"});
  Sidecar b(cluster, {"--grpc_port", port(1), "--local_tasks", "ps:0", "--peer_sidecars", peers(1),
                      "--snapshot_fetch_max_bytes", "4096"});
  Sidecar c(cluster,
            {"--grpc_port", port(2), "--local_tasks", "worker:1", "--peer_sidecars", peers(2)});
  ASSERT_TRUE(b.WaitForState("worker:0", TaskState::kUp, seconds(30))) << b.Describe();
  ASSERT_TRUE(c.WaitForState("worker:0", TaskState::kUp, seconds(30))) << c.Describe();
  int code = 0;
  std::string out = Ctl({"fault", "--task", cluster["worker"][0], "--deadlock_training"}, &code);
  ASSERT_EQ(code, 0) << out;
  ASSERT_TRUE(WaitForSnapshot(a, "worker:0", "stalled")) << a.Describe();
  // Sidecar c has no size limit of note: it shows the snapshot that a took.
  out = Ctl({"stacks", "worker:0", "--sidecar", c.http()}, &code);
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find("on " + a_node), std::string::npos) << out;
  EXPECT_NE(out.find("TakeBThenA"), std::string::npos) << out;
  // Sidecar b takes at most 4 KiB: refused, saying why.
  auto [status, body] = Get(b, "/api/v1/stacks?task=worker:0");
  EXPECT_EQ(status, 413) << body;
  EXPECT_NE(body.find("over the asker's limit of 4096"), std::string::npos) << body;
  EXPECT_NE(body.find(a_node), std::string::npos) << body;
}

}  // namespace
}  // namespace trainscope::testing
