#pragma once
// The sidecar as a whole, composed of its parts: the task watcher (polls this node's tasks and
// decides their states), the peer exchange (gossip with the other nodes' sidecars), the trace
// agent (OTLP receiver, slow and failed ps requests), and the HTTP API (a route table: /metrics,
// /api/v1/tasks, /api/v1/sd, /api/v1/traces/..., /, /healthz). gRPC on one port serves the
// exchange, OTLP and grpc.health.v1.
//
//   auto sidecar = Sidecar::Create(options);   // validates, reads the spec, binds the ports
//   (*sidecar)->Start();
//   ... wait for a signal ...
//   (*sidecar)->Stop();                         // within about a second, whatever peers do
//
// Process-wide settings (signals, abseil's mutex mode, malloc arenas) belong to main().

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "trainscope/common/tls.h"
#include "trainscope/sidecar/capture_helper.h"

namespace trainscope::sidecar {

struct SidecarOptions {
  // The cluster spec: the file's contents when `cluster_spec_file` is set, else `tf_config`
  // (main.cc copies TF_CONFIG there). `task` in it is ignored.
  std::string cluster_spec_file;
  std::string tf_config;
  std::string cluster_name = "default";
  // Tasks to watch, "ps:0,worker:1"; empty = the tasks whose host is this node.
  std::string local_tasks;
  // Tasks to watch from outside whatever they answer, "worker:*,ps:1" (a task that answers
  // UNIMPLEMENTED to the heartbeat is watched from outside without it).
  std::string black_box_tasks;
  int heartbeat_interval_ms = 100;
  int heartbeat_deadline_ms = 2000;
  int hung_after_ms = 1000;
  int blocked_after_ms = 1000;
  double stall_after_s = 10;
  // The worker x ps map: each worker's calls to each ps against their own past (EdgeWatch), the
  // slow links named from it, its heatmap and its slowest edges on /metrics. false: none of
  // these (for measuring what the map costs).
  bool worker_ps_map = true;
  // Where to serve HTTP and gRPC. A specific address also says which node this is: the tasks
  // whose host is that address. "0.0.0.0": every local interface. Empty (the default): the
  // address of this node's tasks in the spec, plus 127.0.0.1 (every interface when the spec
  // has none here). Empty or a wildcard: this node's tasks are those whose host is any address
  // of this machine.
  std::string http_address;
  int http_port = 9400;  // 0: any free port (printed at start).
  int grpc_port = 4317;  // -1: no gRPC server (and so no exchange and no trace agent).
  // TLS on HTTP and gRPC, the polls of tasks and the exchange (docs/security.md).
  TlsFiles tls;
  // A file holding the bearer token that actions on the HTTP API need (a fresh capture:
  // `Authorization: Bearer <token>`); read again when it changes. Empty: actions need a client
  // certificate the CA verified (mutual TLS), else they are refused (403). Reads need nothing.
  std::string api_token_file;
  // This node's id in the exchange: host:port the other sidecars reach its gRPC port at.
  // Empty: http_address when specific, else the host of this node's tasks in the spec.
  std::string advertise_address;
  // Peer sidecars, "host:port,..." of their gRPC ports; empty = every other host of the spec
  // at grpc_port; "none" = no exchange.
  std::string peer_sidecars;
  // The cluster key of the exchange (docs/security.md): files of the same key(s) on every node;
  // the first signs, each verifies (rotation). Empty: the exchange is not authenticated.
  std::vector<std::string> exchange_key_files;
  // Their contents, when read already (ReadExchangeKeys: before the process gives up the
  // capabilities that let it read a root-only file); else the files are read at Create.
  std::vector<std::string> exchange_keys;
  // The exchange's protocol period (one probe each), and how often it compares a slice of its
  // records with one peer.
  int gossip_interval_ms = 200;
  double sync_interval_s = 1;
  // Traces received over OTLP on grpc_port: the memory budget of what is kept, the sliding
  // window and per-(method, ps) count of the slow list, the largest Export accepted, and an
  // upstream OTLP endpoint ("http://host:port"; "" = none) that gets everything, through a queue
  // of at most otlp_queue_bytes.
  size_t trace_memory_bytes = 4 << 20;
  double slow_window_s = 300;
  int slow_per_key = 10;
  int otlp_max_request_bytes = 4 << 20;
  std::string otlp_upstream;
  size_t otlp_queue_bytes = 8 << 20;
  // Alertmanagers to post first-hand alerts to (dead, hung, partitioned, a node cut off), each
  // "host:port" or "http://host:port[/prefix]", or several comma-separated; empty = none. A
  // firing alert is sent again every alert_resend_interval_s, and expires 4 intervals after the
  // last send.
  std::vector<std::string> alertmanager_urls;
  // How to authenticate to them (an Alertmanager behind basic auth, a bearer token, a tenant
  // header): files read at start, as secrets (see AlertmanagerAuth in alert_notifier.h).
  std::string alertmanager_basic_auth_file;
  std::string alertmanager_bearer_token_file;
  std::vector<std::string> alertmanager_headers;
  double alert_resend_interval_s = 10;
  // Snapshots of stuck local tasks (every thread's stack, with ptrace): taken when a task turns
  // hung or stalled (blocked after snapshot_blocked_after_s) and on demand; the last
  // snapshots_per_task of each kept within snapshot_memory_bytes. stack_snapshots=false: /proc
  // only, no ptrace.
  bool stack_snapshots = true;
  // The privileged helper that captures and finds tasks' processes for this process, which has
  // dropped its capabilities (main.cc); null: this process does both itself (tests).
  std::shared_ptr<CaptureHelper> capture_helper;
  int snapshots_per_task = 4;
  int64_t snapshot_memory_bytes = 8 << 20;
  double snapshot_blocked_after_s = 2;
  // The largest answer taken from another node's sidecar for a task it watches.
  int64_t snapshot_fetch_max_bytes = 4 << 20;
  // Where the incidents and the ledger are kept across restarts (trainscope-state.db); "": in
  // memory only. Closed incidents older than `state_max_age_s` go, and the oldest first once
  // the incidents kept pass `state_max_bytes`.
  std::string state_dir;
  double state_max_age_s = 30 * 86400;
  int64_t state_max_bytes = 64 << 20;
};

// Thread-safe.
class Sidecar {
 public:
  // Checks the options and the cluster spec and binds the ports. A bad option, a bad spec or a
  // port in use is an error with a one-line message a person can act on (InvalidArgument for
  // what the user wrote, Unavailable for a port).
  static absl::StatusOr<std::unique_ptr<Sidecar>> Create(const SidecarOptions& options);
  ~Sidecar();

  // Starts watching, exchanging and serving.
  void Start();
  // Leaves the exchange, stops the threads and the servers. Returns within about a second
  // whatever the peers or the tasks do. Idempotent.
  void Stop();

  int http_port() const;
  int grpc_port() const;
  // This node's id in the exchange ("" without one).
  const std::string& node() const;
  // One line: what would be watched and who the peers are.
  const std::string& summary() const;

  class Impl;

 private:
  explicit Sidecar(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Checks the options and the cluster spec without binding anything; the summary line when
// they are valid.
absl::StatusOr<std::string> CheckConfig(const SidecarOptions& options);

// Reads options.exchange_key_files into options.exchange_keys (main.cc: before it drops its
// capabilities, so that a key file readable by root only is read). Errors name the file.
absl::Status ReadExchangeKeys(SidecarOptions& options);

}  // namespace trainscope::sidecar
