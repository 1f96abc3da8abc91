// sidecar_detection_bench: the detection figures of issue 3, measured with real processes.
//   detection: over N trials, kill -9 of a worker -> dead; SIGSTOP of a ps -> hung, SIGCONT ->
//              up; a worker blocked in CreateSession on a ps that is not there -> blocked naming
//              it; a ps answering heartbeats 500 ms late -> slow, then up again, and how often
//              it was named hung meanwhile. Median and worst of each.
//   outside:   the same for tasks watched from outside (Python gRPC servers without trainscope's
//              heartbeat, tests/py's trainscope_testing.outside_servers): kill -9 -> dead,
//              SIGSTOP -> hung, SIGCONT -> up.
//   soak:      tasks training for --soak_s with both cores saturated by busy loops; counts
//              transitions to dead, hung or unreachable (all false alarms).
//   footprint: one sidecar watching --footprint_tasks fake tasks; its RSS and CPU share.
// Not a test: it prints figures. Needs build/bin/{trainscope-sidecar,linear_regression,
// sidecar_fake_task}.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <thread>

#include "CLI/CLI.hpp"
#include "process.h"
#include "trainscope/common/http_client.h"
#include "trainscope/sidecar/api.h"
#include "trainscope/sidecar/task_view.h"

namespace {

using trainscope::sidecar::TaskState;
using trainscope::testing::BinPath;
using trainscope::testing::FreePort;
using trainscope::testing::Process;
using trainscope::testing::TfConfig;
using Cluster = std::map<std::string, std::vector<std::string>>;
using Clock = std::chrono::steady_clock;

std::string Addr() { return "127.0.0.1:" + std::to_string(FreePort()); }

std::string SpecFile(const Cluster& c) {
  char tmpl[] = "/tmp/trainscope-bench-spec-XXXXXX";
  int fd = mkstemp(tmpl);
  close(fd);
  std::ofstream(tmpl) << TfConfig(c, c.begin()->first, 0);
  return tmpl;
}

struct SidecarProc {
  int port = FreePort();
  std::unique_ptr<Process> p;
  SidecarProc(const Cluster& c, std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {
        "--cluster_spec", SpecFile(c),   "--http_port", std::to_string(port), "--http_address",
        "127.0.0.1",      "--grpc_port", "-1",          "--peer_sidecars",    "none"};
    for (auto& e : extra) args.push_back(e);
    p = std::make_unique<Process>(BinPath("trainscope-sidecar"), args);
    p->WaitForOutput("http on", std::chrono::seconds(10));
  }
  std::optional<trainscope::sidecar::TaskView> Task(const std::string& name) {
    auto r =
        trainscope::HttpGet("127.0.0.1:" + std::to_string(port), "/api/v1/tasks?local=1", 1000);
    if (!r.ok()) return std::nullopt;
    auto views = trainscope::sidecar::ParseTaskViews(r->body);
    if (!views.ok()) return std::nullopt;
    for (auto& v : *views) {
      if (v.task.ShortName() == name) return v;
    }
    return std::nullopt;
  }
  // Seconds until `name` is in `state` (polling every 5 ms), or -1 after `timeout_s`.
  double TimeTo(const std::string& name, TaskState state, Clock::time_point from,
                double timeout_s = 20, const std::string& reason_has = "") {
    while (std::chrono::duration<double>(Clock::now() - from).count() < timeout_s) {
      auto v = Task(name);
      if (v && v->state == state &&
          (reason_has.empty() || v->reason.find(reason_has) != std::string::npos)) {
        return std::chrono::duration<double>(Clock::now() - from).count();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return -1;
  }
  std::string Metrics() {
    auto r = trainscope::HttpGet("127.0.0.1:" + std::to_string(port), "/metrics", 2000);
    return r.ok() ? r->body : "";
  }
};

// One trial of the process faults, timed until the sidecar names each: kill -9 of worker:0
// (dead), SIGSTOP of ps:0 (hung), then SIGCONT (up again). The caller starts worker:0 anew.
void KillAndStop(SidecarProc& sidecar, Process& worker, Process& ps, std::vector<double>* dead,
                 std::vector<double>* hung, std::vector<double>* resumed) {
  auto t0 = Clock::now();
  kill(worker.pid(), SIGKILL);
  dead->push_back(sidecar.TimeTo("worker:0", TaskState::kDead, t0));
  worker.Wait(std::chrono::seconds(5));
  t0 = Clock::now();
  kill(ps.pid(), SIGSTOP);
  hung->push_back(sidecar.TimeTo("ps:0", TaskState::kHung, t0));
  t0 = Clock::now();
  kill(ps.pid(), SIGCONT);
  resumed->push_back(sidecar.TimeTo("ps:0", TaskState::kUp, t0));
}

std::unique_ptr<Process> Task(const Cluster& c, const std::string& role, int index,
                              std::vector<std::string> args = {}) {
  return std::make_unique<Process>(
      BinPath("linear_regression"), std::move(args),
      std::map<std::string, std::string>{{"TF_CONFIG", TfConfig(c, role, index)}});
}

std::vector<std::string> Training() {
  return {"--steps", "1000000000", "--step_delay_ms", "10", "--log_every", "1000000"};
}

// Figures with no successful trial: the bench then exits 1, so that a smoke run that measured
// nothing fails rather than printing a line nobody reads.
int g_empty_figures = 0;

void Report(const std::string& what, std::vector<double> v) {
  std::vector<double> ok;
  int failed = 0;
  for (double x : v) (x < 0 ? failed++ : (ok.push_back(x), 0));
  std::sort(ok.begin(), ok.end());
  if (ok.empty()) {
    std::printf("%-44s no successful trial (%d failed)\n", what.c_str(), failed);
    ++g_empty_figures;
    return;
  }
  std::printf("%-44s median %6.0f ms  worst %6.0f ms  (%zu trials, %d missed)\n", what.c_str(),
              ok[ok.size() / 2] * 1000, ok.back() * 1000, ok.size(), failed);
}

void Detection(int trials) {
  Cluster c = {{"ps", {Addr()}}, {"worker", {Addr()}}};
  auto ps = Task(c, "ps", 0);
  auto worker = Task(c, "worker", 0, Training());
  SidecarProc sidecar(c);
  std::vector<double> dead, hung, resumed, blocked_since_start, blocked_since_seen;
  for (int t = 0; t < trials; ++t) {
    if (sidecar.TimeTo("worker:0", TaskState::kUp, Clock::now()) < 0 ||
        sidecar.TimeTo("ps:0", TaskState::kUp, Clock::now()) < 0) {
      std::fprintf(stderr, "trial %d: tasks not up\n", t);
      continue;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // Let it learn.
    KillAndStop(sidecar, *worker, *ps, &dead, &hung, &resumed);
    worker = Task(c, "worker", 0, Training());
  }
  worker.reset();
  ps.reset();
  sidecar.p.reset();

  // Blocked: each trial a fresh worker whose ps is not there.
  for (int t = 0; t < trials; ++t) {
    Cluster b = {{"ps", {Addr()}}, {"worker", {Addr()}}};
    SidecarProc s(b);
    auto start = Clock::now();
    auto w = Task(b, "worker", 0, Training());
    // When the sidecar first sees the worker answer (and so its wait).
    double seen = -1;
    double named = -1;
    while (std::chrono::duration<double>(Clock::now() - start).count() < 20) {
      auto v = s.Task("worker:0");
      double now = std::chrono::duration<double>(Clock::now() - start).count();
      if (v && seen < 0 && v->state != TaskState::kMissing) seen = now;
      if (v && v->state == TaskState::kBlocked &&
          v->reason.find("ps:0 at " + b["ps"][0]) != std::string::npos) {
        named = now;
        if (seen < 0) seen = now;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    blocked_since_start.push_back(named);
    blocked_since_seen.push_back(named < 0 ? -1 : named - seen);
  }
  std::printf("detection, %d trials, --heartbeat_interval_ms=100 (defaults)\n", trials);
  Report("kill -9 worker -> dead", dead);
  Report("SIGSTOP ps -> hung", hung);
  Report("SIGCONT ps -> up", resumed);
  Report("blocked naming ps:0, since worker start", blocked_since_start);
  Report("blocked naming ps:0, since sidecar saw it", blocked_since_seen);
  std::printf("(blocked includes the --blocked_after_ms grace, default 1000 ms)\n");
}

// A gRPC server that knows nothing of trainscope (Debian's python3-grpcio) at `address`.
std::unique_ptr<Process> OutsideServer(const std::string& address) {
  const std::string port = address.substr(address.rfind(':') + 1);
  return std::make_unique<Process>(
      "/usr/bin/python3",
      std::vector<std::string>{"-m", "trainscope_testing.outside_servers", "grpc", "--port", port},
      std::map<std::string, std::string>{{"PYTHONPATH", TRAINSCOPE_TESTS_PY}});
}

void Outside(int trials) {
  Cluster c = {{"ps", {Addr()}}, {"worker", {Addr()}}};
  auto ps = OutsideServer(c["ps"][0]);
  auto worker = OutsideServer(c["worker"][0]);
  SidecarProc sidecar(c);
  std::vector<double> dead, hung, resumed;
  for (int t = 0; t < trials; ++t) {
    if (sidecar.TimeTo("worker:0", TaskState::kUp, Clock::now(), 20, "watched from outside") < 0 ||
        sidecar.TimeTo("ps:0", TaskState::kUp, Clock::now(), 20, "watched from outside") < 0) {
      std::fprintf(stderr, "trial %d: outside tasks not up\n", t);
      continue;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // Let it learn.
    KillAndStop(sidecar, *worker, *ps, &dead, &hung, &resumed);
    worker = OutsideServer(c["worker"][0]);
  }
  std::printf("outside tasks (Python gRPC servers, no trainscope heartbeat), %d trials\n", trials);
  Report("outside: kill -9 worker -> dead", dead);
  Report("outside: SIGSTOP ps -> hung", hung);
  Report("outside: SIGCONT ps -> up", resumed);
}

double Field(const std::string& metrics, const std::string& prefix) {
  double sum = 0;
  std::istringstream in(metrics);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(prefix, 0) == 0)
      sum += std::strtod(line.substr(line.rfind(' ')).c_str(), nullptr);
  }
  return sum;
}

// Asks the ps at `address` (started with --enable_fault_injection) to answer heartbeats `ms`
// late; false when trainscopectl fails.
bool DelayHeartbeats(const std::string& address, int ms) {
  Process fault(BinPath("trainscopectl"),
                {"fault", "--task", address, "--heartbeat_delay_ms", std::to_string(ms)});
  return fault.Wait(std::chrono::seconds(10)) == 0;
}

// Late heartbeats (what SidecarStates.SlowWhenHeartbeatsAreLate shows but does not time): each
// trial the ps answers 500 ms late until the sidecar names it slow and 2 s more, then on time
// until it is up again. Also how often the ps was named hung meanwhile: false alarms, since it
// answers all along.
void LateHeartbeats(int trials) {
  Cluster c = {{"ps", {Addr()}}, {"worker", {Addr()}}};
  auto ps = Task(c, "ps", 0, {"--enable_fault_injection"});
  auto worker = Task(c, "worker", 0, Training());
  SidecarProc sidecar(c);
  std::vector<double> slow, up;
  for (int t = 0; t < trials; ++t) {
    if (sidecar.TimeTo("ps:0", TaskState::kUp, Clock::now()) < 0) {
      std::fprintf(stderr, "late heartbeats, trial %d: ps:0 not up\n", t);
      continue;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // Let it learn.
    auto t0 = Clock::now();
    if (!DelayHeartbeats(c["ps"][0], 500)) {
      std::fprintf(stderr, "late heartbeats, trial %d: trainscopectl fault failed\n", t);
      continue;
    }
    slow.push_back(sidecar.TimeTo("ps:0", TaskState::kSlow, t0));
    std::this_thread::sleep_for(std::chrono::seconds(2));
    t0 = Clock::now();
    if (!DelayHeartbeats(c["ps"][0], 0)) {
      std::fprintf(stderr, "late heartbeats, trial %d: trainscopectl fault failed\n", t);
      continue;
    }
    up.push_back(sidecar.TimeTo("ps:0", TaskState::kUp, t0));
  }
  const double hung = Field(sidecar.Metrics(),
                            "trainscope_task_state_transitions_total{cluster=\"default\","
                            "role=\"ps\",task=\"0\",state=\"hung\"}");
  std::printf("late heartbeats, %d trials\n", trials);
  Report("ps answers 500 ms late -> slow", slow);
  Report("ps answers on time again -> up", up);
  std::printf("%-44s %.0f (false alarms: it answered all along)\n", "ps named hung meanwhile",
              hung);
}

void Soak(int seconds) {
  Cluster c = {{"ps", {Addr(), Addr()}}, {"worker", {Addr(), Addr()}}};
  std::vector<std::unique_ptr<Process>> tasks;
  tasks.push_back(Task(c, "ps", 0));
  tasks.push_back(Task(c, "ps", 1));
  tasks.push_back(Task(c, "worker", 0, Training()));
  tasks.push_back(Task(c, "worker", 1, Training()));
  SidecarProc sidecar(c);
  for (const char* t : {"ps:0", "ps:1", "worker:0", "worker:1"}) {
    if (sidecar.TimeTo(t, TaskState::kUp, Clock::now()) < 0) std::fprintf(stderr, "%s not up\n", t);
  }
  std::string m0 = sidecar.Metrics();
  // Saturate both cores.
  std::vector<pid_t> hogs;
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  for (long i = 0; i < cores; ++i) {
    pid_t p = fork();
    if (p == 0) {
      volatile unsigned long x = 0;
      while (true) x = x + 1;
    }
    hogs.push_back(p);
  }
  std::this_thread::sleep_for(std::chrono::seconds(seconds));
  std::string m1 = sidecar.Metrics();
  for (pid_t p : hogs) {
    kill(p, SIGKILL);
    waitpid(p, nullptr, 0);
  }
  std::printf(
      "soak: %d s, %ld busy-loop processes on %ld cores, ps:0 ps:1 worker:0 worker:1 "
      "training\n",
      seconds, cores, cores);
  for (const char* s : {"dead", "hung", "unreachable", "slow", "stalled", "blocked"}) {
    double total = 0;
    for (const char* t :
         {"role=\"ps\",task=\"0\",state=\"%s\"", "role=\"ps\",task=\"1\",state=\"%s\"",
          "role=\"worker\",task=\"0\",state=\"%s\"", "role=\"worker\",task=\"1\",state=\"%s\""}) {
      char label[128];
      std::snprintf(label, sizeof(label), t, s);
      std::string prefix =
          std::string("trainscope_task_state_transitions_total{cluster=\"default\",") + label;
      total += Field(m1, prefix) - Field(m0, prefix);
    }
    std::printf("  transitions to %-12s %.0f\n", s, total);
  }
  std::printf(
      "  sidecar pauses detected   %.0f\n",
      Field(m1, "trainscope_sidecar_pauses_total") - Field(m0, "trainscope_sidecar_pauses_total"));
  std::printf("  worker steps during soak  %.0f\n",
              Field(m1, "trainscope_task_steps_total{cluster=\"default\",role=\"worker\"") -
                  Field(m0, "trainscope_task_steps_total{cluster=\"default\",role=\"worker\""));
}

bool PortFree(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  bool ok = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  close(fd);
  return ok;
}

struct ProcSample {
  double cpu = 0;
  double rss_mib = 0;
  double anon_mib = 0;  // Private memory; the rest of RSS is shared library pages.
};

ProcSample Sample(pid_t pid) {
  ProcSample s;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string content((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  size_t paren = content.rfind(')');
  std::istringstream in(content.substr(paren + 2));
  std::vector<std::string> f;
  std::string x;
  while (in >> x) f.push_back(x);
  static const double kTicks = static_cast<double>(sysconf(_SC_CLK_TCK));
  if (f.size() > 22) {
    s.cpu = (std::stod(f[11]) + std::stod(f[12])) / kTicks;
    s.rss_mib = std::stod(f[21]) * sysconf(_SC_PAGESIZE) / 1048576.0;
  }
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("RssAnon:", 0) == 0) s.anon_mib = std::strtod(line.c_str() + 8, nullptr) / 1024;
  }
  return s;
}

void Footprint(int tasks, int seconds) {
  // `tasks` consecutive free ports.
  int base = 0;
  for (int attempt = 0; attempt < 100 && base == 0; ++attempt) {
    int start = 20000 + static_cast<int>(Clock::now().time_since_epoch().count() % 30000);
    bool free = true;
    for (int i = 0; i < tasks && free; ++i) free = PortFree(start + i);
    if (free) base = start;
  }
  Cluster c;
  for (int i = 0; i < tasks; ++i) c["worker"].push_back("127.0.0.1:" + std::to_string(base + i));
  Process fake(BinPath("sidecar_fake_task"), {"--port", std::to_string(base), "--count",
                                              std::to_string(tasks), "--role", "worker"});
  if (!fake.WaitForOutput("ready", std::chrono::seconds(30))) {
    std::fprintf(stderr, "fake tasks did not start: %s\n", fake.Output().c_str());
    return;
  }
  SidecarProc sidecar(c);
  int up = 0;
  for (int i = 0; i < tasks; ++i) {
    up += sidecar.TimeTo("worker:" + std::to_string(i), TaskState::kUp, Clock::now(), 20) >= 0;
  }
  std::this_thread::sleep_for(std::chrono::seconds(5));
  ProcSample a = Sample(sidecar.p->pid());
  auto t0 = Clock::now();
  std::this_thread::sleep_for(std::chrono::seconds(seconds));
  ProcSample b = Sample(sidecar.p->pid());
  double wall = std::chrono::duration<double>(Clock::now() - t0).count();
  std::printf("footprint: one sidecar watching %d tasks (%d up) at 100 ms, over %d s\n", tasks, up,
              seconds);
  std::printf(
      "  RSS %.1f MiB (%.1f MiB private, the rest shared library pages), CPU %.2f%% of "
      "one core\n",
      b.rss_mib, b.anon_mib, 100.0 * (b.cpu - a.cpu) / wall);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"sidecar_detection_bench: detection figures of the sidecar (issue 3)"};
  std::string mode = "detection";
  int trials = 20;
  int soak_s = 300;
  int footprint_tasks = 64;
  int footprint_s = 30;
  app.add_option("--mode", mode, "detection | outside | soak | footprint | all")
      ->capture_default_str();
  app.add_option("--trials", trials)->capture_default_str();
  app.add_option("--soak_s", soak_s)->capture_default_str();
  app.add_option("--footprint_tasks", footprint_tasks)->capture_default_str();
  app.add_option("--footprint_s", footprint_s)->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  signal(SIGPIPE, SIG_IGN);
  if (mode == "detection" || mode == "all") {
    Detection(trials);
    LateHeartbeats(trials);
  }
  if (mode == "outside" || mode == "all") Outside(trials);
  if (mode == "footprint" || mode == "all") Footprint(footprint_tasks, footprint_s);
  if (mode == "soak" || mode == "all") Soak(soak_s);
  if (g_empty_figures > 0) {
    std::printf("FAILED: %d figure(s) had no successful trial\n", g_empty_figures);
    return 1;
  }
  return 0;
}
