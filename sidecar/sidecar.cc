// The sidecar composed of its parts; see sidecar.h.
#include "trainscope/sidecar/sidecar.h"

#include <algorithm>
#include <atomic>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "absl/algorithm/container.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "spdlog/spdlog.h"
#include "trainscope/common/clock.h"
#include "trainscope/common/cluster_spec.h"
#include "trainscope/common/grpc_channel.h"
#include "trainscope/common/grpc_tls.h"
#include "trainscope/common/http_server.h"
#include "trainscope/common/http_tls.h"
#include "trainscope/common/resolve.h"
#include "trainscope/common/tf_config_env.h"
#include "trainscope/sidecar/alert_notifier.h"
#include "trainscope/sidecar/api_auth.h"
#include "trainscope/sidecar/api_routes.h"
#include "trainscope/sidecar/cluster_view.h"
#include "trainscope/sidecar/detect_metrics.h"
#include "trainscope/sidecar/gossip_metrics.h"
#include "trainscope/sidecar/hook_reports.h"
#include "trainscope/sidecar/http_routes.h"
#include "trainscope/sidecar/local_hosts.h"
#include "trainscope/sidecar/metrics.h"
#include "trainscope/sidecar/names.h"
#include "trainscope/sidecar/node_load_watch.h"
#include "trainscope/sidecar/peer_exchange.h"
#include "trainscope/sidecar/picture.h"
#include "trainscope/sidecar/stack_keeper.h"
#include "trainscope/sidecar/state_store.h"
#include "trainscope/sidecar/store_writer.h"
#include "trainscope/sidecar/stuck_explain.h"
#include "trainscope/sidecar/task_watcher.h"
#include "trainscope/sidecar/trace_metrics.h"
#include "trainscope/sidecar/trace_receiver.h"
#include "trainscope/sidecar/trace_store.h"
#include "trainscope/telemetry/metrics.h"

