// Merging and reading the cluster view; see cluster_view.h.
#include "trainscope/sidecar/cluster_view.h"

#include <map>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace trainscope::sidecar {
namespace {

bool IsWildcardOrLoopback(const std::string& host) {
  return host == "0.0.0.0" || host == "::" || host == "localhost" || host == "::1" ||
         host.rfind("127.", 0) == 0;
}

std::string Shorten(const std::string& s, size_t n) {
  return s.size() <= n ? s : s.substr(0, n - 3) + "...";
}

}  // namespace

bool SameAddress(const std::string& a, const std::string& b) {
  if (a == b) return true;
  auto ha = ParseHostPort(a);
  auto hb = ParseHostPort(b);
  if (!ha.ok() || !hb.ok()) return false;
  if (ha->port != hb->port) return false;
  if (ha->host == hb->host) return true;
  return IsWildcardOrLoopback(ha->host) || IsWildcardOrLoopback(hb->host);
}

std::vector<TaskView> MergeViews(const std::string& cluster, const ClusterSpec& spec,
                                 const std::vector<TaskView>& local,
                                 const std::vector<PeerReport>& peers, double now_unix) {
  std::map<TaskRef, TaskView> merged;
  for (const TaskView& v : local) merged[v.task] = v;
  std::map<TaskRef, bool> is_local;
  for (const TaskView& v : local) is_local[v.task] = true;
  for (const PeerReport& p : peers) {
    if (!p.ok) continue;
    for (const TaskView& v : p.views) {
      if (!v.cluster.empty() && v.cluster != cluster) continue;
      if (!spec.FindAddress(v.task) || is_local.count(v.task)) continue;
      auto it = merged.find(v.task);
      if (it == merged.end() || v.observed_at > it->second.observed_at) {
        TaskView copy = v;
        copy.cluster = cluster;
        copy.source = p.sidecar;
        copy.address = *spec.FindAddress(v.task);
        merged[v.task] = std::move(copy);
      }
    }
  }
  std::vector<std::string> tried;
  for (const PeerReport& p : peers) {
    tried.push_back(p.ok ? p.sidecar : absl::StrCat(p.sidecar, " (", Shorten(p.error, 80), ")"));
  }
  for (const TaskRef& t : spec.AllTasks()) {
    if (merged.count(t)) continue;
    TaskView v;
    v.cluster = cluster;
    v.task = t;
    v.address = *spec.FindAddress(t);
    v.state = TaskState::kUnreachable;
    v.since = now_unix;
    v.observed_at = now_unix;
    v.reason = tried.empty()
                   ? "not watched by this sidecar, and no peer sidecar is configured"
                   : absl::StrCat("no sidecar reports on it; asked: ", absl::StrJoin(tried, ", "));
    merged[t] = std::move(v);
  }
  std::vector<TaskView> out;
  for (auto& [t, v] : merged) out.push_back(std::move(v));
  return out;
}

void AnnotateBlocked(std::vector<TaskView>& views, const ClusterSpec& spec) {
  std::map<TaskRef, const TaskView*> by_task;
  for (const TaskView& v : views) by_task[v.task] = &v;
  std::vector<std::pair<size_t, std::string>> notes_for;
  for (size_t i = 0; i < views.size(); ++i) {
    const TaskView& v = views[i];
    if (v.state != TaskState::kBlocked) continue;
    std::vector<std::string> notes;
    for (const BlockedPeer& b : v.blocked_on) {
      std::string name = b.peer.ShortName();
      auto it = by_task.find(b.peer);
      const TaskView* pv = it == by_task.end() ? nullptr : it->second;
      if (pv != nullptr && !pv->listen_address.empty() && !b.address.empty() &&
          !SameAddress(pv->listen_address, b.address)) {
        notes.push_back(absl::StrCat(name, " is listening on ", pv->listen_address, ", not ",
                                     b.address, ": fix the cluster spec"));
        continue;
      }
      auto spec_address = spec.FindAddress(b.peer);
      if (!spec_address) {
        notes.push_back(absl::StrCat(name, " is not in this sidecar's cluster spec"));
      } else if (!b.address.empty() && !SameAddress(*spec_address, b.address)) {
        notes.push_back(absl::StrCat(v.task.ShortName(), " uses ", b.address, " for ", name,
                                     " but the cluster spec here says ", *spec_address,
                                     ": the tasks' cluster specs differ"));
      }
      if (pv != nullptr && pv->state == TaskState::kMissing) {
        notes.push_back(absl::StrCat(name, " is missing: it has not answered ",
                                     pv->source.empty() ? "this sidecar" : pv->source,
                                     " either; is it started?"));
      } else if (pv != nullptr && pv->state != TaskState::kUp && pv->state != TaskState::kSlow &&
                 pv->state != TaskState::kBlocked && pv->state != TaskState::kStalled) {
        notes.push_back(absl::StrCat(name, " is ", std::string(StateName(pv->state)), " (",
                                     Shorten(pv->reason, 120), ")"));
      } else if (pv != nullptr && pv->state == TaskState::kBlocked) {
        notes.push_back(absl::StrCat(name, " is itself blocked"));
      }
    }
    if (!notes.empty()) notes_for.push_back({i, absl::StrJoin(notes, "; ")});
  }
  for (auto& [i, n] : notes_for) absl::StrAppend(&views[i].reason, "; ", n);
}

bool IsDeadlineError(absl::string_view error) {
  return absl::StrContains(error, "DEADLINE_EXCEEDED") ||
         absl::StrContains(absl::AsciiStrToLower(error), "deadline exceeded") ||
         absl::StrContains(error, "no answer within");
}

void MarkPartitions(std::vector<TaskView>& views, double now_unix) {
  std::vector<std::pair<size_t, std::string>> marks;
  for (size_t i = 0; i < views.size(); ++i) {
    const TaskView& t = views[i];
    if (t.state != TaskState::kUp) continue;
    std::vector<std::string> reporters;
    std::string last_error;
    for (const TaskView& r : views) {
      if (r.task == t.task || r.state == TaskState::kDead || r.state == TaskState::kMissing ||
          r.state == TaskState::kDone) {
        continue;
      }
      for (const PeerInfo& p : r.peers) {
        if (p.peer != t.task || p.connected || p.consecutive_failures < 3) continue;
        if (p.seconds_since_success >= 0 && p.seconds_since_success < 3) continue;
        // A peer that answers too slowly is reached: that is a slow or overloaded task (its
        // latency and deadline alerts), not a partition.
        if (IsDeadlineError(p.last_error)) continue;
        reporters.push_back(r.task.ShortName());
        if (last_error.empty()) last_error = p.last_error;
      }
    }
    if (reporters.empty()) continue;
    marks.push_back(
        {i, absl::StrCat("partition: answers its own sidecar",
                         t.source.empty() ? "" : " (" + t.source + ")", ", but ",
                         absl::StrJoin(reporters, ", "), " cannot reach it at ", t.address,
                         last_error.empty() ? "" : " (" + Shorten(last_error, 120) + ")")});
  }
  for (auto& [i, reason] : marks) {
    views[i].state = TaskState::kUnreachable;
    views[i].reason = std::move(reason);
    views[i].since = now_unix;
  }
}

}  // namespace trainscope::sidecar
