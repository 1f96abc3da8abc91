#pragma once
// The sidecar's messages at its edges: TaskView (the trackers' working type) to and from the
// proto TaskView that /api/v1/tasks, the status page, trainscopectl and the exchange between
// sidecars carry, and the JSON of every /api/v1 body (protobuf's JSON mapping, proto field names).
// Everything that comes from outside is bounded and checked here. Thread-safe (no state).

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "trainscope/sidecar/task_view.h"
#include "trainscope/sidecar/v1/api.pb.h"
#include "trainscope/sidecar/v1/sidecar.pb.h"

namespace trainscope::sidecar {

namespace pb = ::trainscope::sidecar::v1;

// The /api/v1/tasks version this build serves (TaskList.api_version). Older sidecars send none.
inline constexpr int kApiVersion = 2;

// The newest snapshot of each local task's threads, by task (StackKeeper::Newest; the
// diagnosis reads where a stuck task waits from it, stuck_explain.h).
using NewestStacks = std::map<std::string, pb::StackSnapshot>;

// Bounds on what is accepted from outside (another sidecar, a JSON body).
inline constexpr size_t kMaxText = 1024;       // Any one string; longer ones are cut.
inline constexpr int kMaxListItems = 256;      // Peers, blocked_on, ... of one task.
inline constexpr int kMaxTasksPerNode = 4096;  // Tasks in one node's record.

// Replaces bytes that are not valid UTF-8 (protobuf strings must be) and cuts to `max` bytes
// on a character boundary.
std::string CleanText(std::string_view text, size_t max = kMaxText);

// The proto form of a view. `full_peers`: every peer in full (tasks watched first-hand); else
// (what the exchange carries) the peers that fail or are slow in full, and every other edge with
// calls in a slim form: its latencies only, for the worker x ps map.
void ToProto(const TaskView& view, bool full_peers, pb::TaskView* out);

// A view from its proto form, bounded; InvalidArgument (with why) when it is not a task: no
// valid role, an index out of range, an unknown state.
absl::StatusOr<TaskView> FromProto(const pb::TaskView& proto);

// JSON of a task list (never fails: strings are cleaned before they get here).
std::string ToJson(const pb::TaskList& list);
// JSON of any other /api/v1 body (api.proto): protobuf's JSON mapping with the proto field names,
// every field without presence printed. "{}" if it cannot be rendered (only text that skipped
// CleanText can make it fail).
std::string ApiJson(const google::protobuf::Message& body);
// /api/v1/sd: Prometheus' HTTP service discovery, a JSON array of pb::TargetGroup, one per task
// with a /metrics address (`local_only`: this node's tasks only).
std::string SdJson(const std::vector<TaskView>& views, bool local_only);

// Parses /api/v1/tasks from this or an older sidecar. InvalidArgument naming what is wrong when
// the body is not a task list.
absl::StatusOr<pb::TaskList> ParseTaskListJson(std::string_view body);
// The same, as views; entries that are not a task are skipped and counted in `skipped`.
absl::StatusOr<std::vector<TaskView>> ParseTaskViews(std::string_view body, int* skipped = nullptr);

// Parses /api/v1/incidents and /api/v1/incidents/<id>; InvalidArgument naming what is wrong
// when the body is not an incident list, or not an incident.
absl::StatusOr<pb::IncidentList> ParseIncidentListJson(std::string_view body);
absl::StatusOr<pb::Incident> ParseIncidentJson(std::string_view body);
// Parses /api/v1/traces/slow and /api/v1/traces/errors; InvalidArgument naming what is wrong.
absl::StatusOr<pb::RequestList> ParseRequestListJson(std::string_view body);
// Parses /api/v1/evidence; InvalidArgument naming what is wrong.
absl::StatusOr<pb::NodeEvidence> ParseNodeEvidenceJson(std::string_view body);

// The requests of `list` that overlap [from_unix, to_unix], in their order.
pb::RequestList RequestsInWindow(pb::RequestList list, double from_unix, double to_unix);
// The incident of `incidents` whose id is `id`, else one that had `id` before it took its
// owner's (an alert posted before still links to it); null: none.
const pb::Incident* FindIncident(const std::vector<pb::Incident>& incidents, std::string_view id);

// JSON of /api/v1/stacks (never fails).
std::string ToJson(const pb::StackList& list);
// Parses /api/v1/stacks; InvalidArgument naming what is wrong.
absl::StatusOr<pb::StackList> ParseStackListJson(std::string_view body);
// The snapshots as a person reads them in a terminal, like eu-stack or py-spy dump: a header per
// snapshot (task, pid, when, why, where it is stuck, the calls in flight), then one block per
// thread, innermost frame first. `now_unix` makes "12 s ago".
std::string StacksToText(const pb::StackList& list, double now_unix);

}  // namespace trainscope::sidecar