namespace trainscope::sidecar {
namespace {

// What the capture helper checks a local task's process against: its pid and start time, and
// the socket it listens on (the spec's host and port, never one the task names), as the poller
// verified it (poller.cc, IdentityCache).
CaptureTarget CaptureTargetOf(const TaskView& v) {
  CaptureTarget t;
  t.pid = v.pid;
  t.start_ticks = v.pid_start_ticks;
  auto spec = ParseHostPort(v.address);
  t.host = spec.ok() ? spec->host : "";
  t.port = spec.ok() ? spec->port : 0;
  return t;
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read cluster spec file ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

AlertmanagerAuth AlertmanagerAuthOf(const SidecarOptions& o) {
  return {o.alertmanager_basic_auth_file, o.alertmanager_bearer_token_file, o.alertmanager_headers};
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
  if (o.gossip_interval_ms < 20 || o.gossip_interval_ms > 10000 || o.sync_interval_s < 0.1) {
    return absl::InvalidArgumentError(
        "--gossip_interval_ms must be within 20..10000 and --sync_interval_s at least 0.1");
  }
  if (o.cluster_name.empty()) return absl::InvalidArgumentError("--cluster_name is empty");
  // The files themselves are read again when the credentials are made; here for --check_config.
  if (absl::Status st = CheckTlsFiles(o.tls, /*server=*/o.grpc_port >= 0); !st.ok()) return st;
  if (auto auth = ApiAuth::Create({o.api_token_file}); !auth.ok()) return auth.status();
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
  if (o.snapshots_per_task < 1 || o.snapshots_per_task > 100 || o.snapshot_memory_bytes < 0 ||
      !(o.snapshot_blocked_after_s >= 0) || o.snapshot_fetch_max_bytes < 256) {
    return absl::InvalidArgumentError(
        "--snapshots_per_task must be within 1..100, --snapshot_memory_bytes and "
        "--snapshot_blocked_after_s not negative, --snapshot_fetch_max_bytes at least 256");
  }
  if (o.alert_resend_interval_s < 1 || o.alert_resend_interval_s > 3600) {
    return absl::InvalidArgumentError("--alert_resend_interval_s must be within 1..3600");
  }
  if (auto headers = AlertmanagerHeaders(AlertmanagerAuthOf(o)); !headers.ok()) {
    return headers.status();
  }
  return AlertNotifier::ParseUrls(o.alertmanager_urls).status();
}

bool IsWildcard(const std::string& host) {
  return host == "0.0.0.0" || host == "::" || host.empty();
}

// What the options and the spec say this node is: its tasks, its id, its peers.
struct Plan {
  TfConfig config;
  std::string spec_origin;
  std::vector<WatchedTask> tasks;
  std::string self;
  std::string hostname;
  std::vector<std::string> peers;
  bool exchange = false;
  std::map<std::string, std::string> node_of_host;  // Spec host -> the node id expected there.
  // Each task of the spec -> the node id expected to watch it (this node's where none is known).
  std::shared_ptr<const std::map<TaskRef, std::string>> expected_nodes;
  std::vector<std::string> bind;  // Addresses HTTP and gRPC listen on.
  SpanSenders span_senders;       // Who may send spans besides loopback (TraceReceiver).
  // Why there is no exchange though the spec has other nodes: no cluster key, no mutual TLS.
  std::string exchange_closed;
};

// Where HTTP and gRPC listen: --http_address when given, else those addresses of this node's
// tasks that are this machine's (not a pod's own) and loopback (DefaultBindAddresses), not every
// interface.
std::vector<std::string> BindAddresses(const SidecarOptions& o,
                                       const std::vector<WatchedTask>& tasks,
                                       const LocalHosts& machine) {
  if (!o.http_address.empty()) return {o.http_address};
  std::vector<std::string> hosts;
  for (const WatchedTask& t : tasks) {
    auto hp = ParseHostPort(t.address);
    if (t.local && hp.ok() && machine.IsLocal(hp->host)) hosts.push_back(hp->host);
  }
  return DefaultBindAddresses(hosts);
}

// Port 0 (any free port) on several addresses would be several ports: only the first then.
std::vector<std::string> ForPort(const std::vector<std::string>& bind, int port) {
  return port == 0 ? std::vector<std::string>{bind.front()} : bind;
}

absl::Status PlanPeers(const SidecarOptions& o, const std::set<std::string>& remote_hosts,
                       Plan& plan) {
  if (o.peer_sidecars == "none" || o.grpc_port < 0) return absl::OkStatus();
  if (!o.peer_sidecars.empty()) {
    for (absl::string_view part : absl::StrSplit(o.peer_sidecars, ',', absl::SkipWhitespace())) {
      std::string p(absl::StripAsciiWhitespace(part));
      auto hp = ParseHostPort(p);
      if (!hp.ok()) {
        return absl::InvalidArgumentError(absl::StrCat("--peer_sidecars: ", hp.status().message()));
      }
      if (p != plan.self) plan.peers.push_back(p);
      plan.node_of_host[hp->host] = p;
    }
  } else {
    for (const std::string& h : remote_hosts) {
      std::string id = JoinHostPort(h, o.grpc_port);
      plan.peers.push_back(id);
      plan.node_of_host[h] = id;
    }
  }
  plan.exchange = true;
  const bool keyed = !o.exchange_key_files.empty() || !o.exchange_keys.empty();
  const bool mutual_tls = !o.tls.cert_file.empty() && !o.tls.ca_file.empty();
  if (!plan.peers.empty() && !keyed && !mutual_tls) {
    // Secure by default: an exchange nobody authenticates would let anyone who reaches the
    // gRPC port speak for any node. This node then watches its own tasks only, and says so.
    plan.exchange = false;
    plan.exchange_closed =
        "no cluster key (--exchange_key_file, or the credential exchange.key) and no mutual TLS";
    return absl::OkStatus();
  }
  if (o.grpc_port == 0 && !plan.peers.empty()) {
    return absl::InvalidArgumentError(
        "--grpc_port 0 (any free port) cannot be told to peer sidecars: give a port");
  }
  return absl::OkStatus();
}

// The tasks --black_box_tasks names, comma-separated: "worker:*" (every task of a role in the
// spec) or "ps:1".
absl::StatusOr<std::vector<TaskRef>> ParseBlackBoxTasks(const std::string& list,
                                                        const ClusterSpec& spec) {
  std::vector<TaskRef> out;
  std::vector<std::string> exact;
  for (absl::string_view item : absl::StrSplit(list, ',', absl::SkipWhitespace())) {
    item = absl::StripAsciiWhitespace(item);
    if (!absl::EndsWith(item, ":*")) {
      exact.emplace_back(item);
      continue;
    }
    const absl::string_view role = item.substr(0, item.size() - 2);
    const size_t before = out.size();
    for (const TaskRef& t : spec.AllTasks()) {
      if (t.role == role) out.push_back(t);
    }
    if (out.size() == before) {
      return absl::InvalidArgumentError(
          absl::StrCat("no tasks of role \"", role, "\" in the cluster spec (", item, ")"));
    }
  }
  if (exact.empty()) return out;
  auto listed = ParseTaskList(absl::StrJoin(exact, ","), spec);
  if (!listed.ok()) return listed.status();
  out.insert(out.end(), listed->begin(), listed->end());
  return out;
}

// The cluster spec the options point at (--cluster_spec or TF_CONFIG), parsed into
// plan.config; plan.spec_origin says where it came from.
absl::Status PlanSpec(const SidecarOptions& o, Plan& plan) {
  std::string text;
  if (!o.cluster_spec_file.empty()) {
    auto read = ReadFile(o.cluster_spec_file);
    if (!read.ok()) return read.status();
    text = *read;
    plan.spec_origin = o.cluster_spec_file;
  } else if (!o.tf_config.empty()) {
    text = o.tf_config;
    plan.spec_origin = "TF_CONFIG";
  } else if (auto found = FindTfConfigInProcesses(); found.ok()) {
    // A TFJob pod: the operator set TF_CONFIG in the tensorflow container only.
    text = std::move(found->text);
    plan.spec_origin = absl::StrCat("TF_CONFIG of pid ", found->pid, " (", found->command, ")");
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "no cluster spec: set TF_CONFIG or pass --cluster_spec FILE (TF_CONFIG JSON), or run "
        "beside the job's processes in one process namespace (a TFJob pod with "
        "shareProcessNamespace: true); ",
        found.status().message()));
  }
  auto config = ParseTfConfig(text, /*require_task=*/false);
  if (!config.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(plan.spec_origin, ": ", config.status().message()));
  }
  plan.config = *std::move(config);
  return absl::OkStatus();
}

// What the spec's addresses say of this machine: the tasks on it, the other hosts, and the
// first of its own hosts the spec names.
struct SpecHosts {
  std::vector<TaskRef> local_tasks;
  std::set<std::string> remote_hosts;
  std::string first_local_host;
};
SpecHosts ScanSpecHosts(const ClusterSpec& spec, const LocalHosts& hosts) {
  SpecHosts out;
  for (const TaskRef& t : spec.AllTasks()) {
    auto hp = ParseHostPort(*spec.FindAddress(t));
    bool local = hp.ok() && hosts.IsLocal(hp->host);
    if (!local && hp.ok()) out.remote_hosts.insert(hp->host);
    if (local && out.first_local_host.empty()) out.first_local_host = hp->host;
    if (local) out.local_tasks.push_back(t);
  }
  return out;
}

