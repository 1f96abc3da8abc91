// The bundle of one incident; see incident_bundle.h.
#include "trainscope/sidecar/incident_bundle.h"

#include <algorithm>
#include <map>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "trainscope/common/clock.h"
#include "trainscope/sidecar/incident_text.h"
#include "trainscope/sidecar/names.h"

namespace trainscope::sidecar {
namespace {

// How long before an incident its window starts: the requests that led to it.
constexpr double kLeadSeconds = 60;

std::string PercentEncoded(std::string_view text) {
  std::string out;
  for (unsigned char c : text) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
        c == '_' || c == '.' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      absl::StrAppendFormat(&out, "%%%02X", c);
    }
  }
  return out;
}

// The body of a 200 answer to GET `path`; otherwise why not, in words.
absl::StatusOr<std::string> Body(const SidecarGet& get, const std::string& path, int timeout_ms) {
  auto resp = get(path, timeout_ms);
  if (!resp.ok()) return resp.status();
  if (resp->status != 200) {
    std::string words = Printable(resp->body, 300);
    while (!words.empty() && (words.back() == '?' || words.back() == ' ')) words.pop_back();
    return absl::UnavailableError(
        absl::StrCat("HTTP ", resp->status, words.empty() ? "" : ": ", words));
  }
  return std::move(resp->body);
}

// `text` in lines of at most 100 bytes, broken at spaces, every line but the first after
// `indent` spaces.
std::string Wrap(std::string_view text, size_t indent) {
  constexpr size_t kWidth = 100;
  const size_t room = kWidth > indent + 30 ? kWidth - indent : 30;
  std::string out;
  while (text.size() > room) {
    size_t at = text.rfind(' ', room);
    if (at == std::string_view::npos || at == 0) at = room;
    out.append(text.substr(0, at)).append("\n").append(indent, ' ');
    text.remove_prefix(at);
    while (!text.empty() && text.front() == ' ') text.remove_prefix(1);
  }
  return out.append(text);
}

// The files made so far and what the README says of each.
class Bundle {
 public:
  // Adds a file; returns the name it got (made unique: "worker_0-2" after "worker_0").
  std::string Add(std::string name, std::string data, std::string what) {
    if (!names_.insert(name).second) {
      const size_t dot = name.find('.', name.rfind('/') + 1);
      for (int n = 2;; ++n) {
        std::string other = dot == std::string::npos
                                ? absl::StrCat(name, "-", n)
                                : absl::StrCat(name.substr(0, dot), "-", n, name.substr(dot));
        if (names_.insert(other).second) {
          name = std::move(other);
          break;
        }
      }
    }
    files_.push_back({name, std::move(data)});
    index_.emplace_back(name, std::move(what));
    return name;
  }
  void Missing(std::string name, std::string why) {
    missing_.emplace_back(std::move(name), std::move(why));
  }
  // The README (first) and the files.
  std::vector<TarFile> Finish(std::string head) {
    size_t width = 10;
    for (const auto& [name, what] : index_) width = std::max(width, name.size());
    std::string readme = std::move(head);
    absl::StrAppend(&readme, "\nFiles:\n", absl::StrFormat("  %-*s  ", width, "README.txt"),
                    "this file\n");
    for (const auto& [name, what] : index_) {
      absl::StrAppend(&readme, absl::StrFormat("  %-*s  ", width, name), Wrap(what, width + 4),
                      "\n");
    }
    if (!missing_.empty()) absl::StrAppend(&readme, "\nNot gathered:\n");
    for (const auto& [name, why] : missing_) {
      absl::StrAppend(&readme, "  ", Wrap(absl::StrCat(name, ": ", why), 4), "\n");
    }
    std::vector<TarFile> out;
    out.push_back({"README.txt", std::move(readme)});
    for (TarFile& f : files_) out.push_back(std::move(f));
    return out;
  }

 private:
  std::set<std::string> names_ = {"README.txt"};
  std::vector<TarFile> files_;
  std::vector<std::pair<std::string, std::string>> index_;
  std::vector<std::pair<std::string, std::string>> missing_;
};

// The tasks whose stacks the bundle holds: the affected ones and the cause's, in that order.
std::vector<std::string> TasksOf(const pb::Incident& in) {
  std::vector<std::string> tasks;
  std::set<std::string> seen;
  for (const pb::AffectedTask& a : in.affected()) {
    if (!a.task().empty() && seen.insert(a.task()).second) tasks.push_back(a.task());
  }
  if (in.cause().kind() != "node" && !in.cause().task().empty() &&
      seen.insert(in.cause().task()).second) {
    tasks.push_back(in.cause().task());
  }
  return tasks;
}

