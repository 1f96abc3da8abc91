// Run(): wiring of spec, trackers, poller, peer views and the HTTP and gRPC servers.
#include "trainscope/sidecar/sidecar.h"

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdio>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "http_server.h"
#include "metrics.h"
#include "nlohmann/json.hpp"
#include "poller.h"
#include "spdlog/spdlog.h"
#include "status_page.h"
#include "trace_receiver.h"
#include "trainscope/common/cluster_spec.h"
#include "trainscope/sidecar/cluster_view.h"
#include "trainscope/sidecar/http_client.h"
#include "trainscope/sidecar/local_hosts.h"
#include "trainscope/sidecar/names.h"
#include "trainscope/sidecar/task_tracker.h"
#include "trainscope/sidecar/trace_store.h"

namespace trainscope::sidecar {
namespace {

std::atomic<bool> g_stop{false};

void OnSignal(int) { g_stop.store(true); }

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read cluster spec file ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

absl::Status Validate(const SidecarOptions& o) {
  if (o.heartbeat_interval_ms < 5 || o.heartbeat_interval_ms > 60000) {
    return absl::InvalidArgumentError("--heartbeat_interval_ms must be within 5..60000");
  }
  if (o.heartbeat_deadline_ms < 1) {
    return absl::InvalidArgumentError("--heartbeat_deadline_ms must be positive");
  }
  if (o.hung_after_ms < 1 || o.blocked_after_ms < 0 || o.stall_after_s <= 0) {
    return absl::InvalidArgumentError(
        "--hung_after_ms, --blocked_after_ms and --stall_after_s must be positive");
  }
  if (o.http_port < 0 || o.http_port > 65535 || o.grpc_port < -1 || o.grpc_port > 65535) {
    return absl::InvalidArgumentError("ports must be within 0..65535");
  }
  if (o.cluster_name.empty()) return absl::InvalidArgumentError("--cluster_name is empty");
  if (o.trace_memory_bytes < (64 << 10)) {
    return absl::InvalidArgumentError("--trace_memory_bytes must be at least 65536");
  }
  if (o.slow_window_s < 1 || o.slow_per_key < 1 || o.slow_per_key > 1000) {
    return absl::InvalidArgumentError(
        "--slow_window_s must be at least 1 and --slow_per_key within 1..1000");
  }
  if (o.otlp_max_request_bytes < 1024) {
    return absl::InvalidArgumentError("--otlp_max_request_bytes must be at least 1024");
  }
  return absl::OkStatus();
}

// Everything the HTTP handlers read; written by the poll loop and the peer thread.
struct Shared {
  absl::Mutex mu;
  std::vector<TaskView> local ABSL_GUARDED_BY(mu);
  std::vector<TaskCounters> counters ABSL_GUARDED_BY(mu);
  std::vector<PeerReport> peers ABSL_GUARDED_BY(mu);
  SidecarStats stats ABSL_GUARDED_BY(mu);
};

std::string SdJson(const std::vector<TaskView>& views) {
  nlohmann::json out = nlohmann::json::array();
  for (const TaskView& v : views) {
    if (v.metrics_address.empty()) continue;
    out.push_back({{"targets", {v.metrics_address}},
                   {"labels",
                    {{std::string(names::kLabelCluster), v.cluster},
                     {std::string(names::kLabelRole), v.task.role},
                     {std::string(names::kLabelTask), std::to_string(v.task.index)}}}});
  }
  return out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// The value of `name` in a query string ("a=1&b=x%2Fy"), percent-decoded; "" when absent.
std::string QueryParam(const std::string& query, std::string_view name) {
  for (absl::string_view part : absl::StrSplit(query, '&')) {
    size_t eq = part.find('=');
    if (eq == absl::string_view::npos ||
        part.substr(0, eq) != absl::string_view(name.data(), name.size())) {
      continue;
    }
    std::string out;
    absl::string_view v = part.substr(eq + 1);
    for (size_t i = 0; i < v.size() && out.size() < 512; ++i) {
      if (v[i] == '+') {
        out.push_back(' ');
      } else if (v[i] == '%' && i + 2 < v.size() &&
                 std::isxdigit(static_cast<unsigned char>(v[i + 1])) &&
                 std::isxdigit(static_cast<unsigned char>(v[i + 2]))) {
        out.push_back(static_cast<char>(std::stoi(std::string(v.substr(i + 1, 2)), nullptr, 16)));
        i += 2;
      } else {
        out.push_back(v[i]);
      }
    }
    return out;
  }
  return "";
}

RequestFilter FilterFrom(const std::string& query) {
  RequestFilter f;
  f.method = QueryParam(query, "method");
  f.ps = QueryParam(query, "ps");
  int limit = 0;
  if (absl::SimpleAtoi(QueryParam(query, "limit"), &limit) && limit > 0) {
    f.limit = static_cast<size_t>(std::min(limit, 1000));
  }
  return f;
}

bool IsTraceId(absl::string_view id) {
  return id.size() == 32 && std::all_of(id.begin(), id.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

}  // namespace

void RequestStop() { g_stop.store(true); }

absl::Status Run(const SidecarOptions& o) {
  if (absl::Status s = Validate(o); !s.ok()) return s;
  // gRPC's mutexes are absl::Mutex; Debian's abseil keeps its deadlock detection on (a graph of
  // every lock order, updated on each lock): ~10% of the sidecar's CPU while polling.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  std::string spec_text;
  std::string spec_origin;
  if (!o.cluster_spec_file.empty()) {
    auto text = ReadFile(o.cluster_spec_file);
    if (!text.ok()) return text.status();
    spec_text = *text;
    spec_origin = o.cluster_spec_file;
  } else if (!o.tf_config.empty()) {
    spec_text = o.tf_config;
    spec_origin = "TF_CONFIG";
  } else {
    return absl::InvalidArgumentError(
        "no cluster spec: set TF_CONFIG or pass --cluster_spec FILE (TF_CONFIG JSON)");
  }
  auto config = ParseTfConfig(spec_text, /*require_task=*/false);
  if (!config.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(spec_origin, ": ", config.status().message()));
  }
  const ClusterSpec* spec = &config->cluster;
  LocalHosts hosts;
  std::vector<TaskRef> tasks;
  std::set<std::string> remote_hosts;
  for (const TaskRef& t : spec->AllTasks()) {
    auto hp = ParseHostPort(*spec->FindAddress(t));
    bool local = hp.ok() && hosts.IsLocal(hp->host);
    if (!local && hp.ok()) remote_hosts.insert(hp->host);
    if (o.local_tasks.empty() && local) tasks.push_back(t);
  }
  if (!o.local_tasks.empty()) {
    auto list = ParseTaskList(o.local_tasks, *spec);
    if (!list.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--local_tasks: ", list.status().message()));
    }
    tasks = *list;
  }
  std::vector<std::string> peer_sidecars;
  if (o.peer_sidecars == "none") {
  } else if (!o.peer_sidecars.empty()) {
    for (absl::string_view part : absl::StrSplit(o.peer_sidecars, ',', absl::SkipWhitespace())) {
      std::string p(part);
      if (!ParseHostPort(p).ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("--peer_sidecars: \"", p, "\" is not host:port"));
      }
      peer_sidecars.emplace_back(p);
    }
  } else {
    for (const std::string& h : remote_hosts) {
      peer_sidecars.push_back(absl::StrCat(h, ":", o.http_port == 0 ? 9400 : o.http_port));
    }
  }

  if (o.check_config) {
    std::vector<std::string> names;
    for (const TaskRef& t : tasks) names.push_back(t.ShortName());
    std::printf("cluster spec from %s is valid: %zu tasks; this node watches %s; peers: %s\n",
                spec_origin.c_str(), spec->AllTasks().size(),
                names.empty() ? "none" : absl::StrJoin(names, ", ").c_str(),
                peer_sidecars.empty() ? "none" : absl::StrJoin(peer_sidecars, ", ").c_str());
    return absl::OkStatus();
  }

  TrackerOptions topts;
  topts.interval_s = o.heartbeat_interval_ms / 1000.0;
  topts.hung_after_s = o.hung_after_ms / 1000.0;
  topts.blocked_after_s = o.blocked_after_ms / 1000.0;
  topts.stall_after_s = o.stall_after_s;
  topts.relearn_s = std::max(1.0, 10 * topts.interval_s);
  topts.min_stddev_s = std::max(0.05, topts.interval_s / 2);

  double start_s = MonotonicSeconds();
  double start_unix = UnixSeconds();
  std::vector<TaskTracker> trackers;
  std::vector<HeartbeatPoller::Target> targets;
  for (const TaskRef& t : tasks) {
    std::string address = *spec->FindAddress(t);
    auto hp = ParseHostPort(address);
    bool local = hp.ok() && hosts.IsLocal(hp->host);
    trackers.emplace_back(o.cluster_name, t, address, local, hosts.hostname(), topts, start_s,
                          start_unix);
    targets.push_back({address, local});
  }

  Shared shared;
  {
    absl::MutexLock lock(&shared.mu);
    for (auto& t : trackers) {
      shared.local.push_back(t.view());
      shared.counters.push_back(t.counters());
    }
    shared.stats.peers = static_cast<int>(peer_sidecars.size());
  }

  const std::string cluster = o.cluster_name;
  const ClusterSpec cluster_spec = *spec;
  auto cluster_view = [&](bool local_only) {
    std::vector<TaskView> views;
    std::vector<TaskView> merged;
    {
      absl::MutexLock lock(&shared.mu);
      merged = MergeViews(cluster, cluster_spec, shared.local, shared.peers, UnixSeconds());
      if (local_only) views = shared.local;
    }
    AnnotateBlocked(merged, cluster_spec);
    if (local_only) {
      // Blocked reasons still use the whole cluster's knowledge.
      std::map<TaskRef, std::string> reasons;
      for (const TaskView& m : merged) reasons[m.task] = m.reason;
      for (TaskView& v : views) {
        if (v.state == TaskState::kBlocked) v.reason = reasons[v.task];
      }
      SortForPeople(views);
      return views;
    }
    MarkPartitions(merged, UnixSeconds());
    SortForPeople(merged);
    return merged;
  };

  TraceStoreOptions trace_options;
  trace_options.memory_bytes = o.trace_memory_bytes;
  trace_options.slow_window_s = o.slow_window_s;
  trace_options.slow_per_key = o.slow_per_key;
  TraceStore trace_store(trace_options);
  std::unique_ptr<OtlpForwarder> forwarder;
  if (!o.otlp_upstream.empty()) {
    auto f = OtlpForwarder::Create(o.otlp_upstream, o.otlp_queue_bytes);
    if (!f.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--otlp_upstream: ", f.status().message()));
    }
    forwarder = std::move(*f);
  }
  TraceReceiver trace_receiver(&trace_store, forwarder.get());
  auto trace_stats = [&](SidecarStats& stats) {
    TraceReceiver::Stats r = trace_receiver.stats();
    TraceStoreStats t = trace_store.stats();
    stats.spans_received = r.spans_received;
    stats.dropped_invalid = r.spans_invalid;
    stats.spans_kept = t.spans_kept;
    stats.bytes_kept = t.bytes_kept;
    stats.dropped_evicted = t.dropped_evicted;
    stats.dropped_trace_full = t.dropped_trace_full;
    stats.dropped_duplicate = t.dropped_duplicate;
    if (forwarder) {
      OtlpForwarder::Stats f = forwarder->stats();
      stats.forwarding = true;
      stats.forwarded_spans = f.forwarded_spans;
      stats.forward_dropped_spans = f.dropped_spans;
      stats.forward_failures = f.failures;
    }
  };
  const std::map<std::string, double> slow_extra = {
      {"window_s", o.slow_window_s}, {"per_key", static_cast<double>(o.slow_per_key)}};

  auto handler = [&](const HttpServer::Request& req) -> HttpServer::Response {
    bool local_only = absl::StrContains(req.query, "local=1");
    if (req.path == names::kPathMetrics) {
      std::vector<TaskView> views;
      std::vector<TaskCounters> counters;
      SidecarStats stats;
      {
        absl::MutexLock lock(&shared.mu);
        views = shared.local;
        counters = shared.counters;
        stats = shared.stats;
      }
      trace_stats(stats);
      return {200, "text/plain; version=0.0.4; charset=utf-8",
              RenderMetrics(views, counters, stats, cluster_view(false))};
    }
    if (req.path == names::kPathTasks) {
      return {200, "application/json", TaskViewsToJson(cluster, cluster_view(local_only))};
    }
    if (req.path == names::kPathSd) {
      return {200, "application/json", SdJson(cluster_view(local_only))};
    }
    if (req.path == names::kPathTracesSlow) {
      return {
          200, "application/json",
          RequestsToJson(trace_store.Slow(FilterFrom(req.query), MonotonicSeconds()), slow_extra)};
    }
    if (req.path == names::kPathTracesErrors) {
      return {200, "application/json",
              RequestsToJson(trace_store.Errors(FilterFrom(req.query), MonotonicSeconds()))};
    }
    if (req.path.rfind(names::kPathTracesPrefix, 0) == 0) {
      std::string id = absl::AsciiStrToLower(req.path.substr(names::kPathTracesPrefix.size()));
      if (!IsTraceId(id)) {
        return {400, "text/plain; charset=utf-8",
                "a trace id is 32 hex digits: /api/v1/traces/<trace id>\n"};
      }
      auto detail = trace_store.Trace(id, MonotonicSeconds());
      if (!detail) {
        return {404, "text/plain; charset=utf-8",
                absl::StrCat("trace ", id,
                             " is not kept here (neither slow nor failed, or "
                             "already forgotten)\n")};
      }
      return {200, "application/json", TraceDetailToJson(*detail)};
    }
    if (req.path == names::kPathHealthz) return {200, "text/plain; charset=utf-8", "ok\n"};
    if (req.path == names::kPathStatusPage || req.path == "/index.html") {
      return {200, "text/html; charset=utf-8", std::string(StatusPageHtml())};
    }
    return {404, "text/plain; charset=utf-8", "not found\n"};
  };

  auto http = HttpServer::Start(o.http_address, o.http_port, handler);
  if (!http.ok()) return http.status();

  std::unique_ptr<grpc::Server> grpc_server;
  std::unique_ptr<grpc::ServerCompletionQueue> idle_cq;
  std::thread idle_cq_thread;
  int grpc_port = -1;
  if (o.grpc_port >= 0) {
    grpc::EnableDefaultHealthCheckService(true);
    grpc::ServerBuilder builder;
    builder.AddListeningPort(absl::StrCat(o.http_address, ":", o.grpc_port),
                             grpc::InsecureServerCredentials(), &grpc_port);
    builder.SetMaxReceiveMessageSize(o.otlp_max_request_bytes);
    builder.RegisterService(&trace_receiver);
    for (grpc::Service* s : o.extra_grpc_services) builder.RegisterService(s);
    // A completion queue the health service's async machinery may use; a thread drains it.
    idle_cq = builder.AddCompletionQueue();
    builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::NUM_CQS, 1);
    builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::MIN_POLLERS, 1);
    builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::MAX_POLLERS, 2);
    grpc_server = builder.BuildAndStart();
    if (!grpc_server || grpc_port == 0) {
      idle_cq->Shutdown();
      void* tag = nullptr;
      bool ok = false;
      while (idle_cq->Next(&tag, &ok)) {
      }
      return absl::UnavailableError(absl::StrCat("cannot serve gRPC on ", o.http_address, ":",
                                                 o.grpc_port,
                                                 " (port in use? pick another --grpc_port)"));
    }
    grpc_server->GetHealthCheckService()->SetServingStatus(true);
    idle_cq_thread = std::thread([cq = idle_cq.get()] {
      void* tag = nullptr;
      bool ok = false;
      while (cq->Next(&tag, &ok)) {
      }
    });
  }

  std::vector<std::string> watched;
  for (size_t i = 0; i < tasks.size(); ++i) {
    watched.push_back(absl::StrCat(tasks[i].ShortName(), "@", targets[i].address));
  }
  spdlog::info("trainscope-sidecar: cluster {}; watching {} task(s): {}; peers: {}", cluster,
               tasks.size(), absl::StrJoin(watched, ", "),
               peer_sidecars.empty() ? "none" : absl::StrJoin(peer_sidecars, ", "));
  spdlog::info("trainscope-sidecar: http on {}:{}, grpc on {}", o.http_address, (*http)->port(),
               grpc_port >= 0 ? absl::StrCat(o.http_address, ":", grpc_port) : "off");
  if (grpc_port >= 0) {
    spdlog::info(
        "trainscope-sidecar: OTLP traces on {}:{}; slow window {} s, {} per (method, ps); "
        "memory {} KiB; upstream {}",
        o.http_address, grpc_port, o.slow_window_s, o.slow_per_key, o.trace_memory_bytes >> 10,
        forwarder ? forwarder->target() : "none");
  }

  g_stop.store(false);
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);

  // Peer sidecars: their views of their own tasks, about once per peer_poll_ms.
  std::thread peer_thread([&] {
    std::map<std::string, std::string> last_error;
    while (!g_stop.load()) {
      std::vector<PeerReport> reports;
      int64_t errors = 0;
      for (const std::string& peer : peer_sidecars) {
        PeerReport r;
        r.sidecar = peer;
        auto resp = HttpGet(peer, std::string(names::kPathTasks) + "?local=1", 1000);
        if (!resp.ok()) {
          r.error = std::string(resp.status().message());
        } else if (resp->status != 200) {
          r.error = absl::StrCat("HTTP ", resp->status);
        } else {
          int skipped = 0;
          auto views = ParseTaskViewsJson(resp->body, &skipped);
          if (!views.ok()) {
            r.error = absl::StrCat("sent nonsense: ", views.status().message());
          } else {
            r.ok = true;
            r.views = std::move(*views);
            if (skipped > 0) r.error = absl::StrCat(skipped, " malformed task(s) skipped");
          }
        }
        if (!r.ok || !r.error.empty()) ++errors;
        if (r.error != last_error[peer]) {
          if (!r.error.empty()) spdlog::warn("peer sidecar {}: {}", peer, r.error);
          last_error[peer] = r.error;
        }
        reports.push_back(std::move(r));
      }
      {
        absl::MutexLock lock(&shared.mu);
        shared.peers = std::move(reports);
        shared.stats.peer_errors += errors;
      }
      for (int waited = 0; waited < o.peer_poll_ms && !g_stop.load(); waited += 50) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    }
  });

  // The poll loop.
  HeartbeatPoller poller(targets, o.heartbeat_deadline_ms,
                         absl::StrCat("trainscope-sidecar@", hosts.hostname()));
  const double interval = topts.interval_s;
  const double pause_threshold = std::max(1.0, 10 * interval);
  // Adaptive polling: a task that is up, regular and checkable in /proc is asked only every
  // `relax_ticks`-th tick; on the ticks between, /proc/<pid>/stat (a few microseconds, against
  // ~100 us of CPU for a heartbeat round trip) tells gone, zombie and stopped, and any of those,
  // a failure, a late or slow answer, waiting, done, ... puts it back to every tick at once. The
  // relaxed gap stays <= 250 ms: the runtime answers for 300 ms after it reaches phase done, and
  // the sidecar must see that phase before the process goes (done, not dead).
  const int relax_ticks = std::max(1, static_cast<int>(0.25 / interval + 1e-9));
  uint64_t tick_no = 0;
  double next_tick = MonotonicSeconds();
  std::vector<TaskView> views(trackers.size());
  std::vector<TaskCounters> counters(trackers.size());
  while (!g_stop.load()) {
    bool failed = false;
    poller.Wait(next_tick, [&](size_t i, const PollResult& r) {
      trackers[i].OnResult(r);
      failed |= !r.ok;
    });
    double now = MonotonicSeconds();
    // A failed poll may be decisive (connection refused, process gone): judge it now rather
    // than at the next tick.
    if (now < next_tick && !failed) continue;
    bool tick = now >= next_tick;
    bool paused = tick && now - next_tick > pause_threshold;
    if (paused) {
      spdlog::warn("the sidecar itself was paused for {:.1f} s; re-learning before judging tasks",
                   now - next_tick);
      for (auto& t : trackers) t.OnSidecarPause(now);
    }
    if (tick) {
      ++tick_no;
      for (size_t i = 0; i < trackers.size(); ++i) {
        if (poller.InFlight(i)) continue;
        if (relax_ticks > 1 && (tick_no + i) % relax_ticks != 0 &&
            trackers[i].MaySkipPoll(now, ReadProcStat)) {
          trackers[i].OnPollSkipped();
          continue;
        }
        poller.Poll(i, now);
      }
    }
    double unix_now = UnixSeconds();
    for (size_t i = 0; i < trackers.size(); ++i) {
      views[i] = trackers[i].Evaluate(now, unix_now, ReadProcStat);
      counters[i] = trackers[i].counters();
      for (const std::string& e : trackers[i].TakeEvents()) spdlog::info("{}", e);
    }
    for (size_t i = 0; i < views.size(); ++i) {
      if (views[i].state != TaskState::kUp) continue;
      std::string straggler = StragglerReason(views[i], views, topts);
      if (!straggler.empty()) {
        views[i].state = TaskState::kSlow;
        views[i].reason = straggler;
      }
    }
    {
      absl::MutexLock lock(&shared.mu);
      shared.local = views;
      shared.counters = counters;
      if (paused) shared.stats.pauses++;
    }
    if (tick) {
      next_tick += interval;
      if (next_tick < now) next_tick = now + interval;
    }
  }
  spdlog::info("trainscope-sidecar: stopping");
  poller.Shutdown();
  peer_thread.join();
  if (grpc_server) {
    grpc_server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
    idle_cq->Shutdown();
    idle_cq_thread.join();
  }
  return absl::OkStatus();
}

}  // namespace trainscope::sidecar
