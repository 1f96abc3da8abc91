// The flags of trainscope-sidecar, by what they set (see main.cc).
#include "flags.h"

#include <cstdlib>

#include "CLI/CLI.hpp"
#include "trainscope/common/secret_file.h"
#include "trainscope/common/tls_flags.h"

namespace trainscope::sidecar {
namespace {

// What is watched, and how a task is judged.
void AddWatchFlags(CLI::App& app, SidecarOptions& o) {
  app.add_option("--cluster_spec", o.cluster_spec_file,
                 "File holding the cluster spec as TF_CONFIG JSON (default: $TF_CONFIG)");
  app.add_option("--cluster_name", o.cluster_name,
                 "Name of the training run (default: $TRAINSCOPE_CLUSTER or \"default\")");
  app.add_option("--local_tasks", o.local_tasks,
                 "Tasks on this node to watch, e.g. ps:0,worker:1 (default: those whose host is "
                 "this machine); name a pod's tasks here when their addresses are the pods' own");
  app.add_option("--black_box_tasks", o.black_box_tasks,
                 "Tasks to watch from outside (gRPC transport and /proc, no trainscope "
                 "heartbeat), e.g. worker:*,ps:1 (tasks answering UNIMPLEMENTED are anyway)");
  app.add_option("--heartbeat_interval_ms", o.heartbeat_interval_ms, "Poll interval per task")
      ->capture_default_str();
  app.add_option("--heartbeat_deadline_ms", o.heartbeat_deadline_ms, "Deadline of one poll")
      ->capture_default_str();
  app.add_option("--hung_after_ms", o.hung_after_ms,
                 "Silence before a task counts as hung or unreachable")
      ->capture_default_str();
  app.add_option("--blocked_after_ms", o.blocked_after_ms,
                 "Waiting on peers this long counts as blocked")
      ->capture_default_str();
  app.add_option("--stall_after_s", o.stall_after_s,
                 "Progress frozen this long while training counts as stalled")
      ->capture_default_str();
  app.add_option("--worker_ps_map", o.worker_ps_map,
                 "Track each worker's calls to each ps against their past and name slow links "
                 "(the worker x ps map); false: no map, no slow links")
      ->capture_default_str();
}

// Where the sidecar listens and how it is reached.
void AddListenFlags(CLI::App& app, SidecarOptions& o) {
  app.add_option("--http_address", o.http_address,
                 "Address to serve HTTP and gRPC on (default: the address of this node's tasks "
                 "in the spec, and 127.0.0.1; 0.0.0.0: every interface); a specific address "
                 "also says which node this is (the tasks whose host is that address)");
  app.add_option("--advertise_address", o.advertise_address,
                 "host:port the other sidecars reach this one's gRPC port at (default: "
                 "--http_address when specific, else the host of this node's tasks)");
  AddTlsFlags(app, o.tls);
  app.add_option("--api_token_file", o.api_token_file,
                 "File holding the bearer token that actions need (a fresh capture, "
                 "/api/v1/stacks?fresh=1): make one with openssl rand -hex 32 > FILE, mode 600 "
                 "(one others can read is refused); read again when it changes (default: "
                 "$TRAINSCOPE_API_TOKEN_FILE, else the systemd credential api.token; none: "
                 "actions are refused unless over mutual TLS, reads stay open)");
  app.add_option("--http_port", o.http_port,
                 "HTTP port: /metrics, /api/v1/tasks, /api/v1/sd, /api/v1/traces, /, /healthz (0: "
                 "any free port)")
      ->capture_default_str();
  app.add_option("--grpc_port", o.grpc_port,
                 "gRPC port: the exchange with other sidecars, OTLP TraceService/Export and "
                 "grpc.health.v1 (-1: off)")
      ->capture_default_str();
}

// The spans the tasks send, kept and forwarded.
void AddTraceFlags(CLI::App& app, SidecarOptions& o) {
  app.add_option("--trace_memory_bytes", o.trace_memory_bytes,
                 "Memory for the spans kept (pending joins, slow and failed requests)")
      ->capture_default_str();
  app.add_option("--slow_window_s", o.slow_window_s,
                 "Sliding window of the slow ps request list, seconds")
      ->capture_default_str();
  app.add_option("--slow_per_key", o.slow_per_key,
                 "Slowest requests kept per (method, ps) in the window")
      ->capture_default_str();
  app.add_option("--otlp_max_request_bytes", o.otlp_max_request_bytes,
                 "Largest OTLP Export request accepted")
      ->capture_default_str();
  app.add_option("--otlp_upstream", o.otlp_upstream,
                 "Forward every span received to this OTLP/gRPC endpoint, http://host:port "
                 "(default: $TRAINSCOPE_OTLP_UPSTREAM; none)");
  app.add_option("--otlp_queue_bytes", o.otlp_queue_bytes,
                 "Bound of the forwarding queue; spans beyond it are dropped and counted")
      ->capture_default_str();
}

// The other nodes' sidecars, and Alertmanager.
void AddPeerAndAlertFlags(CLI::App& app, SidecarOptions& o) {
  app.add_option("--peer_sidecars", o.peer_sidecars,
                 "Other sidecars' gRPC addresses, host:port,... (default: every other host of "
                 "the spec at --grpc_port; \"none\": no exchange)");
  app.add_option(
         "--exchange_key_file", o.exchange_key_files,
         "The cluster key: a file holding the same secret on every node (openssl rand "
         "-base64 32); every exchange message is signed with it and refused without it. "
         "Repeat to rotate: the first signs, each verifies. Mode 600: one others can read is "
         "refused (default: $TRAINSCOPE_EXCHANGE_KEY_FILE, else the systemd credential "
         "exchange.key; none: the exchange is not authenticated)")
      ->envname("TRAINSCOPE_EXCHANGE_KEY_FILE");
  app.add_option("--gossip_interval_ms", o.gossip_interval_ms,
                 "The exchange's period: one probe of one peer, news to a few")
      ->capture_default_str();
  app.add_option("--sync_interval_s", o.sync_interval_s,
                 "How often to compare a slice of the cluster state with one peer")
      ->capture_default_str();
  app.add_option("--alertmanager_url", o.alertmanager_urls,
                 "Alertmanager to post first-hand alerts to (dead, hung, partitioned, a node cut "
                 "off), within a second of knowing: host:port or http(s)://host:port[/prefix]; "
                 "repeatable or comma-separated (default: $TRAINSCOPE_ALERTMANAGER_URL; none: only "
                 "Prometheus's rules page)");
  app.add_option("--alertmanager_basic_auth_file", o.alertmanager_basic_auth_file,
                 "File holding user:password for Alertmanagers that require basic auth (mode "
                 "600; default: the systemd credential alertmanager.auth)");
  app.add_option("--alertmanager_bearer_token_file", o.alertmanager_bearer_token_file,
                 "File holding the bearer token Alertmanagers require (mode 600; default: the "
                 "systemd credential alertmanager.token)");
  app.add_option("--alertmanager_header", o.alertmanager_headers,
                 "A header field of every post to Alertmanager, \"Name: value\" (e.g. "
                 "\"X-Scope-OrgID: team-a\" for a multi-tenant one); repeatable");
  app.add_option("--alert_resend_interval_s", o.alert_resend_interval_s,
                 "Re-send a firing alert this often; it expires 4 intervals after the last send")
      ->capture_default_str();
}

// The stacks of stuck tasks.
void AddSnapshotFlags(CLI::App& app, SidecarOptions& o) {
  app.add_option("--stack_snapshots", o.stack_snapshots,
                 "Snapshots of stuck tasks include every thread's stack (ptrace; needs root, or "
                 "CAP_SYS_PTRACE, CAP_DAC_READ_SEARCH and CAP_KILL); false: what /proc says only")
      ->capture_default_str();
  app.add_option("--snapshots_per_task", o.snapshots_per_task,
                 "Snapshots kept per task (taken when it turns hung, stalled or blocked, and on "
                 "demand)")
      ->capture_default_str();
  app.add_option("--snapshot_memory_bytes", o.snapshot_memory_bytes,
                 "Memory for all the snapshots kept")
      ->capture_default_str();
  app.add_option("--snapshot_blocked_after_s", o.snapshot_blocked_after_s,
                 "A blocked task is captured once it has been blocked this long")
      ->capture_default_str();
  app.add_option("--snapshot_fetch_max_bytes", o.snapshot_fetch_max_bytes,
                 "Largest snapshot answer taken from another node's sidecar")
      ->capture_default_str();
  app.add_option("--state_dir", o.state_dir,
                 "Directory where incidents and the training-time ledger are kept across "
                 "restarts (trainscope-state.db; created if missing). Empty: kept in memory only. "
                 "The Debian package sets /var/lib/trainscope");
  app.add_option("--state_max_age_s", o.state_max_age_s,
                 "Closed incidents older than this are forgotten")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--state_max_bytes", o.state_max_bytes,
                 "The incidents kept on disk stay under this size (the oldest closed go first)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1} << 20, int64_t{1} << 40));
}

}  // namespace

void AddSidecarFlags(CLI::App& app, SidecarOptions& o) {
  // Defaults from the environment; a flag given wins.
  if (const char* c = std::getenv("TRAINSCOPE_CLUSTER")) o.cluster_name = c;
  if (const char* tf = std::getenv("TF_CONFIG")) o.tf_config = tf;
  if (const char* up = std::getenv("TRAINSCOPE_OTLP_UPSTREAM")) o.otlp_upstream = up;
  if (const char* am = std::getenv("TRAINSCOPE_ALERTMANAGER_URL")) o.alertmanager_urls = {am};
  // Under systemd, the unit's credentials (LoadCredential=, docs/security.md): private copies the
  // service's user can read even when the files are root's and 0600.
  o.api_token_file = CredentialPath("api.token");
  if (std::string key = CredentialPath("exchange.key"); !key.empty()) o.exchange_key_files = {key};
  o.alertmanager_basic_auth_file = CredentialPath("alertmanager.auth");
  o.alertmanager_bearer_token_file = CredentialPath("alertmanager.token");
  if (std::string cert = CredentialPath("tls.crt"), key = CredentialPath("tls.key");
      !cert.empty() && !key.empty()) {
    o.tls.cert_file = cert;
    o.tls.key_file = key;
    o.tls.ca_file = CredentialPath("ca.crt");
  }
  if (const char* token = std::getenv("TRAINSCOPE_API_TOKEN_FILE"); token && *token) {
    o.api_token_file = token;
  }
  AddWatchFlags(app, o);
  AddListenFlags(app, o);
  AddTraceFlags(app, o);
  AddPeerAndAlertFlags(app, o);
  AddSnapshotFlags(app, o);
}

}  // namespace trainscope::sidecar
