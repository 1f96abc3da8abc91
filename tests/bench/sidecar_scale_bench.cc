// sidecar_scale_bench: what the cluster view costs each sidecar as the cluster grows.
//   real:     for each N of --nodes, N nodes as the loopback addresses 127.0.0.2..N+1, each with
//             one scripted task (sidecar_fake_task) and one trainscope-sidecar bound to its
//             address with default flags (the peers derived from the spec), started one every
//             --start_gap_s. The tasks are workers; with --ps K the first K are ps tasks, and
//             every worker reports calls to each of them (the worker x ps map's edges, run with
//             the map on, off or both: --map). Once every view has every task up, over --window_s
//             it measures every sidecar's CPU share, RSS and exchange bytes sent per second; then
//             it kills --changes tasks one by one and measures, for each, the time until every
//             sidecar's view has it dead; finally how long the sidecars take to stop.
//   simulate: --sim_nodes nodes of the real exchange protocol (ExchangeCore) in this process
//             over a simulated network: periods until a change reaches every node, messages and
//             bytes per node per second, and the time until a node that goes down is held
//             silent by every other.
// Not a test: it prints figures (docs/sidecar.md).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_split.h"
#include "exchange_sim.h"
#include "process.h"
#include "trainscope/common/clock.h"
#include "trainscope/common/http_client.h"
#include "trainscope/common/proc.h"
#include "trainscope/sidecar/api.h"
#include "trainscope/telemetry/names.h"

namespace {

namespace ts = trainscope::sidecar;
using trainscope::MonotonicSeconds;
using trainscope::UnixSeconds;
using trainscope::testing::BinPath;
using trainscope::testing::Process;

// Node i is the loopback address 127.0.0.(i+2).
std::string Host(int node) { return "127.0.0." + std::to_string(node + 2); }

bool CanBind(const std::string& host, int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, host.c_str(), &a.sin_addr);
  bool ok = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  close(fd);
  return ok;
}

// A port free on every node's address.
int PortFreeOnAll(int nodes, std::mt19937& rng) {
  for (int attempt = 0; attempt < 200; ++attempt) {
    int port = 20000 + static_cast<int>(rng() % 20000);
    bool ok = true;
    for (int i = 0; i < nodes && ok; ++i) ok = CanBind(Host(i), port);
    if (ok) return port;
  }
  return -1;
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double CounterValue(const std::string& metrics, const std::string& series) {
  size_t at = metrics.find(series + " ");
  return at == std::string::npos ? 0
                                 : std::strtod(metrics.c_str() + at + series.size() + 1, nullptr);
}

struct Node {
  std::unique_ptr<Process> task;
  std::unique_ptr<Process> sidecar;
  std::string http;
};

struct RealRow {
  int nodes = 0;
  bool keyed = false;  // The exchange signed with a cluster key.
  bool map = true;     // The worker x ps map on (--worker_ps_map).
  double converge_s = 0;
  bool joined = false;                 // Every view had every task up within join_s.
  double cpu_max = 0, cpu_median = 0;  // Percent of one core.
  double rss_max_mib = 0;
  double bytes_median = 0, bytes_max = 0;  // Sent per second.
  std::vector<double> change_ms;           // Time until every view has the change.
  double stop_max_ms = 0;
  int edge_series = 0;  // The most slowest-edge series one sidecar exported: the map is live.
};

bool AllUp(std::vector<Node>& nodes, int n) {
  for (Node& node : nodes) {
    auto r = trainscope::HttpGet(node.http, "/api/v1/tasks", 2000);
    if (!r.ok()) return false;
    auto views = ts::ParseTaskViews(r->body);
    if (!views.ok() || static_cast<int>(views->size()) != n) return false;
    for (const auto& v : *views) {
      if (v.state != ts::TaskState::kUp) return false;
    }
  }
  return true;
}

// The task of node i when the first `ps` nodes run ps tasks.
std::string TaskName(int i, int ps) {
  return i < ps ? "ps:" + std::to_string(i) : "worker:" + std::to_string(i - ps);
}

// Kills the task of node `victim`; the time until every sidecar's view has it dead (ms).
double ChangeToEveryView(std::vector<Node>& nodes, int victim, int ps) {
  const double t0 = UnixSeconds();
  nodes[victim].task->Signal(SIGKILL);
  nodes[victim].task->Wait(std::chrono::seconds(5));
  std::this_thread::sleep_for(std::chrono::seconds(4));
  double worst = 0;
  const std::string name = TaskName(victim, ps);
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (!nodes[i].sidecar->Running()) continue;
    auto r = trainscope::HttpGet(nodes[i].http, "/api/v1/tasks?task=" + name, 2000);
    auto views = r.ok() ? ts::ParseTaskViews(r->body) : absl::StatusOr<std::vector<ts::TaskView>>();
    if (!views.ok() || views->empty() || views->front().state != ts::TaskState::kDead) return -1;
    const ts::TaskView& v = views->front();
    const double known = v.source.empty() ? v.since : v.learned_at;
    worst = std::max(worst, known - t0);
  }
  return worst * 1000;
}