// The tasks this node watches (--local_tasks, else `chosen`: those on this machine), each marked
// local and black-box as the options say, into plan.tasks.
absl::Status PlanTasks(const SidecarOptions& o, const LocalHosts& hosts,
                       std::vector<TaskRef> chosen, Plan& plan) {
  const ClusterSpec& spec = plan.config.cluster;
  if (!o.local_tasks.empty()) {
    auto list = ParseTaskList(o.local_tasks, spec);
    if (!list.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--local_tasks: ", list.status().message()));
    }
    chosen = *list;
  }
  auto black_box = ParseBlackBoxTasks(o.black_box_tasks, spec);
  if (!black_box.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--black_box_tasks: ", black_box.status().message()));
  }
  for (const TaskRef& t : chosen) {
    const std::string& address = *spec.FindAddress(t);
    auto hp = ParseHostPort(address);
    const bool outside = std::find(black_box->begin(), black_box->end(), t) != black_box->end();
    // A task named in --local_tasks runs on this node even when its address is not one of the
    // node's (a pod's own IP): its process is found by identity, not by address.
    const bool local = !o.local_tasks.empty() || (hp.ok() && hosts.IsLocal(hp->host));
    plan.tasks.push_back({t, address, local, outside});
  }
  return absl::OkStatus();
}

// This node's id for its peers, into plan.self: --advertise_address, else the bound HTTP
// address or the first local host of the spec (or the hostname) with the gRPC port.
absl::Status PlanSelf(const SidecarOptions& o, bool bound, const std::string& first_local_host,
                      Plan& plan) {
  if (!o.advertise_address.empty()) {
    if (auto hp = ParseHostPort(o.advertise_address); !hp.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--advertise_address: ", hp.status().message()));
    }
    plan.self = o.advertise_address;
  } else {
    std::string host = bound ? o.http_address : first_local_host;
    if (host.empty()) host = plan.hostname;
    plan.self = JoinHostPort(host, std::max(0, o.grpc_port));
  }
  return absl::OkStatus();
}

std::shared_ptr<const std::map<TaskRef, std::string>> ExpectedNodes(const Plan& plan) {
  auto nodes = std::make_shared<std::map<TaskRef, std::string>>();
  for (const TaskRef& t : plan.config.cluster.AllTasks()) {
    auto hp = ParseHostPort(*plan.config.cluster.FindAddress(t));
    if (!hp.ok()) continue;
    auto it = plan.node_of_host.find(hp->host);
    (*nodes)[t] = it == plan.node_of_host.end() ? plan.self : it->second;
  }
  return nodes;
}

// This node as a sender of spans: its interfaces' addresses, where it listens, and the
// addresses of its own tasks' hosts.
SpanSenders SpanSendersOf(const Plan& plan) {
  SpanSenders senders;
  auto add = [&senders](const std::string& a) {
    if (!a.empty() && a != "0.0.0.0" && a != "::" &&
        std::find(senders.addresses.begin(), senders.addresses.end(), a) ==
            senders.addresses.end()) {
      senders.addresses.push_back(a);
    }
  };
  const LocalHosts machine;
  for (const std::string& a : machine.addresses()) add(a);
  for (const std::string& a : plan.bind) add(a);
  for (const WatchedTask& t : plan.tasks) {
    auto hp = ParseHostPort(t.address);
    if (t.local && hp.ok()) add(NumericAddress(hp->host));
  }
  return senders;
}

absl::StatusOr<Plan> MakePlan(const SidecarOptions& o) {
  if (absl::Status s = Validate(o); !s.ok()) return s;
  Plan plan;
  if (absl::Status s = PlanSpec(o, plan); !s.ok()) return s;
  const bool bound = !IsWildcard(o.http_address);
  LocalHosts hosts = bound ? LocalHosts::Bound(o.http_address) : LocalHosts();
  plan.hostname = LocalHosts().hostname();
  SpecHosts scan = ScanSpecHosts(plan.config.cluster, hosts);
  if (absl::Status s = PlanTasks(o, hosts, std::move(scan.local_tasks), plan); !s.ok()) return s;
  plan.bind = BindAddresses(o, plan.tasks, hosts);
  plan.span_senders = SpanSendersOf(plan);
  if (absl::Status s = PlanSelf(o, bound, scan.first_local_host, plan); !s.ok()) return s;
  if (absl::Status s = PlanPeers(o, scan.remote_hosts, plan); !s.ok()) return s;
  plan.expected_nodes = ExpectedNodes(plan);
  return plan;
}

std::string Summary(const Plan& plan, const SidecarOptions& o) {
  const std::vector<std::string> alertmanagers =
      AlertNotifier::ParseUrls(o.alertmanager_urls).value_or(std::vector<std::string>{});
  std::vector<std::string> watched;
  for (const WatchedTask& t : plan.tasks) {
    watched.push_back(absl::StrCat(t.task.ShortName(), "@", t.address));
  }
  return absl::StrCat(
      "cluster spec from ", plan.spec_origin, " is valid: ", plan.config.cluster.AllTasks().size(),
      " tasks; cluster ", o.cluster_name, "; this node ", plan.exchange ? plan.self : plan.hostname,
      " watches ", watched.empty() ? "none" : absl::StrJoin(watched, ", "),
      "; peers: ", plan.peers.empty() ? "none" : absl::StrJoin(plan.peers, ", "),
      plan.exchange_closed.empty() ? ""
                                   : absl::StrCat(" (EXCHANGE CLOSED: ", plan.exchange_closed, ")"),
      "; alerts to: ", alertmanagers.empty() ? "none" : absl::StrJoin(alertmanagers, ", "),
      "; listens on ", absl::StrJoin(plan.bind, ", "));
}

}  // namespace

absl::StatusOr<std::string> CheckConfig(const SidecarOptions& options) {
  auto plan = MakePlan(options);
  if (!plan.ok()) return plan.status();
  return Summary(*plan, options);
}

class Sidecar::Impl {
 public:
  Impl(SidecarOptions options, Plan plan)
      : options_(std::move(options)),
        plan_(std::move(plan)),
        summary_(Summary(plan_, options_)),
        trace_store_(TraceOptions()) {}

  ~Impl() { Stop(); }

