#pragma once
// What trainscopectl gathers about one incident for a bug report or a post-mortem, from every
// node's sidecar (through the one asked): the incident in full, each node's record of it, its
// timeline, the stacks of its tasks (kept as evidence, and as they are now), the slow and failed
// ps requests of its window and the tasks, each a file of a .tar.gz with a
// README that says what each is (tar_gz.h writes it). The sidecar is asked through a function, so
// tests can answer for it. Thread-safe (no state).

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "trainscope/common/http_client.h"
#include "trainscope/sidecar/api.h"
#include "trainscope/sidecar/tar_gz.h"

namespace trainscope::sidecar {

// GETs `path` ("/api/v1/tasks") from the sidecar within `timeout_ms`, as trainscope::HttpGet.
using SidecarGet =
    std::function<absl::StatusOr<HttpResponse>(const std::string& path, int timeout_ms)>;

// Whether `id` may be an incident id (1 to 64 bytes of [A-Za-z0-9._-]): an id is put in a URL
// path as it is.
bool IsIncidentId(std::string_view id);

// The incident `id` in full from /api/v1/incidents/<id>: NotFound with the sidecar's words when it
// does not hold it, Unavailable when the sidecar cannot be asked or answers another HTTP status,
// InvalidArgument when it answers something that is not an incident.
absl::StatusOr<pb::Incident> FetchIncident(const SidecarGet& get, const std::string& id);

struct BundleOptions {
  std::string sidecar;       // Where it was gathered from, for the README: "127.0.0.1:9400".
  std::string gatherer;      // Who gathered it, for the README: "trainscopectl 0.4.0".
  double now_unix = 0;       // When.
  int max_live_stacks = 16;  // Tasks whose stacks are asked for now, at most (10 s each at most).
  int max_nodes = 64;        // Other nodes asked what they hold of it, at most (10 s each at most).
};

// The files of the bundle of `incident`, README.txt first: incident.json, timeline.txt,
// tasks.json, nodes/<node>.json (what each other node's sidecar holds of it, /api/v1/evidence),
// stacks/<task>.txt (the evidence snapshots any node kept) and stacks/<task>.now.txt (asked now)
// for each affected task and the cause's, traces/slow.json and traces/errors.json (every node's
// requests that overlap the incident's window, a minute before it included). What cannot be asked
// is left out, with a line in the README saying why; never fails.
std::vector<TarFile> GatherBundle(const SidecarGet& get, const pb::Incident& incident,
                                  const BundleOptions& options);

}  // namespace trainscope::sidecar