// How a real-mode run is set up.
struct RealSetup {
  double window_s = 20;  // Measurement window.
  int changes = 3;       // Task deaths timed.
  // Between two sidecars' starts. Forty sidecars and forty tasks started at once on two cores
  // starve every one of them for seconds: probes time out, and the suspicions, reconnections and
  // indirect probes that follow keep the machine starved (a node of a real cluster starts one
  // sidecar, not forty).
  double start_gap_s = 0.25;
  double join_s = 300;   // Longest wait for every view to have every task up.
  std::string key_file;  // The cluster key every sidecar signs its exchange with ("": unkeyed).
  int ps = 0;            // Nodes running a ps task (the first ones); the rest run workers.
  bool map = true;       // --worker_ps_map.
};

// Starts n tasks, then n sidecars (one every setup.start_gap_s) watching the spec at `spec_path`.
std::vector<Node> StartCluster(int n, const RealSetup& setup, const std::string& spec_path,
                               int task_port, int http_port, int grpc_port) {
  std::vector<Node> nodes(n);
  for (int i = 0; i < n; ++i) {
    const bool ps = i < setup.ps;
    std::vector<std::string> args{"--host",        Host(i),
                                  "--port",        std::to_string(task_port),
                                  "--role",        ps ? "ps" : "worker",
                                  "--index",       std::to_string(ps ? i : i - setup.ps),
                                  "--phase",       "training",
                                  "--steps_per_s", "10"};
    for (int p = 0; p < setup.ps && !ps; ++p) {
      args.insert(args.end(), {"--peer_ok", TaskName(p, setup.ps) + "@" + Host(p) + ":" +
                                                std::to_string(task_port)});
    }
    nodes[i].task = std::make_unique<Process>(BinPath("sidecar_fake_task"), args);
  }
  for (int i = 0; i < n; ++i) {
    if (i > 0) std::this_thread::sleep_for(std::chrono::duration<double>(setup.start_gap_s));
    nodes[i].http = Host(i) + ":" + std::to_string(http_port);
    std::vector<std::string> args{
        "--cluster_spec",          spec_path,     "--http_address",         Host(i), "--http_port",
        std::to_string(http_port), "--grpc_port", std::to_string(grpc_port)};
    if (!setup.key_file.empty()) args.insert(args.end(), {"--exchange_key_file", setup.key_file});
    if (!setup.map) args.insert(args.end(), {"--worker_ps_map", "false"});
    nodes[i].sidecar = std::make_unique<Process>(BinPath("trainscope-sidecar"), args);
  }
  return nodes;
}

// Every sidecar's CPU share, RSS and exchange bytes sent per second, over `window_s`.
void MeasureWindow(std::vector<Node>& nodes, double window_s, RealRow& row) {
  const std::string sent = "trainscope_sidecar_exchange_bytes_total{direction=\"sent\"}";
  const std::string edge = std::string("\n") + trainscope::telemetry::names::kTaskPeerLatency + "{";
  const size_t n = nodes.size();
  std::vector<double> cpu0(n), bytes0(n);
  for (size_t i = 0; i < n; ++i) {
    cpu0[i] = trainscope::ReadProcStat(nodes[i].sidecar->pid())->cpu_seconds;
    auto m = trainscope::HttpGet(nodes[i].http, "/metrics", 3000);
    bytes0[i] = m.ok() ? CounterValue(m->body, sent) : 0;
  }
  const double w0 = MonotonicSeconds();
  std::this_thread::sleep_for(std::chrono::duration<double>(window_s));
  const double elapsed = MonotonicSeconds() - w0;
  std::vector<double> cpu, bytes;
  for (size_t i = 0; i < n; ++i) {
    auto stat = trainscope::ReadProcStat(nodes[i].sidecar->pid());
    cpu.push_back(100 * (stat->cpu_seconds - cpu0[i]) / elapsed);
    row.rss_max_mib = std::max(row.rss_max_mib, stat->resident_bytes / 1048576.0);
    auto m = trainscope::HttpGet(nodes[i].http, "/metrics", 3000);
    bytes.push_back(((m.ok() ? CounterValue(m->body, sent) : 0) - bytes0[i]) / elapsed);
    int edges = 0;
    for (size_t at = 0; m.ok() && (at = m->body.find(edge, at)) != std::string::npos; ++at) ++edges;
    row.edge_series = std::max(row.edge_series, edges);
  }
  row.cpu_max = *std::max_element(cpu.begin(), cpu.end());
  row.cpu_median = Median(cpu);
  row.bytes_max = *std::max_element(bytes.begin(), bytes.end());
  row.bytes_median = Median(bytes);
}

