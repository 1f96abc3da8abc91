// The first-hand alerts and their JSON; see alerts.h.
#include "trainscope/sidecar/alerts.h"

#include <cmath>
#include <ctime>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"

namespace trainscope::sidecar {
namespace {

// A partition pages at once when the sidecars of its two nodes cannot reach each other directly
// either (a second, independent path fails the same way); otherwise (a port blocked, the
// sidecars' link fine) once it has lasted this long. (The rule's `for:` is 15 s.)
constexpr double kPartitionHoldS = 1;

constexpr char kRunbook[] = "https://github.com/trainscope/trainscope/blob/main/docs/alerts.md#";

std::string TaskName(const TaskRef& t) { return absl::StrCat(t.role, ":", t.index); }

// The text of the rules in dashboards/prometheus/alerts.yml, with what only the sidecar knows:
// which sidecar watches the task, and its reason.
FiringAlert DeadOrHung(const TaskView& v, const AlertContext& c) {
  const bool dead = v.state == TaskState::kDead;
  const std::string name = TaskName(v.task);
  FiringAlert a;
  a.labels = {{"alertname", dead ? "TrainscopeTaskDead" : "TrainscopeTaskHung"},
              {"cluster", c.cluster},
              {"role", v.task.role},
              {"task", std::to_string(v.task.index)},
              {"severity", "critical"}};
  a.annotations["summary"] =
      absl::StrCat(name, " of cluster ", c.cluster, " is ", dead ? "dead" : "hung");
  a.annotations["description"] =
      dead ? absl::StrCat("The process of ", name, " (cluster ", c.cluster,
                          ") is gone: its node's sidecar gets connection refused, finds no such "
                          "process, or saw it exit or get killed (OOM killer, kill -9, a crash). "
                          "The sidecar's reason, with pid and address, is on its page ",
                          c.sidecar_url, " and in `trainscopectl status`: ", v.reason)
           : absl::StrCat("The process of ", name, " (cluster ", c.cluster,
                          ") exists but does not answer its heartbeat: stopped (SIGSTOP, a "
                          "debugger), deadlocked or starved. Its peers wait on it. The sidecar's "
                          "page ",
                          c.sidecar_url, " says which: ", v.reason);
  a.annotations["reason"] = v.reason;
  a.annotations["runbook_url"] =
      absl::StrCat(kRunbook, dead ? "trainscopetaskdead" : "trainscopetaskhung");
  // Where its threads are stuck: the snapshot its node's sidecar took when it turned hung.
  if (!dead) {
    a.annotations["stacks_url"] =
        absl::StrCat(c.sidecar_url, "api/v1/stacks?task=", name, "&format=text");
  }
  a.starts_at = v.since;
  return a;
}

// The partition between `v` (this node's task) and `peer`, as the cluster view found it.
const PartitionInfo* FindPartition(const ClusterView& view, const TaskRef& a, const TaskRef& b) {
  for (const PartitionInfo& p : view.partitions) {
    if ((p.a == a && p.b == b) || (p.a == b && p.b == a)) return &p;
  }
  return nullptr;
}

// `task`'s side of its partition from `peer`; `v` is the view of this node's side, whose reason
// and start stand in when the cluster view has no PartitionInfo for the pair.
FiringAlert Partitioned(const TaskRef& task, const TaskRef& peer, const PartitionInfo* p,
                        const TaskView& v, const AlertContext& c) {
  const std::string name = TaskName(task);
  const std::string peer_name = TaskName(peer);
  FiringAlert a;
  a.labels = {{"alertname", "TrainscopeTaskPartitioned"},
              {"cluster", c.cluster},
              {"role", task.role},
              {"task", std::to_string(task.index)},
              {"peer_role", peer.role},
              {"peer_task", std::to_string(peer.index)},
              {"severity", "critical"}};
  std::string evidence =
      p == nullptr
          ? v.reason
          : absl::StrCat(TaskName(p->a), " (", p->a_address, ") cannot reach ", TaskName(p->b),
                         " at ", p->b_address, p->error.empty() ? "" : absl::StrCat(": ", p->error),
                         p->nodes_cut ? "; their nodes' sidecars cannot reach each "
                                        "other either"
                                      : "");
  a.annotations["summary"] =
      absl::StrCat(name, " of cluster ", c.cluster, " is cut off from its peer ", peer_name);
  a.annotations["description"] = absl::StrCat(
      name, " and ", peer_name, " (cluster ", c.cluster,
      ") both answer their own nodes' sidecars, but cannot reach each other: a network "
      "partition, a firewall, or an address its peers cannot route to. Sidecar ",
      c.sidecar_url, " says: ", evidence);
  a.annotations["reason"] = evidence;
  a.annotations["runbook_url"] = absl::StrCat(kRunbook, "trainscopetaskpartitioned");
  a.starts_at = p != nullptr ? p->since : v.since;
  a.hold_s = p != nullptr && p->nodes_cut ? 0 : kPartitionHoldS;
  return a;
}

FiringAlert NodeIsolated(const NodeInfo& n, const AlertContext& c) {
  std::vector<std::string> tasks;
  for (const TaskRef& t : n.tasks) tasks.push_back(TaskName(t));
  FiringAlert a;
  a.labels = {{"alertname", "TrainscopeNodeIsolated"},
              {"cluster", c.cluster},
              {"node", n.id},
              {"severity", "critical"}};
  a.annotations["summary"] =
      absl::StrCat("node ", n.id, " of cluster ", c.cluster, " is cut off from the other nodes");
  a.annotations["description"] = absl::StrCat(
      "The sidecar of node ", n.id, n.hostname.empty() ? "" : absl::StrCat(" (", n.hostname, ")"),
      " answers no probe, directly or through other nodes: the node is isolated by the network, "
      "or the machine is down. The states of its tasks (",
      tasks.empty() ? "none known" : absl::StrJoin(tasks, ", "), ") are unknown. Sidecar ",
      c.sidecar_url, " says: ", n.reason);
  a.annotations["reason"] = n.reason;
  a.annotations["runbook_url"] = absl::StrCat(kRunbook, "trainscopenodeisolated");
  a.starts_at = n.since;
  return a;
}

// A dead or hung task's alert for each of this node's tasks; for each partition one of them is
// a side of, both sides' alerts. The peer's own sidecar posts the same two (the labels are the
// same, so Alertmanager holds two alerts, not four), and whichever sidecar sees the partition
// first posts the pair together: one notification of the link's incident, even when the two
// sidecars name it a second apart. The rule's copy is made the same way (alerts.yml).
void AddTaskAlerts(const ClusterView& view, const AlertContext& c, std::vector<FiringAlert>& out) {
  const std::set<TaskRef> local(view.local.begin(), view.local.end());
  std::set<std::pair<TaskRef, TaskRef>> sides;
  for (const TaskView& v : view.tasks) {
    if (!local.count(v.task) || v.state == TaskState::kDone) continue;
    if (v.state == TaskState::kDead || v.state == TaskState::kHung) {
      out.push_back(DeadOrHung(v, c));
      continue;
    }
    for (const std::string& peer_name : v.partitioned_from) {
      auto peer = ParseTaskRef(peer_name);
      if (!peer.ok()) continue;
      const PartitionInfo* p = FindPartition(view, v.task, *peer);
      if (sides.insert({v.task, *peer}).second) {
        out.push_back(Partitioned(v.task, *peer, p, v, c));
      }
      if (p != nullptr && sides.insert({*peer, v.task}).second) {
        out.push_back(Partitioned(*peer, v.task, p, v, c));
      }
    }
  }
}

std::string Rfc3339(double unix_seconds) {
  const double whole = std::floor(unix_seconds);
  const time_t t = static_cast<time_t>(whole);
  std::tm tm{};
  gmtime_r(&t, &tm);
  return absl::StrFormat("%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
                         tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                         static_cast<int>((unix_seconds - whole) * 1000));
}

// The open incident an alert names: a partition's, the link incident between its two tasks;
// a dead or hung task's, the one it is the cause of; a node's, the one that names the node as
// its cause; null: none.
const pb::Incident* IncidentOf(const FiringAlert& a, const ClusterView& view,
                               const IncidentsNow& now) {
  auto label = [&a](const char* key) {
    auto it = a.labels.find(key);
    return it == a.labels.end() ? std::string() : it->second;
  };
  if (!label("peer_role").empty()) {
    auto task = ParseTaskRef(absl::StrCat(label("role"), ":", label("task")));
    auto peer = ParseTaskRef(absl::StrCat(label("peer_role"), ":", label("peer_task")));
    return task.ok() && peer.ok() ? OpenLinkIncident(now, view, *task, *peer) : nullptr;
  }
  if (!label("task").empty()) {
    return OpenIncidentOf(now, absl::StrCat(label("role"), ":", label("task")));
  }
  const std::string node = label("node");
  for (const pb::Incident& in : now.incidents) {
    if (in.open() && in.cause().kind() == "node" && in.cause().node() == node) return &in;
  }
  return nullptr;
}

}  // namespace

std::vector<FiringAlert> FirstHandAlerts(const ClusterView& view, const AlertContext& context) {
  std::vector<FiringAlert> out;
  AddTaskAlerts(view, context, out);
  for (const NodeInfo& n : view.nodes) {
    if (!n.self && n.status == "silent") out.push_back(NodeIsolated(n, context));
  }
  if (context.incidents == nullptr) return out;
  for (FiringAlert& a : out) {
    const pb::Incident* in = IncidentOf(a, view, *context.incidents);
    if (in == nullptr) continue;
    // A task's alert carries the id as a label too: Alertmanager groups by it (one notification
    // per incident), and the rules join it from trainscope_task_incident (the same alert from
    // either sender). A node's alert is one per node already, and several sidecars send it.
    if (a.labels.count("task")) a.labels["incident"] = in->id();
    a.annotations["incident"] = in->id();
    a.annotations["incident_summary"] = in->summary();
    a.annotations["incident_url"] =
        absl::StrCat(context.sidecar_url, "api/v1/incidents/", in->id());
  }
  return out;
}

std::string AlertKey(const std::map<std::string, std::string>& labels) {
  std::string key;
  for (const auto& [k, v] : labels) absl::StrAppend(&key, k, "=", v, "\x1f");
  return key;
}

std::string AlertsToJson(const std::vector<PostedAlert>& alerts, const std::string& generator_url,
                         double now_unix, double ttl_s) {
  nlohmann::json out = nlohmann::json::array();
  for (const PostedAlert& p : alerts) {
    const double starts = p.alert.starts_at > 0 ? p.alert.starts_at : now_unix;
    const double ends = p.resolved ? std::max(p.resolved_at, starts) : now_unix + ttl_s;
    out.push_back({{"labels", p.alert.labels},
                   {"annotations", p.alert.annotations},
                   {"startsAt", Rfc3339(starts)},
                   {"endsAt", Rfc3339(ends)},
                   {"generatorURL", generator_url}});
  }
  return out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace trainscope::sidecar