// The window of the requests wanted: from a minute before the incident to its end (now, open).
std::pair<double, double> WindowOf(const pb::Incident& in, double now) {
  return {in.started() - kLeadSeconds, in.open() || in.ended() <= 0 ? now : in.ended()};
}

// The slow and failed requests every node's sidecar kept of the window, each once.
void AddTraces(const pb::Incident& in, const std::vector<pb::NodeEvidence>& nodes, double now,
               Bundle& bundle) {
  const auto [from, to] = WindowOf(in, now);
  const std::string window =
      absl::StrCat("from ", LocalTime(from), " (a minute before it started) to ", LocalTime(to));
  for (const bool slow : {true, false}) {
    const char* file = slow ? "traces/slow.json" : "traces/errors.json";
    if (nodes.empty()) {
      bundle.Missing(file, "no sidecar answered /api/v1/evidence (see nodes/ above)");
      continue;
    }
    pb::RequestList all;
    std::set<std::string> seen;
    for (const pb::NodeEvidence& e : nodes) {
      for (const pb::RequestSummary& r : (slow ? e.slow() : e.errors()).requests()) {
        if (r.trace_id().empty() || seen.insert(r.trace_id()).second) *all.add_requests() = r;
      }
    }
    all = RequestsInWindow(std::move(all), from, to);
    auto* requests = all.mutable_requests();
    std::stable_sort(requests->begin(), requests->end(), [slow](const auto& a, const auto& b) {
      return slow ? a.duration_ms() > b.duration_ms() : a.start_unix() > b.start_unix();
    });
    bundle.Add(file, ApiJson(all) + "\n",
               absl::StrFormat(
                   "the %s ps requests that %s kept (as %s lists them, RequestList in "
                   "api.proto) that overlap the incident's window, %s: %d",
                   slow ? "slow" : "failed",
                   nodes.size() == 1 ? std::string("the sidecar")
                                     : absl::StrCat("the sidecars of ", nodes.size(), " nodes"),
                   std::string(slow ? names::kPathTracesSlow : names::kPathTracesErrors), window,
                   all.requests_size()));
  }
}

}  // namespace

bool IsIncidentId(std::string_view id) {
  if (id.empty() || id.size() > 64) return false;
  return std::all_of(id.begin(), id.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_' || c == '.';
  });
}

absl::StatusOr<pb::Incident> FetchIncident(const SidecarGet& get, const std::string& id) {
  if (!IsIncidentId(id)) {
    return absl::InvalidArgumentError(
        absl::StrCat("\"", Printable(id, 80),
                     "\" is not an incident id (like inc-3f2a9c0d1e4b: see "
                     "trainscopectl incidents)"));
  }
  auto resp = get(absl::StrCat(std::string(names::kPathIncidentsPrefix), id), 10000);
  if (!resp.ok()) return resp.status();
  if (resp->status == 404) {
    std::string words = Printable(resp->body, 300);
    while (!words.empty() && (words.back() == '?' || words.back() == ' ')) words.pop_back();
    return absl::NotFoundError(words.empty() ? absl::StrCat("no incident ", id) : words);
  }
  if (resp->status != 200) {
    return absl::UnavailableError(absl::StrCat("answered HTTP ", resp->status));
  }
  auto incident = ParseIncidentJson(resp->body);
  if (!incident.ok()) return incident.status();
  if (incident->id() != id) {
    return absl::InvalidArgumentError(
        absl::StrCat("asked for ", id, ", answered ", Printable(incident->id(), 64)));
  }
  return incident;
}