// One cluster of n nodes: joined (timed from the last sidecar's start), measured, changed,
// stopped.
RealRow RunReal(int n, const RealSetup& setup, std::mt19937& rng) {
  RealRow row;
  row.nodes = n;
  row.keyed = !setup.key_file.empty();
  row.map = setup.map;
  const int task_port = PortFreeOnAll(n, rng);
  const int http_port = PortFreeOnAll(n, rng);
  const int grpc_port = PortFreeOnAll(n, rng);
  auto hosts = [&](int from, int to) {
    std::string list;
    for (int i = from; i < to; ++i) {
      list += (i > from ? ", \"" : "\"") + Host(i) + ":" + std::to_string(task_port) + "\"";
    }
    return list;
  };
  std::string spec = "{\"cluster\": {\"worker\": [" + hosts(setup.ps, n) + "]";
  if (setup.ps > 0) spec += ", \"ps\": [" + hosts(0, setup.ps) + "]";
  spec += "}}";
  char path[] = "/tmp/trainscope-scale-spec-XXXXXX";
  close(mkstemp(path));
  std::ofstream(path) << spec;
  std::vector<Node> nodes = StartCluster(n, setup, path, task_port, http_port, grpc_port);
  const double start = MonotonicSeconds();
  while (!(row.joined = AllUp(nodes, n)) && MonotonicSeconds() - start < setup.join_s) {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  row.converge_s = MonotonicSeconds() - start;
  // Each task's usual pace (and each edge's usual latency) is learned 10 s after it is first
  // seen, which is news once per task: the window starts after that wave, in the steady state.
  std::this_thread::sleep_for(std::chrono::seconds(15));
  MeasureWindow(nodes, setup.window_s, row);
  for (int c = 0; c < setup.changes; ++c) {
    row.change_ms.push_back(ChangeToEveryView(nodes, (c * 7 + 1) % n, setup.ps));
  }
  for (Node& node : nodes) node.sidecar->Signal(SIGTERM);
  const double stop0 = MonotonicSeconds();
  for (Node& node : nodes) {
    node.sidecar->Wait(std::chrono::seconds(10));
    row.stop_max_ms = std::max(row.stop_max_ms, 1000 * (MonotonicSeconds() - stop0));
  }
  unlink(path);
  return row;
}

void Simulate(int n, int trials, int retransmit_mult, int sync_every, uint64_t seed) {
  using ts::SimCluster;
  std::printf(
      "simulate: %d nodes of the real exchange protocol, 200 ms period, retransmit x%d, "
      "anti-entropy every %d periods\n",
      n, retransmit_mult, sync_every);
  ts::MembershipOptions membership;
  membership.retransmit_mult = retransmit_mult;
  SimCluster sim(n, membership, seed);
  sim.set_sync_every(sync_every);
  int steps = 0;
  while (steps < 2000) {
    sim.Step();
    ++steps;
    bool all = true;
    for (int i = 0; i < n && all; i += std::max(1, n / 50)) all = sim.Knowing(i, 1) == n;
    if (all) break;
  }
  std::printf("  every node knows every record after %d periods (%.1f s) from a cold start\n",
              steps, steps * 0.2);
  for (int i = 0; i < 100; ++i) sim.Step();
  auto totals = [&] {
    int64_t m = 0, b = 0;
    for (int i = 0; i < n; ++i) {
      m += sim.core(i).stats().messages_sent;
      b += sim.core(i).stats().bytes_sent;
    }
    return std::pair{m, b};
  };
  auto [m0, b0] = totals();
  const int quiet = 100;
  for (int i = 0; i < quiet; ++i) sim.Step();
  auto [m1, b1] = totals();
  const double seconds = quiet * 0.2;
  std::printf("  steady state: %.1f messages and %.0f bytes sent per node per second\n",
              (m1 - m0) / (n * seconds), (b1 - b0) / (n * seconds));
  std::vector<double> spread;
  auto [m2, b2] = totals();
  for (int t = 0; t < trials; ++t) {
    const int victim = (t * 131 + 5) % n;
    sim.SetState(victim, ts::TaskState::kDead);
    sim.Step();
    const uint64_t v = sim.OwnVersion(victim);
    int k = 1;
    while (sim.Knowing(victim, v) < n && k < 500) {
      sim.Step();
      ++k;
    }
    spread.push_back(k * 0.2);
    for (int i = 0; i < 30; ++i) sim.Step();
  }
  std::sort(spread.begin(), spread.end());
  std::printf("  a change reaches every node: median %.1f s, worst %.1f s (%d trials)\n",
              Median(spread), spread.back(), trials);
  const int down = n / 3;
  sim.Down(down);
  int k = 0;
  while (sim.Holding(down, ts::MemberStatus::kSilent) < n - 1 && k < 500) {
    sim.Step();
    ++k;
  }
  std::printf("  a node that goes down is held silent by all %d others after %.1f s\n", n - 1,
              k * 0.2);
  auto [m3, b3] = totals();
  const double busy_seconds = (trials * 31 + k) * 0.2;
  std::printf("  while changing: %.1f messages and %.0f bytes sent per node per second\n",
              (m3 - m2) / (n * busy_seconds), (b3 - b2) / (n * busy_seconds));
}

}  // namespace

