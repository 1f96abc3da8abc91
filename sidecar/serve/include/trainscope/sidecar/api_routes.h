#pragma once
// The sidecar's HTTP API on a route table: /metrics, /api/v1 (tasks, sd, traces, stacks),
// /healthz and the status page. The handlers read only what the wiring hands them (ApiSources),
// so this part knows nothing of how the sidecar is built. Private to the sidecar library.

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "trainscope/sidecar/api.h"
#include "trainscope/sidecar/api_auth.h"
#include "trainscope/sidecar/cluster_view.h"
#include "trainscope/sidecar/http_routes.h"
#include "trainscope/sidecar/incidents.h"
#include "trainscope/sidecar/picture.h"
#include "trainscope/sidecar/trace_store.h"

namespace trainscope::sidecar {

// What the routes read. Every function is called from the HTTP server's threads.
struct ApiSources {
  std::string cluster_name;
  std::string node;          // This sidecar's node id ("" without an exchange).
  double slow_window_s = 0;  // What /api/v1/traces/slow says of its window.
  int slow_per_key = 0;
  // The cluster as this node sees it, with the incidents, as of the wiring's last tick. Must
  // outlive the routes.
  const PictureSource* picture = nullptr;
  std::function<std::string()> metrics;  // The text of /metrics.
  TraceStore* traces = nullptr;          // Must outlive the routes.
  // A task's snapshots (kept here, or fetched from the node that watches it); a status whose code
  // says what went wrong (InvalidArgument, NotFound, ...), answered as 400, 404, ...
  // `cancelled` says whether the asker has left (a fresh capture not begun is then dropped).
  std::function<absl::StatusOr<pb::StackList>(const std::string& task, bool fresh,
                                              std::function<bool()> cancelled)>
      stacks;
  // Why the state store (--state_dir) takes no writes now ("" while it does); null without one.
  std::function<std::string()> store_error;
  // What the sidecar of `node` ("": this one) holds of the incident `id`, with the requests it
  // kept that overlap [from, to] (asked of another node through the exchange); a status whose
  // code says what went wrong, as `stacks`.
  std::function<absl::StatusOr<pb::NodeEvidence>(const std::string& node, const std::string& id,
                                                 double from_unix, double to_unix)>
      evidence;
  // Who may ask for a fresh capture (fresh=1): reads need nothing. Must outlive the routes.
  ApiAuth* auth = nullptr;
};

// Adds every route to `routes`. /api/v1/stacks and /api/v1/evidence are slow (a capture, or a fetch
// from another node): the server should run it on a pool of its own
// (HttpServerOptions::slow_paths).
void AddApiRoutes(ApiSources sources, HttpRoutes* routes);

}  // namespace trainscope::sidecar