  absl::Status Build() {
    if (absl::Status s = SetUpTls(); !s.ok()) return s;
    auto auth = ApiAuth::Create({options_.api_token_file});
    if (!auth.ok()) return auth.status();
    auth_ = std::move(*auth);
    BuildWatcher();
    if (plan_.exchange) {
      if (absl::Status s = MakeExchange(); !s.ok()) return s;
    } else if (!plan_.exchange_closed.empty()) {
      spdlog::error(
          "trainscope-sidecar: THE EXCHANGE WITH THE OTHER NODES' SIDECARS IS CLOSED: {}. This "
          "sidecar watches only this node's tasks; the others show as not watched here. Give "
          "every sidecar the same cluster key: umask 077; openssl rand -base64 32 > "
          "/etc/trainscope/credentials/exchange.key, copied to every node (the unit loads it), "
          "or --exchange_key_file FILE (docs/security.md)",
          plan_.exchange_closed);
    }
    if (!options_.otlp_upstream.empty()) {
      auto f = OtlpForwarder::Create(options_.otlp_upstream, options_.otlp_queue_bytes);
      if (!f.ok()) {
        return absl::InvalidArgumentError(absl::StrCat("--otlp_upstream: ", f.status().message()));
      }
      forwarder_ = std::move(*f);
    }
    trace_receiver_ =
        std::make_unique<TraceReceiver>(&trace_store_, forwarder_.get(), plan_.span_senders);
    BuildKeeper();
    if (absl::Status s = BuildIncidents(); !s.ok()) return s;
    AddRoutes();
    if (absl::Status s = StartHttp(); !s.ok()) return s;
    if (absl::Status s = StartGrpc(); !s.ok()) return s;
    BuildNotifier();
    return absl::OkStatus();
  }

  void Start() {
    spdlog::info("trainscope-sidecar: {}", summary_);
    spdlog::info("trainscope-sidecar: {} on {} port {}, grpc on port {}",
                 http_tls_ ? "https" : "http", absl::StrJoin(plan_.bind, ", "), http_->port(),
                 grpc_port_ >= 0 ? std::to_string(grpc_port_) : "off");
    watcher_->Start();
    keeper_->Start();
    picture_->Start();
    if (exchange_) exchange_->Start();
    if (notifier_) notifier_->Start();
  }