// The real mode's table: one row per size (and key setting).
void PrintRealRows(const std::vector<RealRow>& rows) {
  std::printf("\n%6s %5s %5s %9s %12s %12s %9s %14s %14s %18s %9s %6s\n", "nodes", "key", "map",
              "joined s", "CPU% busiest", "CPU% median", "RSS MiB", "B/s sent med", "B/s sent max",
              "change->all ms", "stop ms", "edges");
  for (const RealRow& r : rows) {
    std::string changes_text;
    for (double c : r.change_ms) {
      changes_text += (changes_text.empty() ? "" : "/") + std::to_string(static_cast<int>(c));
    }
    std::printf("%6d %5s %5s %9.1f %12.2f %12.2f %9.1f %14.0f %14.0f %18s %9.0f %6d\n", r.nodes,
                r.keyed ? "on" : "off", r.map ? "on" : "off", r.converge_s, r.cpu_max, r.cpu_median,
                r.rss_max_mib, r.bytes_median, r.bytes_max, changes_text.c_str(), r.stop_max_ms,
                r.edge_series);
  }
  for (const RealRow& r : rows) {
    if (!r.joined) {
      std::printf(
          "%d nodes (key %s, map %s) never had every task up in every view: its figures "
          "are of a cluster still settling\n",
          r.nodes, r.keyed ? "on" : "off", r.map ? "on" : "off");
    }
  }
}

// A cluster key for --key on/both, in a file only this user reads.
std::string KeyFile() {
  static std::string path;
  if (path.empty()) {
    char name[] = "/tmp/trainscope-scale-key-XXXXXX";
    close(mkstemp(name));
    std::ofstream(name) << "scale-bench-cluster-key-" << getpid() << "-0123456789abcdef\n";
    path = name;
  }
  return path;
}

// On over off, for each size run both ways with only `what` differing: what signing every
// message (keyed) or the worker x ps map costs.
void PrintRatios(const std::vector<RealRow>& rows, const char* label, bool RealRow::*what) {
  const bool RealRow::*other = what == &RealRow::keyed ? &RealRow::map : &RealRow::keyed;
  for (const RealRow& off : rows) {
    for (const RealRow& on : rows) {
      if (off.*what || !(on.*what) || off.*other != on.*other || off.nodes != on.nodes ||
          off.cpu_max <= 0) {
        continue;
      }
      if (!off.joined || !on.joined) {
        std::printf("%s on / off at %d nodes: not compared, one of them never joined\n", label,
                    on.nodes);
        continue;
      }
      std::printf(
          "%s on / off at %d nodes: busiest CPU %.2f, median CPU %.2f, bytes sent "
          "%.2f\n",
          label, on.nodes, on.cpu_max / off.cpu_max,
          off.cpu_median > 0 ? on.cpu_median / off.cpu_median : 0,
          off.bytes_median > 0 ? on.bytes_median / off.bytes_median : 0);
    }
  }
}

