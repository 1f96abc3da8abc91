#pragma once
// Every state name and HTTP path the sidecar serves, in one place. Its metric and label names
// are in the one names header of both binaries (trainscope/telemetry/names.h), reachable here
// too: sidecar::names::kTaskUp is telemetry::names::kTaskUp. Constants only.

#include <string_view>

#include "trainscope/telemetry/names.h"

namespace trainscope::sidecar::names {

using namespace ::trainscope::telemetry::names;  // NOLINT: the metric and label names

// Task states, as they appear in the API and in the `state` label.
inline constexpr std::string_view kStateMissing = "missing";
inline constexpr std::string_view kStateUp = "up";
inline constexpr std::string_view kStateSlow = "slow";
inline constexpr std::string_view kStateBlocked = "blocked";
inline constexpr std::string_view kStateStalled = "stalled";
inline constexpr std::string_view kStateHung = "hung";
inline constexpr std::string_view kStateUnreachable = "unreachable";
inline constexpr std::string_view kStateDead = "dead";
// Finished: its last heartbeat said phase done, then it exited. Not a problem.
inline constexpr std::string_view kStateDone = "done";

// HTTP paths on --http_port.
inline constexpr std::string_view kPathMetrics = "/metrics";
// ?local=1: this node's tasks only; ?task=ps:0: that task only.
inline constexpr std::string_view kPathTasks = "/api/v1/tasks";
inline constexpr std::string_view kPathSd = "/api/v1/sd";
// Snapshots of a stuck task's threads: ?task=worker:0[&fresh=1][&format=text].
inline constexpr std::string_view kPathStacks = "/api/v1/stacks";
inline constexpr std::string_view kPathHealthz = "/healthz";
inline constexpr std::string_view kPathStatusPage = "/";
// Slow ps requests (?method=&ps=&limit=), failed ones, and one trace (/api/v1/traces/<32 hex>).
inline constexpr std::string_view kPathTracesSlow = "/api/v1/traces/slow";
inline constexpr std::string_view kPathTracesErrors = "/api/v1/traces/errors";
inline constexpr std::string_view kPathTracesPrefix = "/api/v1/traces/";
// Incidents, one per root cause (open first, then the recent: ?limit=N), with the job's
// goodput; one incident in full at /api/v1/incidents/<id>.
inline constexpr std::string_view kPathIncidents = "/api/v1/incidents";
inline constexpr std::string_view kPathIncidentsPrefix = "/api/v1/incidents/";
// What one node's sidecar holds of an incident: ?incident=ID[&node=HOST:PORT][&from=&to=].
inline constexpr std::string_view kPathEvidence = "/api/v1/evidence";

}  // namespace trainscope::sidecar::names