  // Stops the parts in the reverse of their start: first what acts on its own (alerts, the
  // exchange's timer and calls, the polls), then the servers, each shut down and destroyed
  // before the services it serves go (they go with this object).
  void Stop() {
    if (stopped_.exchange(true)) return;
    spdlog::info("trainscope-sidecar: stopping");
    if (notifier_) notifier_->Stop();
    if (exchange_) exchange_->Stop();
    if (picture_) picture_->Stop();
    if (keeper_) keeper_->Stop();
    if (watcher_) watcher_->Stop();
    if (grpc_server_) {
      grpc_server_->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(300));
      idle_cq_->Shutdown();
      if (idle_cq_thread_.joinable()) idle_cq_thread_.join();
      grpc_server_.reset();
    }
    http_.reset();
  }

  int http_port() const { return http_ ? http_->port() : -1; }
  int grpc_port() const { return grpc_port_; }
  const std::string& node() const { return plan_.self; }
  const std::string& summary() const { return summary_; }

 private:
  TraceStoreOptions TraceOptions() const {
    TraceStoreOptions t;
    t.memory_bytes = options_.trace_memory_bytes;
    t.slow_window_s = options_.slow_window_s;
    t.slow_per_key = options_.slow_per_key;
    return t;
  }

  // The watcher of this node's tasks; its changes poke the exchange and the notifier.
  void BuildWatcher() {
    WatcherOptions w;
    w.cluster = options_.cluster_name;
    w.tasks = plan_.tasks;
    w.tracker = TrackerOptionsFrom(options_);
    w.heartbeat_deadline_ms = options_.heartbeat_deadline_ms;
    w.watcher_name = absl::StrCat("trainscope-sidecar@", plan_.hostname);
    w.hostname = plan_.hostname;
    w.start_unix = UnixSeconds();
    w.credentials = channel_credentials_;
    // Hooked programs (a TensorFlow task with python/trainscope) report on this node's tasks.
    std::vector<TaskRef> local;
    for (const WatchedTask& t : plan_.tasks) {
      if (t.local) local.push_back(t.task);
    }
    hook_reports_ = std::make_shared<HookReports>(std::move(local));
    hook_service_ =
        std::make_unique<HookReportService>(hook_reports_.get(), plan_.span_senders.addresses);
    w.hooks = hook_reports_;
    if (const std::shared_ptr<CaptureHelper> helper = options_.capture_helper) {
      w.finder.find_task = [helper](int64_t pid, const std::string& host, int port) {
        return helper->FindTask(pid, host, port);
      };
      w.finder.find_listening = [helper](const std::string& host, int port) {
        return helper->FindPort(host, port);
      };
      w.finder.read_log = [helper](const VerifiedProcess& p, int64_t offset) {
        return helper->ReadLog({p.pid, p.start_ticks, p.host, p.port}, offset);
      };
      w.finder.read_environ = [helper](const VerifiedProcess& p) {
        return helper->ReadEnviron({p.pid, p.start_ticks, p.host, p.port});
      };
    }
    watcher_ = std::make_unique<TaskWatcher>(std::move(w), [this] {
      if (exchange_) exchange_->Poke();
      if (picture_) picture_->Poke();  // Which pokes the notifier once it is drawn.
    });
  }

  // The HTTP server on the bind addresses (HTTPS with --tls_cert_file), serving routes_.
  absl::Status StartHttp() {
    if (!options_.tls.cert_file.empty()) {
      auto tls = HttpTls::Create(options_.tls, [](const std::string& m) {
        spdlog::info("trainscope-sidecar: HTTP listener: {}", m);
      });
      if (!tls.ok()) return absl::InvalidArgumentError(tls.status().message());
      http_tls_ = std::move(*tls);
    }
    // The limits are HttpServerOptions' defaults (docs/security.md, "HTTP listeners"), but
    // more handler threads, and stacks on a pool of their own: a stack capture takes 100+ ms,
    // a remote snapshot seconds, and neither may hold up /metrics, /healthz or the API.
    HttpServerOptions limits;
    limits.handler_threads = 8;
    limits.slow_paths = {std::string(names::kPathStacks), std::string(names::kPathEvidence)};
    limits.slow_handler_threads = 2;
    limits.slow_queue_limit = 16;
    limits.slow_queue_timeout_ms = 10000;
    auto http = HttpServer::Start(
        ForPort(plan_.bind, options_.http_port), options_.http_port,
        [routes = &routes_](const HttpServer::Request& r) { return routes->Serve(r); },
        http_tls_.get(), limits);
    if (!http.ok()) return http.status();
    http_ = std::move(*http);
    return absl::OkStatus();
  }

  // Alerts of what this sidecar knows first-hand, straight to Alertmanager (alert_notifier.h).
  void BuildNotifier() {
    NotifierOptions n;
    n.urls = *AlertNotifier::ParseUrls(options_.alertmanager_urls);  // Validated by MakePlan.
    n.tls = options_.tls;
    if (n.urls.empty()) return;
    n.headers = AlertmanagerHeaders(AlertmanagerAuthOf(options_)).value_or(n.headers);
    const std::string host = IsWildcard(plan_.bind.front()) ? plan_.hostname : plan_.bind.front();
    n.generator_url =
        absl::StrCat(http_tls_ ? "https://" : "http://", JoinHostPort(host, http_->port()), "/");
    n.resend_interval_s = options_.alert_resend_interval_s;
    AlertContext context{options_.cluster_name, n.generator_url, nullptr};
    notifier_ = std::make_unique<AlertNotifier>(std::move(n), [picture = picture_.get(), context] {
      const std::shared_ptr<const Picture> p = picture->Now();
      AlertContext now = context;
      now.incidents = p->incidents;
      return FirstHandAlerts(p->view, now);
    });
  }

  static TrackerOptions TrackerOptionsFrom(const SidecarOptions& o) {
    TrackerOptions t;
    t.interval_s = o.heartbeat_interval_ms / 1000.0;
    t.hung_after_s = o.hung_after_ms / 1000.0;
    t.blocked_after_s = o.blocked_after_ms / 1000.0;
    t.stall_after_s = o.stall_after_s;
    t.relearn_s = std::max(1.0, 10 * t.interval_s);
    t.min_stddev_s = std::max(0.05, t.interval_s / 2);
    t.edges = o.worker_ps_map;
    return t;
  }

  // This node's tasks as the watcher decided them.
  std::vector<TaskView> LocalViews() const {
    std::vector<TaskView> views = watcher_->snapshot()->views;
    for (TaskView& v : views) {
      v.node = plan_.self;
      v.node_hostname = plan_.hostname;
    }
    return views;
  }

  // Snapshots of this node's stuck tasks; other nodes fetch them over the exchange.
  // The exchange with the other nodes' sidecars, keyed by --exchange_key_file.
  absl::Status MakeExchange() {
    ExchangeOptions x;
    x.cluster = options_.cluster_name;
    x.self = plan_.self;
    x.hostname = plan_.hostname;
    x.peers = plan_.peers;
    x.membership.period_s = options_.gossip_interval_ms / 1000.0;
    x.sync_interval_s = options_.sync_interval_s;
    x.max_message_bytes = static_cast<size_t>(options_.otlp_max_request_bytes);
    x.mutual_tls = !options_.tls.cert_file.empty() && !options_.tls.ca_file.empty();
    if (!options_.exchange_key_files.empty()) {
      auto keys = options_.exchange_keys.empty()
                      ? ExchangeKeys::Load(options_.exchange_key_files)
                      : ExchangeKeys::FromSecrets(options_.exchange_keys);
      if (!keys.ok()) return keys.status();
      x.keys = *std::move(keys);
      spdlog::info(
          "trainscope-sidecar: the exchange is signed with the cluster key {} ({} key(s) "
          "accepted: {})",
          x.keys->Ids().front(), x.keys->size(), absl::StrJoin(x.keys->Ids(), ", "));
    } else if (!x.mutual_tls) {
      spdlog::warn(
          "trainscope-sidecar: THE EXCHANGE IS NOT AUTHENTICATED: any process that reaches port "
          "{} can change this sidecar's view and page people. Give every sidecar the same "
          "--exchange_key_file (docs/security.md)",
          options_.grpc_port);
    }
    // This node's tasks as the exchange sends them: a stuck one's reason says where it waits.
    exchange_ = std::make_unique<PeerExchange>(
        std::move(x), [this] { return ExplainedLocal(ViewInputs()); }, channel_credentials_);
    exchange_->SetOperatorCredential(auth_.get());
    exchange_->SetLoadProvider([load = &node_load_] { return load->Get(MonotonicSeconds()); });
    exchange_->SetEvidenceProvider([this](const std::string& id, double from, double to) {
      return EvidenceHere(id, from, to);
    });
    return absl::OkStatus();
  }

  void BuildKeeper() {
    KeeperOptions k;
    k.node = plan_.self.empty() ? plan_.hostname : plan_.self;
    k.per_task = options_.snapshots_per_task;
    k.memory_bytes = options_.snapshot_memory_bytes;
    k.blocked_after_s = options_.snapshot_blocked_after_s;
    k.capture.stacks = options_.stack_snapshots;
    k.summarize = [](const TaskView& v, const pb::StackSnapshot& s) {
      return ExplainStuck(v, &s, s.taken_unix(), nullptr);
    };
    StackKeeper::Capturer capture;
    if (const std::shared_ptr<CaptureHelper> helper = options_.capture_helper) {
      capture = [helper](const TaskView& v) { return helper->Capture(CaptureTargetOf(v)); };
    }
    keeper_ = std::make_unique<StackKeeper>(
        std::move(k), [w = watcher_.get()] { return w->snapshot()->views; }, std::move(capture));
    if (exchange_) {
      exchange_->SetStacksProvider([keeper = keeper_.get()](const std::string& task, bool fresh) {
        return keeper->Stacks(task, fresh);
      });
    }
  }

  // /api/v1/stacks: the kept snapshots of a task of this node, or fetched from the sidecar of
  // the node that watches it.
  absl::StatusOr<pb::StackList> StacksOf(const std::string& task, bool fresh,
                                         std::function<bool()> cancelled) const {
    if (task.empty()) {
      return absl::InvalidArgumentError(
          "name a task: /api/v1/stacks?task=worker:0 (&fresh=1 takes a snapshot now, "
          "&format=text gives text)");
    }
    const std::shared_ptr<const Picture> picture = picture_->Now();
    const TaskView* found = nullptr;
    std::vector<std::string> names;
    for (const TaskView& v : picture->view.tasks) {
      names.push_back(v.task.ShortName());
      if (v.task.ShortName() == task) found = &v;
    }
    if (found == nullptr) {
      std::sort(names.begin(), names.end());
      return absl::NotFoundError(absl::StrCat(
          "no task ", task, " in the cluster spec (tasks: ", absl::StrJoin(names, ", "), ")"));
    }
    if (found->source.empty()) return keeper_->Stacks(task, fresh, {10, std::move(cancelled)});
    if (!exchange_ || found->node.empty()) {
      return absl::UnavailableError(absl::StrCat(
          task, " is watched by another node's sidecar, and this one does not know which"));
    }
    return exchange_->FetchStacks(found->node, task, fresh, fresh ? 15000 : 3000,
                                  options_.snapshot_fetch_max_bytes);
  }

  // What this node holds of the incident `id`, and the requests its sidecar kept of the window.
  pb::NodeEvidence EvidenceHere(const std::string& id, double from, double to) const {
    pb::NodeEvidence e;
    e.set_node(!plan_.self.empty() ? plan_.self : plan_.hostname);
    std::shared_ptr<const Picture> now = picture_ ? picture_->Now() : nullptr;
    if (const pb::Incident* in = now ? FindIncident(now->incidents->incidents, id) : nullptr) {
      e.set_held(true);
      *e.mutable_incident() = *in;
    }
    RequestFilter all;
    all.limit = 1000;
    const double mono = MonotonicSeconds();
    *e.mutable_slow() = RequestsInWindow(
        ToRequestList(trace_store_.Slow(all, mono), options_.slow_window_s, options_.slow_per_key),
        from, to);
    *e.mutable_errors() = RequestsInWindow(ToRequestList(trace_store_.Errors(all, mono)), from, to);
    return e;
  }

  // /api/v1/evidence: this node's, or asked of the sidecar of `node`, one of the members.
  absl::StatusOr<pb::NodeEvidence> EvidenceOf(const std::string& node, const std::string& id,
                                              double from, double to) const {
    if (node.empty() || node == plan_.self) return EvidenceHere(id, from, to);
    std::vector<std::string> members;
    if (exchange_) {
      for (const Member& m : exchange_->snapshot()->members) members.push_back(m.id);
    }
    if (!absl::c_linear_search(members, node)) {
      return absl::NotFoundError(
          absl::StrCat("no node ", CleanText(node, 80), " among this sidecar's members (",
                       members.empty() ? "it runs alone" : absl::StrJoin(members, ", "), ")"));
    }
    return exchange_->FetchEvidence(node, id, from, to, 5000, options_.snapshot_fetch_max_bytes);
  }

  // What the diagnosis takes: the observers' values of this moment.
  ClusterViewInputs ViewInputs() const {
    ClusterViewInputs in;
    in.cluster = options_.cluster_name;
    in.spec = &plan_.config.cluster;
    in.local = LocalViews();
    in.exchange = exchange_ ? exchange_->snapshot() : nullptr;
    in.self = plan_.exchange ? plan_.self : "";
    in.self_hostname = plan_.hostname;
    in.has_peers = !plan_.peers.empty();
    in.exchange_closed = plan_.exchange_closed;
    in.expected_nodes = plan_.expected_nodes;
    in.now_unix = UnixSeconds();
    in.worker_ps_map = options_.worker_ps_map;
    in.node_load = node_load_.Get(MonotonicSeconds());
    in.stacks = keeper_ ? keeper_->Newest() : nullptr;
    return in;
  }

  // The observers' own families (detect, gossip, traces), each as its part builds them; zeros
  // for a part not running (no exchange, no upstream).
  std::vector<prometheus::MetricFamily> ObservedFamilies(const LocalSnapshot& local,
                                                         const ClusterView& view) const {
    std::vector<prometheus::MetricFamily> out;
    std::map<TaskRef, TaskState> decided;
    for (const TaskView& v : view.tasks) decided[v.task] = v.state;
    AddTaskFamilies(local, decided, &out);
    AddCgroupFamilies(local, &out);
    AddWatcherFamilies(local, local.pauses, &out);
    AddSnapshotFamilies(keeper_->stats(), &out);
    ExchangeStats exchange;
    exchange.authenticated = true;  // No exchange: no one can speak for a node.
    std::vector<Member> members;
    if (exchange_) {
      exchange = exchange_->stats();
      members = exchange_->snapshot()->members;
    }
    AddExchangeFamilies(exchange, members, &out);
    telemetry::AddGauge(&out, names::kSidecarExchangeClosed,
                        "1: the spec has other nodes, but this sidecar's exchange with theirs is "
                        "closed for want of a cluster key (--exchange_key_file) or mutual TLS: "
                        "it watches its own node's tasks only.",
                        plan_.exchange_closed.empty() ? 0 : 1);
    AddTraceFamilies(trace_receiver_->stats(), trace_store_.stats(),
                     forwarder_ ? forwarder_->stats() : ForwarderStats{}, &out);
    return out;
  }

  std::string Metrics() const {
    const std::shared_ptr<const LocalSnapshot> local = watcher_->snapshot();
    const std::shared_ptr<const Picture> picture = picture_->Now();
    const ClusterView& view = picture->view;
    ServeStats stats;
    if (notifier_) stats.alerts = notifier_->stats();
    stats.api_refused = auth_->refused();
    stats.api_refused["otlp_not_local"] = trace_receiver_->stats().refused;
    stats.api_refused["report_not_local"] = hook_service_->refused();
    stats.incidents = picture->incidents;
    if (writer_) stats.store_ok = writer_->error().empty();
    return RenderMetrics(ObservedFamilies(*local, view), local->views, stats, view);
  }

  // The picture every reader shares, drawn on a tick of its own from the values of the moment
  // (picture.h), with the incident book and (with --state_dir) its store: what it kept is put
  // back, what changes is written every second (what a failed write did not take, again with the
  // next; store_writer.h). The first picture is drawn here, before anyone reads.
  absl::Status BuildIncidents() {
    PictureTickerOptions t;
    t.cluster = options_.cluster_name;
    t.inputs = [this] { return ViewInputs(); };
    t.on_news = [this] {
      if (notifier_) notifier_->Poke();
    };
    if (!options_.state_dir.empty()) {
      auto store = StateStore::Open(options_.state_dir,
                                    {options_.state_max_age_s, options_.state_max_bytes});
      if (!store.ok()) {
        return absl::Status(store.status().code(),
                            absl::StrCat("--state_dir: ", store.status().message()));
      }
      store_ = std::move(*store);
      if (!store_->set_aside().empty()) spdlog::warn("trainscope-sidecar: {}", store_->set_aside());
      store_->Prune(UnixSeconds());
      StoreWriterOptions w;
      w.path = store_->path();
      w.put_incident = [s = store_.get()](const pb::Incident& in) { return s->PutIncident(in); };
      w.put_ledger = [s = store_.get(),
                      cluster = options_.cluster_name](const std::vector<LedgerRow>& rows) {
        return s->PutLedger(cluster, rows);
      };
      writer_ = std::make_unique<StoreWriter>(std::move(w));
      t.persist = [this](const std::vector<pb::Incident>& changed, const Ledger& ledger) {
        Keep(changed, ledger);
      };
    }
    picture_ = std::make_unique<PictureTicker>(std::move(t));
    if (store_) {
      std::vector<Ledger::Row> rows;
      for (const LedgerRow& r : store_->Ledger(options_.cluster_name)) {
        rows.push_back({r.task, r.outcome, r.seconds});
      }
      std::vector<pb::Incident> kept = store_->Incidents(1000);
      picture_->Restore(kept, rows);
      spdlog::info("trainscope-sidecar: {} incidents kept in {}", kept.size(), store_->path());
    }
    if (exchange_) {
      // The incidents this node owns go out in its record; the others take their ids. What the
      // exchange learns is drawn into the next picture (picture.h says why not at once).
      exchange_->SetIncidentsProvider([picture = picture_.get(), self = plan_.self] {
        return OwnedIncidents(*picture->Now()->incidents, self, UnixSeconds());
      });
    }
    picture_->Tick();
    return absl::OkStatus();
  }

  // Writes what the book changed, and the ledger, to the store (the writer keeps what a failed
  // write did not take for the next call, and says once that writes fail); forgets what
  // retention says once an hour.
  void Keep(const std::vector<pb::Incident>& changed, const Ledger& ledger) {
    std::vector<LedgerRow> rows;
    for (const Ledger::Row& r : ledger.Rows()) rows.push_back({r.task, r.outcome, r.seconds});
    const double now = MonotonicSeconds();
    writer_->Write(changed, rows, now);
    if (now - last_prune_ >= 3600) {
      last_prune_ = now;
      store_->Prune(UnixSeconds());
    }
  }

  void AddRoutes() {
    ApiSources api;
    api.cluster_name = options_.cluster_name;
    api.node = plan_.exchange ? plan_.self : "";
    if (writer_) api.store_error = [writer = writer_.get()] { return writer->error(); };
    api.slow_window_s = options_.slow_window_s;
    api.slow_per_key = options_.slow_per_key;
    api.picture = picture_.get();
    api.metrics = [this] { return Metrics(); };
    api.traces = &trace_store_;
    api.stacks = [this](const std::string& task, bool fresh, std::function<bool()> cancelled) {
      return StacksOf(task, fresh, std::move(cancelled));
    };
    api.evidence = [this](const std::string& node, const std::string& id, double from, double to) {
      return EvidenceOf(node, id, from, to);
    };
    api.auth = auth_.get();
    AddApiRoutes(std::move(api), &routes_);
  }

  // Credentials of the gRPC server (exchange, OTLP receive, health) and of the channels (polls,
  // exchange) from --tls_*; plain text without them.
  absl::Status SetUpTls() {
    absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> server =
        grpc::InsecureServerCredentials();
    if (options_.grpc_port >= 0) server = MakeServerCredentials(options_.tls);
    if (!server.ok()) return server.status();
    auto channel = MakeChannelCredentials(options_.tls);
    if (!channel.ok()) return channel.status();
    server_credentials_ = *server;
    channel_credentials_ = *channel;
    if (options_.tls.enabled()) {
      // Also without a server: the hook keeps gRPC's per-attempt lines of failed polls quiet.
      LogTlsRefusalsAs("trainscope-sidecar",
                       [](const std::string& line) { spdlog::warn("{}", line); });
      spdlog::info("trainscope-sidecar: TLS on its gRPC server, polls and exchange ({})",
                   options_.tls.mutual() ? "mutual" : "no client certificates");
    }
    return absl::OkStatus();
  }

  absl::Status StartGrpc() {
    if (options_.grpc_port < 0) return absl::OkStatus();
    grpc::EnableDefaultHealthCheckService(true);
    grpc::ServerBuilder builder;
    for (const std::string& host : ForPort(plan_.bind, options_.grpc_port)) {
      builder.AddListeningPort(JoinHostPort(host, options_.grpc_port), server_credentials_,
                               &grpc_port_);
    }
    builder.SetMaxReceiveMessageSize(options_.otlp_max_request_bytes);
    // Bounds on what peers and tasks can make this server hold: 32 calls at once on one
    // connection (more wait in the client), 64 threads serving calls (more are refused with
    // RESOURCE_EXHAUSTED), 128 MiB of buffers (32 OTLP requests of the largest size): below
    // the memory limits the unit (MemoryMax=256M) and the Kubernetes example (192Mi) set.
    builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, 32);
    grpc::ResourceQuota quota("trainscope-sidecar");
    quota.SetMaxThreads(64).Resize(128 << 20);
    builder.SetResourceQuota(quota);
    AcceptKeepalive(&builder);
    builder.RegisterService(trace_receiver_.get());
    builder.RegisterService(hook_service_.get());
    if (exchange_) builder.RegisterService(exchange_->service());
    if (exchange_) builder.RegisterService(exchange_->snapshots_service());
    // A completion queue the health service's async machinery may use; a thread drains it.
    idle_cq_ = builder.AddCompletionQueue();
    builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::NUM_CQS, 1);
    builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::MIN_POLLERS, 1);
    builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::MAX_POLLERS, 2);
    grpc_server_ = builder.BuildAndStart();
    if (!grpc_server_ || grpc_port_ == 0) {
      idle_cq_->Shutdown();
      void* tag = nullptr;
      bool ok = false;
      while (idle_cq_->Next(&tag, &ok)) {
      }
      grpc_server_.reset();
      return absl::UnavailableError(
          absl::StrCat("cannot serve gRPC on ", absl::StrJoin(plan_.bind, ", "), " port ",
                       options_.grpc_port, " (port in use? pick another --grpc_port)"));
    }
    grpc_server_->GetHealthCheckService()->SetServingStatus(true);
    if (options_.tls.enabled()) {
      LogTlsRefusalsAs(absl::StrCat("trainscope-sidecar at ", absl::StrJoin(plan_.bind, ","),
                                    " port ", grpc_port_),
                       [](const std::string& line) { spdlog::warn("{}", line); });
    }
    idle_cq_thread_ = std::thread([cq = idle_cq_.get()] {
      void* tag = nullptr;
      bool ok = false;
      while (cq->Next(&tag, &ok)) {
      }
    });
    return absl::OkStatus();
  }

  const SidecarOptions options_;
  const Plan plan_;
  const std::string summary_;
  std::unique_ptr<TaskWatcher> watcher_;
  std::unique_ptr<StackKeeper> keeper_;
  std::unique_ptr<StateStore> store_;    // With --state_dir; outlives picture_, which writes it.
  std::unique_ptr<StoreWriter> writer_;  // Writes store_; outlives picture_, which calls it.
  double last_prune_ = 0;
  std::unique_ptr<PictureTicker> picture_;
  std::unique_ptr<ApiAuth> auth_;
  std::unique_ptr<PeerExchange> exchange_;
  mutable SharedNodeLoad node_load_;  // This node's, for its record and its own view.
  mutable TraceStore trace_store_;    // Thread-safe; its stats() is not const.
  std::unique_ptr<OtlpForwarder> forwarder_;
  std::unique_ptr<TraceReceiver> trace_receiver_;
  std::shared_ptr<HookReports> hook_reports_;
  std::unique_ptr<HookReportService> hook_service_;
  std::unique_ptr<AlertNotifier> notifier_;
  HttpRoutes routes_;
  std::unique_ptr<HttpTls> http_tls_;  // Outlives http_, which uses it.
  std::unique_ptr<HttpServer> http_;
  std::unique_ptr<grpc::Server> grpc_server_;
  std::unique_ptr<grpc::ServerCompletionQueue> idle_cq_;
  std::thread idle_cq_thread_;
  int grpc_port_ = -1;
  std::shared_ptr<grpc::ServerCredentials> server_credentials_;
  std::shared_ptr<grpc::ChannelCredentials> channel_credentials_;
  std::atomic<bool> stopped_{false};
};

