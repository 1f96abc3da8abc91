// Cgroup facts for real (cgroup v1, as this machine mounts it): a ps in a memory cgroup of its
// own that the kernel's OOM killer kills, and a worker held to 5% of a core by its CPU quota,
// each watched by the real trainscope-sidecar; what its API, trainscopectl status and /metrics
// say. The test makes its own cgroups (unique names, beneath its own cgroup) and removes them;
// it needs root and writable memory and cpu hierarchies, else it is skipped (failed in CI).
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "grpcpp/grpcpp.h"
#include "sidecar_harness.h"
#include "skip.h"
#include "trainscope/common/cgroup.h"
#include "trainscope/v1/runtime.grpc.pb.h"

namespace trainscope::testing {
namespace {

namespace fs = std::filesystem;
using sidecar::TaskState;
using std::chrono::seconds;

// A v1 cgroup of `controller` made for one test beneath this process's own cgroup of that
// controller, and removed (once the processes put in it are gone) with the object. Only the
// test's own children are ever put in it.
class TestCgroup {
 public:
  TestCgroup(const std::string& controller, const std::string& name) {
    std::optional<CgroupPaths> own = ReadProcessCgroups(getpid());
    if (!own || own->version != 1) return;
    const bool memory = controller == "memory";
    const std::string& path = memory ? own->memory_path : own->cpu_path;
    for (const std::string& top : {memory ? own->memory_dir : own->cpu_dir, controller}) {
      const fs::path parent = fs::path(kCgroupRoot) / top / path.substr(1);
      if (top.empty() || !fs::is_directory(parent)) continue;
      const fs::path dir = parent / ("trainscope-test-" + std::to_string(getpid()) + "-" + name);
      std::error_code ec;
      if (fs::create_directory(dir, ec)) dir_ = dir.string();
      break;
    }
  }
  ~TestCgroup() {
    if (dir_.empty()) return;
    // Its processes are the test's children, killed and reaped by their Process objects first;
    // a dying one may hold the cgroup for a moment.
    for (int i = 0; i < 100 && rmdir(dir_.c_str()) != 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  bool ok() const { return !dir_.empty(); }
  const std::string& dir() const { return dir_; }
  bool Set(const std::string& file, const std::string& value) const {
    std::ofstream out(dir_ + "/" + file);
    out << value;
    out.flush();
    return out.good();
  }
  std::string Read(const std::string& file) const {
    std::ifstream in(dir_ + "/" + file);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  // linear_regression as `role:index`, started inside this cgroup (a shell puts itself in, then
  // execs the task: the task's pid is the shell's, in the cgroup from its first instruction).
  std::unique_ptr<Process> StartTask(const Cluster& cluster, const std::string& role, int index,
                                     std::vector<std::string> args) const {
    std::vector<std::string> all = {"-c",
                                    "echo $$ > '" + dir_ + "/cgroup.procs' && exec \"$0\" \"$@\"",
                                    BinPath("linear_regression")};
    for (auto& a : args) all.push_back(std::move(a));
    return std::make_unique<Process>(
        "/bin/sh", all,
        std::map<std::string, std::string>{{"TF_CONFIG", TfConfig(cluster, role, index)}});
  }

 private:
  std::string dir_;
};

std::string Metric(const std::string& name, const std::string& role) {
  return name + "{cluster=\"default\",role=\"" + role + "\",task=\"0\"} ";
}

std::string CtlStatus(Sidecar& sidecar) {
  Process ctl(BinPath("trainscopectl"), {"status", "--sidecar", sidecar.http()});
  ctl.Wait(seconds(10));
  return ctl.Output();
}

// Asks `ps_address` to create a float variable of `bytes` (the kind of call a worker makes with
// a large model); the answer does not matter: a ps short of memory dies receiving it.
void CreateLargeVariable(const std::string& ps_address, int64_t bytes) {
  auto stub = v1::ParameterService::NewStub(
      grpc::CreateChannel(ps_address, grpc::InsecureChannelCredentials()));
  v1::CreateVariableRequest request;
  request.set_name("oversized");
  request.mutable_from()->set_role("worker");
  request.mutable_initial()->set_dtype(v1::DT_FLOAT);
  request.mutable_initial()->add_shape(bytes / 4);
  request.mutable_initial()->set_content(std::string(static_cast<size_t>(bytes), '\1'));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + seconds(30));
  v1::CreateVariableResponse response;
  stub->CreateVariable(&context, request, &response);
}

TEST(SidecarCgroups, PsKilledByItsMemoryLimitIsDeadOomKilled) {
  TRAINSCOPE_SKIP_UNLESS(geteuid() == 0, "cgroups can be made by root only");
  TestCgroup memory("memory", "oom");
  TRAINSCOPE_SKIP_UNLESS(memory.ok(), "no writable cgroup v1 memory hierarchy here");
  constexpr int64_t kLimit = 64 << 20;
  ASSERT_TRUE(memory.Set("memory.limit_in_bytes", std::to_string(kLimit)));
  Cluster cluster = {{"ps", {FreeAddress()}}, {"worker", {FreeAddress()}}};
  auto ps = memory.StartTask(cluster, "ps", 0, {});
  auto worker =
      StartTask(cluster, "worker", 0,
                {"--steps", "100000000", "--step_delay_ms", "5", "--log_every", "100000"});
  Sidecar sidecar(cluster, {});
  auto up = sidecar.WaitForState("ps:0", TaskState::kUp, seconds(20));
  ASSERT_TRUE(up) << sidecar.Describe() << ps->Output();
  EXPECT_EQ(up->pid, ps->pid());
  std::this_thread::sleep_for(seconds(2));  // Read alive at least twice (once a second).
  up = sidecar.Task("ps:0");
  ASSERT_TRUE(up);
  EXPECT_EQ(up->cgroup.version, 1);
  EXPECT_EQ(up->cgroup.memory_limit_bytes, kLimit);
  EXPECT_GT(up->cgroup.memory_usage_bytes.value_or(0), 0);
  EXPECT_EQ(up->cgroup.oom_kills, 0);

  CreateLargeVariable(cluster["ps"][0], 128 << 20);
  ASSERT_TRUE(ps->Wait(seconds(30)).has_value()) << "the ps outlived 128 MiB in a 64 MiB cgroup";
  // The kernel's own count, then what the sidecar says of it.
  EXPECT_NE(memory.Read("memory.oom_control").find("oom_kill 1"), std::string::npos)
      << memory.Read("memory.oom_control");
  auto dead = sidecar.WaitForState("ps:0", TaskState::kDead, seconds(10),
                                   "OOM-killed by its container's memory limit (64 MiB; usage was");
  ASSERT_TRUE(dead) << sidecar.Describe();
  RecordProperty("reason", dead->reason);
  EXPECT_TRUE(dead->cgroup.oom_killed);
  EXPECT_EQ(dead->cgroup.oom_kills, 1);
  EXPECT_NE(dead->reason.find("process " + std::to_string(ps->pid())), std::string::npos)
      << dead->reason;
  const std::string status = CtlStatus(sidecar);
  EXPECT_NE(status.find("OOM-killed"), std::string::npos) << status;
  RecordProperty("ctl_status", status);
  const std::string metrics = sidecar.Get("/metrics");
  EXPECT_NE(metrics.find(Metric("trainscope_task_oom_kills_total", "ps") + "1"), std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find(Metric("trainscope_task_memory_limit_bytes", "ps") + "67108864"),
            std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find(Metric("trainscope_task_memory_usage_bytes", "ps")), std::string::npos);
  // The worker is in no cgroup of its own with a limit: no limit series, no OOM kills.
  EXPECT_EQ(metrics.find(Metric("trainscope_task_memory_limit_bytes", "worker")),
            std::string::npos);
}

TEST(SidecarCgroups, WorkerHeldToFivePercentOfACoreIsSlowThrottled) {
  TRAINSCOPE_SKIP_UNLESS(geteuid() == 0, "cgroups can be made by root only");
  TestCgroup cpu("cpu", "throttle");
  TRAINSCOPE_SKIP_UNLESS(cpu.ok(), "no writable cgroup v1 cpu hierarchy here");
  ASSERT_TRUE(cpu.Set("cpu.cfs_period_us", "100000"));
  ASSERT_TRUE(cpu.Set("cpu.cfs_quota_us", "5000"));
  Cluster cluster = {{"ps", {FreeAddress()}}, {"worker", {FreeAddress()}}};
  auto ps = StartTask(cluster, "ps", 0);
  // No delay between steps: the worker always wants CPU, and gets 5 ms of each 100 ms.
  auto worker =
      cpu.StartTask(cluster, "worker", 0,
                    {"--steps", "100000000", "--step_delay_ms", "0", "--log_every", "100000"});
  Sidecar sidecar(cluster, {});
  auto slow =
      sidecar.WaitForState("worker:0", TaskState::kSlow, seconds(60), "by its quota (0.05 core)");
  ASSERT_TRUE(slow) << sidecar.Describe() << worker->Output();
  RecordProperty("reason", slow->reason);
  EXPECT_NE(slow->reason.find("CPU-throttled "), std::string::npos) << slow->reason;
  EXPECT_NE(slow->reason.find("% of the last 10 s"), std::string::npos) << slow->reason;
  EXPECT_GE(slow->cgroup.cpu_throttled_ratio.value_or(0), 0.5);
  EXPECT_EQ(slow->cgroup.cpu_quota_cores, 0.05);
  // The kernel's own count.
  EXPECT_EQ(cpu.Read("cpu.stat").find("nr_throttled 0\n"), std::string::npos)
      << cpu.Read("cpu.stat");
  const std::string status = CtlStatus(sidecar);
  EXPECT_NE(status.find("CPU-throttled"), std::string::npos) << status;
  RecordProperty("ctl_status", status);
  const std::string metrics = sidecar.Get("/metrics");
  EXPECT_NE(metrics.find(Metric("trainscope_task_cpu_quota_cores", "worker") + "0.05"),
            std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find(Metric("trainscope_task_cpu_throttled_periods_total", "worker")),
            std::string::npos);
  EXPECT_NE(metrics.find(Metric("trainscope_task_cpu_throttled_seconds_total", "worker")),
            std::string::npos);
  // The ps has no quota: it is not throttled, and has no quota series.
  EXPECT_EQ(metrics.find(Metric("trainscope_task_cpu_quota_cores", "ps")), std::string::npos);
  // Its own quota holds it back: neither the ps nor the network between them is blamed.
  EXPECT_NE(sidecar.Task("ps:0")->state, TaskState::kSlow) << sidecar.Describe();
  EXPECT_EQ(sidecar.Task("ps:0")->reason.find("slows worker:0"), std::string::npos)
      << sidecar.Describe();
  EXPECT_EQ(sidecar.Task("worker:0")->reason.find("network"), std::string::npos)
      << sidecar.Describe();
}

// Slow, not dead: among 3 workers of 2 ps, the one held to 10% of a core is the straggler, named
// with why; the others and both ps stay up.
TEST(SidecarCgroups, WorkerAtTenPercentOfACoreIsTheStraggler) {
  TRAINSCOPE_SKIP_UNLESS(geteuid() == 0, "cgroups can be made by root only");
  TestCgroup cpu("cpu", "straggler");
  TRAINSCOPE_SKIP_UNLESS(cpu.ok(), "no writable cgroup v1 cpu hierarchy here");
  ASSERT_TRUE(cpu.Set("cpu.cfs_period_us", "100000"));
  ASSERT_TRUE(cpu.Set("cpu.cfs_quota_us", "10000"));
  Cluster cluster = {{"ps", {FreeAddress(), FreeAddress()}},
                     {"worker", {FreeAddress(), FreeAddress(), FreeAddress()}}};
  std::vector<std::unique_ptr<Process>> tasks;
  for (int i = 0; i < 2; ++i) tasks.push_back(StartTask(cluster, "ps", i));
  // Steps of 1 ms of sleep: with 5 ms, a step needs so little CPU that on a quiet machine 10% of
  // a core slowed it only 1.12x, less than a straggler's gap to its peers.
  const std::vector<std::string> training = {"--steps", "100000000",   "--step_delay_ms",
                                             "1",       "--log_every", "100000"};
  for (int i = 0; i < 2; ++i) tasks.push_back(StartTask(cluster, "worker", i, training));
  tasks.push_back(cpu.StartTask(cluster, "worker", 2, training));
  Sidecar sidecar(cluster, {});
  const auto start = std::chrono::steady_clock::now();
  auto slow = sidecar.WaitForState("worker:2", TaskState::kSlow, seconds(60), "straggler: ");
  ASSERT_TRUE(slow) << sidecar.Describe() << sidecar.Get("/api/v1/tasks");
  RecordProperty("reason", slow->reason);
  RecordProperty(
      "seconds_to_verdict",
      std::to_string(
          std::chrono::duration_cast<seconds>(std::chrono::steady_clock::now() - start).count()));
  EXPECT_NE(slow->reason.find("the median of the other workers"), std::string::npos)
      << slow->reason;
  // Both, not side by side: on a loaded machine a late heartbeat is said between them.
  EXPECT_NE(slow->reason.find("held back by its own CPU quota; "), std::string::npos)
      << slow->reason;
  EXPECT_NE(slow->reason.find("; CPU-throttled "), std::string::npos) << slow->reason;
  EXPECT_NE(slow->reason.find("by its quota (0.1 core)"), std::string::npos) << slow->reason;
  for (const char* t : {"ps:0", "ps:1", "worker:0", "worker:1"}) {
    auto v = sidecar.Task(t);
    ASSERT_TRUE(v) << t;
    EXPECT_EQ(v->state, TaskState::kUp) << t << ": " << v->reason << "\n" << sidecar.Describe();
  }
  const std::string status = CtlStatus(sidecar);
  EXPECT_NE(status.find("straggler"), std::string::npos) << status;
  RecordProperty("ctl_status", status);
}

}  // namespace
}  // namespace trainscope::testing
