#pragma once
// The sidecar as a whole: options (a plain struct, filled by main.cc from flags) and Run(), which
// reads the cluster spec, polls the heartbeats of the local tasks, decides their states, asks
// the peer sidecars for theirs, and serves everything over HTTP (/metrics, /api/v1/tasks,
// /api/v1/sd, /api/v1/traces/..., /, /healthz) and gRPC (grpc.health.v1, OTLP TraceService/Export
// as the node's trace agent, plus any services a caller adds).

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace grpc {
class Service;
}

namespace trainscope::sidecar {

struct SidecarOptions {
  // The cluster spec: the file's contents when `cluster_spec_file` is set, else `tf_config`
  // (main.cc copies TF_CONFIG there). `task` in it is ignored.
  std::string cluster_spec_file;
  std::string tf_config;
  std::string cluster_name = "default";
  // Tasks to watch, "ps:0,worker:1"; empty = the tasks whose host is this machine.
  std::string local_tasks;
  int heartbeat_interval_ms = 100;
  int heartbeat_deadline_ms = 2000;
  int hung_after_ms = 1000;
  int blocked_after_ms = 1000;
  double stall_after_s = 10;
  // Where to serve. Port 0 for HTTP picks a free port (printed at start).
  std::string http_address = "0.0.0.0";
  int http_port = 9400;
  int grpc_port = 4317;  // -1: no gRPC server.
  // Peer sidecars, "host:port,..."; empty = every other host of the spec at http_port;
  // "none" = no peers.
  std::string peer_sidecars;
  int peer_poll_ms = 1000;
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
  // Check the cluster spec and the options, print what would be watched, and return without
  // binding anything.
  bool check_config = false;
  // Services added to the gRPC server next to grpc.health.v1 (not owned; must outlive Run).
  std::vector<grpc::Service*> extra_grpc_services;
};

// Runs until SIGINT or SIGTERM (or RequestStop()). Returns an error, with a one-line message a
// person can act on, when the options or the cluster spec are bad or a port cannot be bound.
absl::Status Run(const SidecarOptions& options);

// Asks a running Run() to return. Async-signal-safe.
void RequestStop();

}  // namespace trainscope::sidecar