namespace {

// Each node's id in words, by its host name: "n2 (10.0.0.2:4317)".
using NodeNames = std::map<std::string, std::string>;
NodeNames NamesOf(const absl::StatusOr<pb::TaskList>& tasks) {
  NodeNames names;
  if (!tasks.ok()) return names;
  for (const pb::NodeView& n : tasks->nodes()) {
    if (!n.hostname().empty() && n.hostname() != n.node()) {
      names[n.node()] = absl::StrCat(Printable(n.hostname(), 64), " (", n.node(), ")");
    }
  }
  return names;
}
std::string NameOf(const NodeNames& names, const std::string& node) {
  auto it = names.find(node);
  return it == names.end() ? node : it->second;
}

// The snapshots of `task` kept as evidence of the incident, by the asked sidecar (`in`) or by any
// other node's (each once), newest first; and the nodes that kept them, in words.
std::pair<pb::StackList, std::string> EvidenceOf(const std::string& task, const pb::Incident& in,
                                                 const std::vector<pb::NodeEvidence>& nodes,
                                                 const NodeNames& names) {
  pb::StackList kept;
  kept.set_task(task);
  std::set<std::pair<int64_t, double>> seen;
  std::vector<std::string> keepers;
  auto take = [&](const pb::Incident& record, const std::string& node) {
    bool took = false;
    for (const pb::IncidentEvidence& e : record.evidence()) {
      if (e.task() != task || !e.has_snapshot()) continue;
      if (!seen.insert({e.snapshot().pid(), e.snapshot().taken_unix()}).second) continue;
      *kept.add_snapshots() = e.snapshot();
      took = true;
    }
    if (took && !node.empty()) keepers.push_back(NameOf(names, node));
  };
  take(in, nodes.empty() ? "" : nodes.front().node());
  for (size_t i = 1; i < nodes.size(); ++i) {
    if (nodes[i].held()) take(nodes[i].incident(), nodes[i].node());
  }
  auto* snaps = kept.mutable_snapshots();
  std::stable_sort(snaps->begin(), snaps->end(),
                   [](const auto& a, const auto& b) { return a.taken_unix() > b.taken_unix(); });
  return {std::move(kept), absl::StrJoin(keepers, ", ")};
}

// Each affected task's stacks: the snapshots kept as evidence, and (for the first few) what the
// sidecar has now.
void AddStacks(const SidecarGet& get, const pb::Incident& in,
               const std::vector<pb::NodeEvidence>& nodes, const NodeNames& names,
               const BundleOptions& options, Bundle& bundle) {
  const double now = options.now_unix;
  const std::vector<std::string> tasks = TasksOf(in);
  int asked = 0;
  for (const std::string& task : tasks) {
    const std::string base = "stacks/" + SafeFileName(task);
    const auto [kept, keepers] = EvidenceOf(task, in, nodes, names);
    bundle.Add(base + ".txt", StacksToText(kept, now),
               absl::StrCat(task, "'s threads in the ", kept.snapshots_size(),
                            " snapshot(s) kept as the incident's evidence",
                            keepers.empty() ? "" : " by the sidecar of ", keepers,
                            " (as /api/v1/stacks?format=text renders them)"));
    const std::string now_name = base + ".now.txt";
    if (asked >= options.max_live_stacks) {
      bundle.Missing(now_name, absl::StrCat("not asked: only the first ", options.max_live_stacks,
                                            " tasks' stacks are asked for"));
      continue;
    }
    ++asked;
    const std::string path =
        absl::StrCat(std::string(names::kPathStacks), "?task=", PercentEncoded(task));
    auto body = Body(get, path, 10000);
    absl::StatusOr<pb::StackList> list =
        body.ok() ? ParseStackListJson(*body) : absl::StatusOr<pb::StackList>(body.status());
    if (!list.ok()) {
      bundle.Missing(now_name, absl::StrCat(path, ": ", list.status().message()));
      continue;
    }
    bundle.Add(now_name, StacksToText(*list, now),
               absl::StrCat(task,
                            "'s snapshots as the sidecar had them when the bundle was "
                            "gathered (",
                            path, ", relayed to the node that watches it)"));
  }
}

// Every task's state at gathering time, and the nodes of the cluster (in tasks.json).
absl::StatusOr<pb::TaskList> AddTasks(const SidecarGet& get, Bundle& bundle) {
  auto tasks_body = Body(get, std::string(names::kPathTasks), 5000);
  absl::StatusOr<pb::TaskList> task_list = tasks_body.ok()
                                               ? ParseTaskListJson(*tasks_body)
                                               : absl::StatusOr<pb::TaskList>(tasks_body.status());
  if (task_list.ok()) {
    bundle.Add("tasks.json", ToJson(*task_list) + "\n",
               absl::StrCat("every task's state when the bundle was gathered, and every node's (",
                            std::string(names::kPathTasks), "; TaskList in sidecar.proto)"));
  } else {
    bundle.Missing("tasks.json", absl::StrCat(std::string(names::kPathTasks), ": ",
                                              task_list.status().message()));
  }
  return task_list;
}

// What the asked sidecar (first; without a node) and then every other node's (relayed by it
// through the exchange) hold of the incident; each other node's record is a file of its own.
std::vector<pb::NodeEvidence> GatherEvidence(const SidecarGet& get, const pb::Incident& in,
                                             const absl::StatusOr<pb::TaskList>& tasks,
                                             const NodeNames& names, const BundleOptions& options,
                                             Bundle& bundle) {
  const auto [from, to] = WindowOf(in, options.now_unix);
  const std::string query =
      absl::StrFormat("%s?incident=%s&from=%.3f&to=%.3f", std::string(names::kPathEvidence),
                      PercentEncoded(in.id()), from, to);
  std::vector<pb::NodeEvidence> out;
  auto ask = [&](const std::string& node) -> absl::StatusOr<pb::NodeEvidence> {
    auto body = Body(
        get, node.empty() ? query : absl::StrCat(query, "&node=", PercentEncoded(node)), 10000);
    return body.ok() ? ParseNodeEvidenceJson(*body)
                     : absl::StatusOr<pb::NodeEvidence>(body.status());
  };
  auto self = ask("");
  if (!self.ok()) {
    bundle.Missing("nodes/",
                   absl::StrCat(std::string(names::kPathEvidence), ": ", self.status().message()));
    return out;
  }
  out.push_back(*std::move(self));
  if (!tasks.ok()) return out;
  int asked = 0;
  for (const pb::NodeView& n : tasks->nodes()) {
    if (n.node().empty() || n.node() == out.front().node() || n.node() == tasks->node()) continue;
    const std::string file = absl::StrCat("nodes/", SafeFileName(n.node()), ".json");
    if (asked++ >= options.max_nodes) {
      bundle.Missing(file, absl::StrCat("not asked: only the first ", options.max_nodes,
                                        " other nodes are asked"));
      continue;
    }
    auto e = ask(n.node());
    if (!e.ok()) {
      bundle.Missing(file, std::string(e.status().message()));
      continue;
    }
    const pb::Incident& record = e->incident();
    bundle.Add(
        file, ApiJson(*e) + "\n",
        absl::StrCat(
            "what the sidecar of node ", NameOf(names, n.node()), " holds of the incident (",
            std::string(names::kPathEvidence), "; NodeEvidence in sidecar.proto): ",
            e->held() ? absl::StrCat("its record of it, with its timeline, the ",
                                     HumanDuration(record.lost_seconds()), " lost it counted and ",
                                     record.evidence_size(), " piece(s) of evidence")
                      : "no record of it",
            "; and the ", e->slow().requests_size(), " slow and ", e->errors().requests_size(),
            " failed requests it kept of the window",
            e->dropped().empty() ? "" : absl::StrCat(" (", e->dropped(), ")")));
    out.push_back(*std::move(e));
  }
  return out;
}

// The README's head: what the bundle is, of which incident, from where, when.
std::string ReadmeHead(const pb::Incident& in, const BundleOptions& options) {
  const double now = options.now_unix;
  std::string head = absl::StrCat(
      Wrap(absl::StrCat("trainscope incident bundle: what ",
                        options.gatherer.empty() ? "trainscopectl" : options.gatherer,
                        " gathered about one incident, for a bug report or a post-mortem."),
           0),
      "\n\nincident:  ", Printable(in.id(), 64), " (", in.open() ? "open" : "closed", ", ",
      Printable(in.kind(), 20), ", cause ", Printable(CauseWords(in.cause()), 200), ")\n");
  if (!in.summary().empty()) {
    absl::StrAppend(&head, "           ", Wrap(Printable(in.summary(), 600), 11), "\n");
  }
  absl::StrAppend(&head, "cluster:   ", Printable(in.cluster(), 80), "\n",
                  "sidecar:   ", options.sidecar, "\n", "gathered:  ", LocalTime(now), "\n",
                  "lost:      ", HumanDuration(in.lost_seconds()), " of training, over ",
                  in.affected_size(), " affected task(s)\n\n",
                  Wrap("incident.json is the incident as that sidecar held it; nodes/ holds "
                       "what every other node's sidecar held of it, relayed by that sidecar. "
                       "The stacks/*.txt are the snapshots any of them kept as evidence; the "
                       "traces gather every node's. tasks.json and the *.now.txt stacks are "
                       "what was answered when the bundle was gathered. The JSON files are "
                       "protobuf's JSON mapping of proto/trainscope/sidecar/v1/*.proto; "
                       "docs/sidecar.md describes every route.",
                       0),
                  "\n");
  return head;
}

}  // namespace

std::vector<TarFile> GatherBundle(const SidecarGet& get, const pb::Incident& in,
                                  const BundleOptions& options) {
  Bundle bundle;
  bundle.Add(
      "incident.json", ApiJson(in) + "\n",
      absl::StrCat("the incident in full (", std::string(names::kPathIncidentsPrefix), in.id(),
                   "; Incident in sidecar.proto, protobuf's JSON mapping), with the "
                   "snapshots kept as evidence"));
  bundle.Add("timeline.txt", TimelineText(in),
             "its timeline, one event a line (times in the gathering machine's zone)");
  const absl::StatusOr<pb::TaskList> tasks = AddTasks(get, bundle);
  const NodeNames names = NamesOf(tasks);
  const std::vector<pb::NodeEvidence> nodes =
      GatherEvidence(get, in, tasks, names, options, bundle);
  AddStacks(get, in, nodes, names, options, bundle);
  AddTraces(in, nodes, options.now_unix, bundle);
  return bundle.Finish(ReadmeHead(in, options));
}

}  // namespace trainscope::sidecar