absl::StatusOr<std::unique_ptr<Sidecar>> Sidecar::Create(const SidecarOptions& options) {
  auto plan = MakePlan(options);
  if (!plan.ok()) return plan.status();
  auto impl = std::make_unique<Impl>(options, *std::move(plan));
  if (absl::Status s = impl->Build(); !s.ok()) return s;
  return std::unique_ptr<Sidecar>(new Sidecar(std::move(impl)));
}

Sidecar::Sidecar(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Sidecar::~Sidecar() { impl_->Stop(); }
void Sidecar::Start() { impl_->Start(); }
void Sidecar::Stop() { impl_->Stop(); }
int Sidecar::http_port() const { return impl_->http_port(); }
int Sidecar::grpc_port() const { return impl_->grpc_port(); }
const std::string& Sidecar::node() const { return impl_->node(); }
const std::string& Sidecar::summary() const { return impl_->summary(); }

absl::Status ReadExchangeKeys(SidecarOptions& options) {
  options.exchange_keys.clear();
  for (const std::string& path : options.exchange_key_files) {
    auto key = ReadExchangeKeyFile(path);
    if (!key.ok()) return key.status();
    options.exchange_keys.push_back(*std::move(key));
  }
  return absl::OkStatus();
}

}  // namespace trainscope::sidecar