// Every size of `nodes_list`, with the key and the map off, on or both; the table and ratios.
void RealMode(const std::string& nodes_list, const RealSetup& setup, const std::string& key,
              const std::string& map, std::mt19937& rng) {
  std::vector<RealRow> rows;
  for (absl::string_view part : absl::StrSplit(nodes_list, ',')) {
    int n = std::stoi(std::string(part));
    if (n <= setup.ps) {
      std::printf("skipped %d nodes: --ps %d leaves no worker\n", n, setup.ps);
      continue;
    }
    std::printf("running %d nodes ...\n", n);
    std::fflush(stdout);
    for (const std::string k : {"off", "on"}) {
      for (const std::string m : {"off", "on"}) {
        if ((key != "both" && key != k) || (map != "both" && map != m)) continue;
        RealSetup run = setup;
        run.key_file = k == "on" ? KeyFile() : "";
        run.map = m == "on";
        rows.push_back(RunReal(n, run, rng));
      }
    }
  }
  PrintRealRows(rows);
  PrintRatios(rows, "keyed", &RealRow::keyed);
  PrintRatios(rows, "worker x ps map", &RealRow::map);
  for (const RealRow& r : rows) {
    for (const RealRow& base : rows) {
      if (r.nodes != 40 || base.nodes == 40 || base.keyed != r.keyed || base.map != r.map ||
          base.cpu_max <= 0) {
        continue;
      }
      std::printf("busiest sidecar at 40 nodes / at %d nodes: %.2f\n", base.nodes,
                  r.cpu_max / base.cpu_max);
      break;
    }
  }
}

int main(int argc, char** argv) {
  std::string mode = "real";
  std::string nodes_list = "8,16,32,40,64";
  RealSetup setup;
  int sim_nodes = 1100;
  int sim_trials = 5;
  int sim_retransmit = ts::MembershipOptions{}.retransmit_mult;
  int sim_sync_every = 5;
  uint64_t sim_seed = 7;
  CLI::App app{"sidecar_scale_bench: the cluster view's cost per sidecar as the cluster grows"};
  app.add_option("--mode", mode, "real | simulate | all")->capture_default_str();
  app.add_option("--nodes", nodes_list, "Cluster sizes for the real mode")->capture_default_str();
  app.add_option("--window_s", setup.window_s, "Measurement window per size")
      ->capture_default_str();
  app.add_option("--changes", setup.changes, "Task deaths timed per size")->capture_default_str();
  app.add_option("--start_gap_s", setup.start_gap_s,
                 "Between two sidecars' starts (0: all at once, which starves 40 on 2 cores)")
      ->capture_default_str();
  std::string key = "on";
  app.add_option("--key", key,
                 "The exchange's cluster key: on, off, or both (with their ratios). Without a key "
                 "a sidecar opens no exchange (secure by default): off measures sidecars that "
                 "each watch their own node only")
      ->check(CLI::IsMember({"off", "on", "both"}))
      ->capture_default_str();
  std::string map = "on";
  app.add_option("--map", map,
                 "The worker x ps map (--worker_ps_map): on, off, or both (with their ratios); "
                 "its edges exist with --ps only")
      ->check(CLI::IsMember({"off", "on", "both"}))
      ->capture_default_str();
  app.add_option("--ps", setup.ps, "Nodes running a ps task; every worker calls each")
      ->capture_default_str();
  app.add_option("--join_s", setup.join_s,
                 "Longest wait for every view to have every task up (then measured anyway)")
      ->capture_default_str();
  app.add_option("--sim_nodes", sim_nodes)->capture_default_str();
  app.add_option("--sim_trials", sim_trials)->capture_default_str();
  app.add_option("--sim_retransmit", sim_retransmit, "Retransmit multiplier")
      ->capture_default_str();
  app.add_option("--sim_sync_every", sim_sync_every, "Periods between anti-entropy rounds")
      ->capture_default_str();
  app.add_option("--sim_seed", sim_seed)->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (setup.ps < 0) {
    std::fprintf(stderr, "--ps must be 0 or more\n");
    return 2;
  }
  std::mt19937 rng(static_cast<unsigned>(getpid()));
  if (mode == "real" || mode == "all") RealMode(nodes_list, setup, key, map, rng);
  if (mode == "simulate" || mode == "all")
    Simulate(sim_nodes, sim_trials, sim_retransmit, sim_sync_every, sim_seed);
  return 0;
}
