#include "trainscope/sidecar/incidents.h"

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <set>
#include <tuple>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "trainscope/common/clock.h"

namespace trainscope::sidecar {
namespace {

// A task blocked on a peer that answers again (a restarted ps it is reconnecting to) stays with
// that peer's open incident; with none open, it is an incident of its own once held this long.
constexpr double kBlockedOnAWellPeerAfterS = 2.5;
// A worker well again whose steps do not move is held by its incident at most this long.
constexpr double kRecoveringAtMostS = 30;
constexpr int kMaxDepth = 8;  // Waits followed from a task to its root.
constexpr size_t kMaxSummaryReason = 100;

bool Well(TaskState s) { return s == TaskState::kUp || s == TaskState::kDone; }

bool OwnFault(TaskState s) {
  return s == TaskState::kDead || s == TaskState::kHung || s == TaskState::kMissing ||
         s == TaskState::kUnreachable;
}

// The first clause of a reason, short: what a one-line summary quotes.
std::string FirstClause(const std::string& reason) {
  std::string s = reason.substr(0, reason.find("; "));
  if (s.size() > kMaxSummaryReason) s = s.substr(0, kMaxSummaryReason - 3) + "...";
  return s;
}

struct Wait {
  TaskRef peer;
  std::string in;  // "Pull to ps:1", "" when no call says.
};

// "Pull/Push to ps:1": the calls `v` has in flight to `peer`.
std::string CallsTo(const TaskView& v, const TaskRef& peer) {
  std::set<std::string> methods;
  for (const CallInFlight& c : v.inflight) {
    if (!c.served && c.peer == peer) methods.insert(c.method);
  }
  if (methods.empty()) return "";
  return absl::StrCat(absl::StrJoin(methods, "/"), " to ", peer.ShortName());
}

// The peers a stuck or slow task waits on: those it is blocked on, then its long calls in
// flight, then (slow) the peer that takes most of its step.
std::vector<Wait> WaitsOf(const TaskView& v) {
  std::vector<Wait> waits;
  for (const BlockedPeer& b : v.blocked_on) waits.push_back({b.peer, CallsTo(v, b.peer)});
  for (const CallInFlight& c : v.inflight) {
    if (WaitsLong(c)) waits.push_back({c.peer, CallsTo(v, c.peer)});
  }
  if (v.state == TaskState::kSlow) {
    for (const PeerInfo& p : v.peers) {
      if (p.step_share >= 0.5) waits.push_back({p.peer, CallsTo(v, p.peer)});
    }
  }
  return waits;
}

struct Resolver {
  const ClusterView& view;
  double now;
  double missing_after_s;
  std::map<TaskRef, const TaskView*> tasks;
  std::map<std::string, const NodeInfo*> nodes;
  std::set<std::pair<TaskRef, TaskRef>> slow_links;

  Resolver(const ClusterView& v, double now_unix, double missing_after)
      : view(v), now(now_unix), missing_after_s(missing_after) {
    for (const TaskView& t : v.tasks) tasks[t.task] = &t;
    for (const NodeInfo& n : v.nodes) nodes[n.id] = &n;
    for (const SlowLink& l : v.worker_ps.slow_links) slow_links.insert({l.from, l.to});
  }

  const TaskView* Find(const TaskRef& t) const {
    auto it = tasks.find(t);
    return it == tasks.end() ? nullptr : it->second;
  }

  std::optional<Holding> Resolve(const TaskView& v, int depth) const;
  std::optional<Holding> Own(const TaskView& v) const;
  std::optional<Holding> Partition(const TaskView& v) const;
  std::optional<Holding> NodeCut(const TaskView& v) const;
  bool WatcherStoppedAMoment(const TaskView& v) const;
  std::optional<Holding> Behind(const TaskView& v, int depth) const;
};

// Never heard from: no heartbeat of its own reached any sidecar (a remote task's record not yet
// in, a task not yet started).
bool NeverHeard(const TaskView& v) { return v.incarnation == 0 && v.pid == 0 && v.steps == 0; }

std::optional<Holding> Resolver::Own(const TaskView& v) const {
  const bool quiet =
      v.state == TaskState::kMissing || (v.state == TaskState::kUnreachable && NeverHeard(v));
  if (quiet && (v.since <= 0 || now - v.since < missing_after_s)) {
    return std::nullopt;  // Not heard yet, or quiet for a moment: not yet anyone's concern.
  }
  Holding h;
  h.cause = {"task", v.task.ShortName(), ""};
  h.kind = std::string(StateName(v.state));
  h.since = v.since;
  return h;
}

// A task partitioned from a peer: the link between their nodes (or the two tasks, on one node).
std::optional<Holding> Resolver::Partition(const TaskView& v) const {
  for (const PartitionInfo& p : view.partitions) {
    if (p.a != v.task) continue;
    Holding h;
    h.kind = "partition";
    h.since = p.since;
    if (!p.a_node.empty() && !p.b_node.empty() && p.a_node != p.b_node) {
      h.cause = {"link", std::min(p.a_node, p.b_node), std::max(p.a_node, p.b_node)};
    } else {
      h.cause = {"link", p.a.ShortName(), p.b.ShortName()};
    }
    h.waits_in = CallsTo(v, p.b);
    return h;
  }
  return std::nullopt;
}

// A task unheard only because its node's sidecar stopped (a restart, an upgrade) a moment ago:
// no fault of the task's, and no one's incident unless the sidecar stays away.
bool Resolver::WatcherStoppedAMoment(const TaskView& v) const {
  if (v.state != TaskState::kUnreachable && v.state != TaskState::kMissing) return false;
  auto it = nodes.find(v.node);
  return it != nodes.end() && it->second->status == "left" &&
         now - it->second->since < missing_after_s;
}

// A task its node's sidecar no longer reports on, because that node is cut off or down (or its
// sidecar stopped and stays away).
std::optional<Holding> Resolver::NodeCut(const TaskView& v) const {
  if (v.state != TaskState::kUnreachable && v.state != TaskState::kMissing) return std::nullopt;
  if (view.isolated_since && !view.self.empty() && v.node != view.self) {
    // This node is the one cut off: what it cannot hear of is held by its own cut, as the
    // others name it.
    Holding h;
    h.cause = {"node", view.self, ""};
    h.kind = "isolated";
    h.since = *view.isolated_since;
    return h;
  }
  auto it = nodes.find(v.node);
  if (it == nodes.end()) return std::nullopt;
  const std::string& s = it->second->status;
  if (s != "silent" && s != "down" && s != "isolated" && s != "left") return std::nullopt;
  Holding h;
  h.cause = {"node", v.node, ""};
  h.kind = "isolated";
  h.since = it->second->since > 0 ? it->second->since : v.since;
  return h;
}

// A first-hand task still called up whose call to a peer that is not well has taken a while:
// held by what holds the peer already (its own state says so a moment later).
std::optional<Holding> Resolver::Behind(const TaskView& v, int depth) const {
  for (const CallInFlight& c : v.inflight) {
    const TaskView* peer = WaitsLong(c) ? Find(c.peer) : nullptr;
    if (peer == nullptr || peer == &v || Well(peer->state)) continue;
    if (auto root = Resolve(*peer, depth + 1)) {
      root->waits_in = CallsTo(v, c.peer);
      return root;
    }
  }
  return std::nullopt;
}

std::optional<Holding> Resolver::Resolve(const TaskView& v, int depth) const {
  // A partition holds a task from the moment it is named, before the task's calls fail.
  if (v.state != TaskState::kDone) {
    if (auto p = Partition(v)) return p;
  }
  if (v.state == TaskState::kUp && v.source.empty() && depth < kMaxDepth) return Behind(v, depth);
  if (Well(v.state) || WatcherStoppedAMoment(v)) return std::nullopt;
  if (auto n = NodeCut(v)) return n;
  if (OwnFault(v.state) || depth >= kMaxDepth) return Own(v);
  bool pending = false;  // Waits on a peer that is not yet anyone's concern (missing a moment).
  for (const Wait& w : WaitsOf(v)) {
    const TaskView* peer = Find(w.peer);
    if (peer == nullptr || peer == &v) continue;
    if (slow_links.contains({v.task, w.peer})) {
      Holding h{{"link", v.task.ShortName(), w.peer.ShortName()}, "slow", "", w.in, v.since};
      return h;
    }
    std::optional<Holding> root = Resolve(*peer, depth + 1);
    if (!root && Well(peer->state)) {
      // Blocked on a peer that answers (it restarted, or only this task cannot reach it): the
      // peer's incident, if one is open, else the link's (Track decides).
      root = Holding{{"task", w.peer.ShortName(), ""}, "", "", "", v.since};
    }
    if (!root) {
      pending = true;
      continue;
    }
    root->waits_in = w.in;
    return root;
  }
  if (pending) return std::nullopt;
  return Own(v);
}

// Two nodes' starts of one fault are within this of each other (each dates it by its own view).
constexpr double kSameFaultS = 10;
// A closed incident still takes its owner's id this long after it closed (a node cut off closes
// its own as the link comes back, when it first hears the owner), and the owner keeps naming it.
constexpr double kRenameClosedWithinS = 30;
// A worker's steps that fall short of their pace this long after an incident let go of it are
// that incident's (gRPC reconnecting, a link dropping again faster than a detection).
constexpr double kAftermathS = 10;

// The node that owns an incident: its cause's (a task's node, a link's failing side). A node cut
// off cannot speak for its own cut while it lasts: the smallest other node id owns that, which
// every node, the one cut off too, finds alike.
std::string OwnerOf(const CauseKey& key, const pb::IncidentCause& cause, const ClusterView& view) {
  if (key.kind != "node") return cause.node();
  std::string owner;
  for (const NodeInfo& n : view.nodes) {
    if (n.id != key.a && (owner.empty() || n.id < owner)) owner = n.id;
  }
  return owner;
}

// "inc-" and 12 lower-case hex digits: IncidentId's form, the only one taken from a peer.
bool IsIncidentId(std::string_view id) {
  if (id.size() != 16 || id.substr(0, 4) != "inc-") return false;
  return std::all_of(id.begin() + 4, id.end(),
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

uint64_t Fnv1a(std::string_view s) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ULL;
  return h;
}

CauseKey KeyOf(const pb::IncidentCause& c) {
  if (c.kind() == "node") return {"node", c.node(), ""};
  if (c.kind() == "link") return {"link", c.task().empty() ? c.node() : c.task(), c.peer()};
  return {"task", c.task(), ""};
}

void FillCause(const CauseKey& key, const ClusterView& view, pb::IncidentCause* out) {
  out->set_kind(key.kind);
  if (key.kind == "node") {
    out->set_node(key.a);
    return;
  }
  const TaskView* t = FindTask(view.tasks, key.a);
  if (t != nullptr || key.kind == "task") {
    out->set_task(key.a);
    if (t != nullptr) out->set_node(t->node);
  } else {
    out->set_node(key.a);
  }
  out->set_peer(key.b);
}

void AddLine(pb::Incident& incident, double now, std::string text, int max_lines) {
  if (incident.timeline_size() >= max_lines) incident.mutable_timeline()->DeleteSubrange(1, 1);
  pb::IncidentEvent* e = incident.add_timeline();
  e->set_unix_seconds(now);
  e->set_text(std::move(text));
}

// What a cause's state is, in words: its reason (task), its node's (node), the link's error.
std::string CauseReason(const pb::Incident& incident, const ClusterView& view) {
  const pb::IncidentCause& c = incident.cause();
  if (c.kind() == "task") {
    const TaskView* t = FindTask(view.tasks, c.task());
    return t == nullptr ? "" : FirstClause(t->reason);
  }
  if (c.kind() == "node") {
    for (const NodeInfo& n : view.nodes) {
      if (n.id == c.node()) return FirstClause(n.reason);
    }
    return "";
  }
  for (const PartitionInfo& p : view.partitions) {
    if (p.a.ShortName() == c.task() || p.a_node == c.node() || p.b_node == c.node()) {
      return FirstClause(p.error);
    }
  }
  return "";
}

// What a snapshot's main thread does, as a signature: its innermost frames that name a function
// of the program (not of libc or libstdc++), and the call it sleeps in.
std::string MainThreadSignature(const pb::StackSnapshot& s) {
  for (const pb::ThreadStack& t : s.threads()) {
    if (t.tid() != s.pid()) continue;
    std::vector<std::string> frames;
    for (const pb::StackFrame& f : t.frames()) {
      if (f.function().empty() || absl::StartsWith(f.module(), "libc.") ||
          absl::StartsWith(f.module(), "libstdc++") || absl::StartsWith(f.module(), "libpthread")) {
        continue;
      }
      frames.push_back(f.function());
      if (frames.size() == 3) break;
    }
    if (frames.empty()) return "";
    return absl::StrCat(absl::StrJoin(frames, " < "), " (", t.syscall(), ")");
  }
  return "";
}

// Keeps the newest snapshot of a task the incident holds, taken since it began, as evidence.
void KeepSnapshot(pb::Incident& in, const pb::StackSnapshot& snap, int max_evidence) {
  if (snap.taken_unix() < in.started()) return;
  pb::IncidentEvidence* kept = nullptr;
  for (pb::IncidentEvidence& e : *in.mutable_evidence()) {
    if (e.kind() == "snapshot" && e.task() == snap.task()) kept = &e;
  }
  if (kept == nullptr) {
    if (in.evidence_size() >= max_evidence) return;
    kept = in.add_evidence();
    kept->set_kind("snapshot");
    kept->set_task(snap.task());
  } else if (kept->unix_seconds() >= snap.taken_unix()) {
    return;
  }
  kept->set_unix_seconds(snap.taken_unix());
  kept->set_summary(snap.summary());
  *kept->mutable_snapshot() = snap;
}

bool Worse(const std::string& kind, const std::string& than) {
  TaskState a, b;
  if (!ParseStateName(kind, &a) || !ParseStateName(than, &b)) return false;
  return Severity(a) > Severity(b);
}

}  // namespace

std::string CompressTasks(std::vector<std::string> names) {
  std::map<std::string, std::vector<int>> by_role;
  std::vector<std::string> other;
  for (const std::string& n : names) {
    auto t = ParseTaskRef(n);
    if (t.ok()) {
      by_role[t->role].push_back(t->index);
    } else {
      other.push_back(n);
    }
  }
  std::vector<std::string> parts;
  for (auto& [role, indices] : by_role) {
    std::sort(indices.begin(), indices.end());
    std::vector<std::string> runs;
    for (size_t i = 0; i < indices.size();) {
      size_t j = i;
      while (j + 1 < indices.size() && indices[j + 1] == indices[j] + 1) ++j;
      runs.push_back(j == i ? absl::StrCat(indices[i]) : absl::StrCat(indices[i], "-", indices[j]));
      i = j + 1;
    }
    parts.push_back(absl::StrCat(role, ":", absl::StrJoin(runs, ",")));
  }
  for (const std::string& o : other) parts.push_back(o);
  return absl::StrJoin(parts, " ");
}

std::string OddOneOut(const pb::Incident& incident) {
  std::map<std::string, std::vector<const pb::IncidentEvidence*>> groups;
  for (const pb::IncidentEvidence& e : incident.evidence()) {
    if (e.kind() != "snapshot") continue;
    const std::string sig = MainThreadSignature(e.snapshot());
    if (!sig.empty()) groups[sig].push_back(&e);
  }
  if (groups.size() != 2) return "";
  auto odd = groups.begin(), many = std::next(groups.begin());
  if (odd->second.size() > many->second.size()) std::swap(odd, many);
  if (odd->second.size() != 1 || many->second.size() < 2) return "";
  std::vector<std::string> names;
  for (const pb::IncidentEvidence* e : many->second) names.push_back(e->task());
  const pb::IncidentEvidence& lone = *odd->second[0];
  std::string many_words = many->second[0]->summary();
  // "main thread waiting 3.2 s in Pull to ps:1" -> "wait in Pull to ps:1"
  if (size_t in = many_words.find(" in ");
      absl::StartsWith(many_words, "main thread waiting") && in != std::string::npos) {
    many_words = absl::StrCat("wait", many_words.substr(in));
  }
  return absl::StrCat(CompressTasks(names), " ", many_words.empty() ? "wait alike" : many_words,
                      "; ", lone.task(), "'s main thread is in ", odd->first);
}

std::string CauseKey::Text() const {
  if (kind == "node") return absl::StrCat("node ", a);
  if (kind == "link") return absl::StrCat(a, " <-> ", b);
  return a;
}

std::map<TaskRef, Holding> RootCauses(const ClusterView& view, double now, double missing_after_s) {
  Resolver r(view, now, missing_after_s);
  std::map<TaskRef, Holding> out;
  for (const TaskView& v : view.tasks) {
    std::optional<Holding> h = r.Resolve(v, 0);
    if (!h) continue;
    h->how = std::string(StateName(v.state));
    out[v.task] = std::move(*h);
  }
  return out;
}

std::string IncidentId(const std::string& cluster, const CauseKey& key, double started) {
  // Nodes see the start of one fault within a second or so of each other (a partition's, each
  // from its own side): the id takes the start to 10 s.
  const int64_t tens = std::llround(started / 10);
  const uint64_t h = Fnv1a(absl::StrCat(cluster, "|", key.kind, "|", key.a, "|", key.b, "|", tens));
  char buf[24];
  std::snprintf(buf, sizeof(buf), "inc-%012" PRIx64, static_cast<uint64_t>(h & 0xffffffffffffULL));
  return buf;
}

std::string IncidentSummary(const pb::Incident& incident, const std::string& cause_reason,
                            double now) {
  const double end = incident.open() ? now : incident.ended();
  const pb::IncidentCause& c = incident.cause();
  std::string cause = c.kind() == "task" ? c.task()
                      : c.kind() == "node"
                          ? absl::StrCat("node ", c.node())
                          : absl::StrCat(c.task().empty() ? c.node() : c.task(), " <-> ", c.peer());
  // "worker:1 stalled, then dead (...) for 31 s": it was not dead all that time.
  std::string s = incident.first_kind().empty()
                      ? absl::StrCat(cause, " ", incident.kind())
                      : absl::StrCat(cause, " ", incident.first_kind(), ", then ", incident.kind());
  if (!cause_reason.empty()) absl::StrAppend(&s, " (", cause_reason, ")");
  absl::StrAppend(&s, " for ", HumanDuration(std::max(0.0, end - incident.started())));
  std::vector<std::string> held;
  std::set<std::string> where;
  for (const pb::AffectedTask& a : incident.affected()) {
    if (a.task() == c.task() && c.kind() == "task") continue;
    held.push_back(a.task());
    where.insert(a.waits_in().empty() ? a.how() : absl::StrCat("waiting in ", a.waits_in()));
  }
  if (held.empty()) return s;
  // In the order of the spec's names (worker:2 before worker:10), not of who was held first: a
  // summary does not change with which worker a tick happened to see first.
  auto order = [](const std::string& name) {
    auto ref = ParseTaskRef(name);
    return ref.ok() ? std::make_tuple(0, ref->role, ref->index, std::string())
                    : std::make_tuple(1, std::string(), 0, name);
  };
  std::sort(held.begin(), held.end(),
            [&](const std::string& a, const std::string& b) { return order(a) < order(b); });
  std::string names = held.size() > 4
                          ? absl::StrCat(held.size(), " tasks (", held[0], ", ", held[1], ", ...)")
                          : absl::StrJoin(held, ", ");
  if (held.size() >= 2 && held.size() <= 4) {
    const size_t last = names.rfind(", ");
    names.replace(last, 2, " and ");
  }
  absl::StrAppend(&s, ", holding ", names);
  if (where.size() == 1) absl::StrAppend(&s, " (", *where.begin(), ")");
  return s;
}

IncidentBook::IncidentBook(IncidentBookOptions options) : options_(options) {}

void IncidentBook::Changed(const pb::Incident& incident) { changed_[incident.id()] = incident; }

IncidentBook::Open& IncidentBook::OpenFor(const Holding& h, const ClusterView& view, double now) {
  if (auto it = open_.find(h.cause); it != open_.end()) return it->second;
  // The same cause back soon after its incident closed: that incident again.
  for (auto it = closed_.rbegin(); it != closed_.rend(); ++it) {
    if (KeyOf(it->cause()) != h.cause || now - it->ended() > options_.reopen_within_s) continue;
    Open& o = open_[h.cause];
    o.incident = std::move(*it);
    o.key = h.cause;
    closed_.erase(std::next(it).base());
    o.incident.set_open(true);
    o.incident.set_ended(0);
    AddLine(o.incident, now, absl::StrCat(h.cause.Text(), " is ", h.kind, " again"),
            options_.max_timeline);
    return o;
  }
  Open& o = open_[h.cause];
  o.key = h.cause;
  pb::Incident& in = o.incident;
  const double started = h.since > 0 && h.since <= now ? h.since : now;
  in.set_id(IncidentId(view.cluster, h.cause, started));
  in.set_cluster(view.cluster);
  in.set_kind(h.kind);
  FillCause(h.cause, view, in.mutable_cause());
  in.set_owner(OwnerOf(h.cause, in.cause(), view));
  in.set_started(started);
  in.set_open(true);
  AddLine(in, started, absl::StrCat(h.cause.Text(), " ", h.kind, ": ", CauseReason(in, view)),
          options_.max_timeline);
  return o;
}

bool IncidentBook::Adopt(pb::Incident& in, const ClusterView& view, double now) {
  if (in.owner().empty() || in.owner() == view.self) return false;
  const CauseKey key = KeyOf(in.cause());
  for (const PeerIncident& p : view.peer_incidents) {
    if (p.node != in.owner() || CauseKey{p.cause_kind, p.cause_a, p.cause_b} != key) continue;
    // Another fault of the same cause (a stale record of an owner cut off since), an id not of
    // ours, or one this book holds already: keep this node's name.
    if (p.id == in.id() || !IsIncidentId(p.id) || !std::isfinite(p.started) ||
        std::abs(p.started - in.started()) > kSameFaultS || Find(p.id) != nullptr) {
      return false;
    }
    const std::string former = in.id();
    changed_.erase(former);
    ledger_.Rename(former, p.id);
    in.add_former_ids(former);
    in.set_id(p.id);
    in.set_started(p.started);
    AddLine(in, now,
            absl::StrCat("named ", p.id, " as its owner, node ", p.node, ", names it (was ", former,
                         " here)"),
            options_.max_timeline);
    return true;
  }
  return false;
}

void IncidentBook::Update(Open& o, const std::map<TaskRef, const Holding*>& held,
                          const ClusterView& view, const NewestStacks* stacks, double now) {
  pb::Incident& in = o.incident;
  o.restored = false;
  for (const auto& [t, h] : held) {
    if (t.ShortName() == o.key.a && o.key.kind == "task" && Worse(h->how, in.kind())) {
      AddLine(in, now, absl::StrCat(o.key.a, " is now ", h->how), options_.max_timeline);
      if (in.first_kind().empty()) in.set_first_kind(in.kind());
      in.set_kind(h->how);
    }
    pb::AffectedTask* a = nullptr;
    for (pb::AffectedTask& x : *in.mutable_affected()) {
      if (x.task() == t.ShortName()) a = &x;
    }
    if (a == nullptr) {
      a = in.add_affected();
      a->set_task(t.ShortName());
      a->set_since(now);
    }
    if (a->how() != h->how || a->until() != 0) {
      AddLine(in, now,
              absl::StrCat(t.ShortName(), " ", h->how,
                           h->waits_in.empty() ? "" : " waiting in " + h->waits_in),
              options_.max_timeline);
    }
    a->set_how(h->how);
    if (!h->waits_in.empty()) a->set_waits_in(h->waits_in);
    a->set_until(0);
    if (stacks == nullptr) continue;
    if (auto snap = stacks->find(t.ShortName()); snap != stacks->end()) {
      KeepSnapshot(in, snap->second, options_.max_evidence);
    }
  }
  for (pb::AffectedTask& a : *in.mutable_affected()) {
    auto t = ParseTaskRef(a.task());
    if (a.until() == 0 && (!t.ok() || !held.contains(*t))) {
      a.set_until(now);
      AddLine(in, now, absl::StrCat(a.task(), " is back"), options_.max_timeline);
    }
  }
  auto cause = ParseTaskRef(o.key.a);
  const bool cause_held = o.key.kind != "task" || (cause.ok() && held.contains(*cause));
  if (std::string r = CauseReason(in, view); cause_held && !r.empty()) in.set_cause_reason(r);
  if (std::string odd = OddOneOut(in); !odd.empty()) in.set_outlier(odd);
  in.set_updated(now);
  in.set_summary(IncidentSummary(in, in.cause_reason(), now));
}

void IncidentBook::Close(Open& o, double when, std::string why) {
  pb::Incident& in = o.incident;
  in.set_open(false);
  in.set_ended(when);
  for (pb::AffectedTask& a : *in.mutable_affected()) {
    if (a.until() == 0) a.set_until(when);
  }
  AddLine(in, when, std::move(why), options_.max_timeline);
  in.set_updated(when);
  in.set_summary(IncidentSummary(in, in.cause_reason(), when));
  Changed(in);
  closed_.push_back(std::move(in));
  if (closed_.size() > options_.max_closed) closed_.erase(closed_.begin());
}

const IncidentBook::Open* IncidentBook::HolderOf(const TaskRef& task) const {
  const std::string name = task.ShortName();
  for (const auto& [key, o] : open_) {
    for (const pb::AffectedTask& a : o.incident.affected()) {
      if (a.task() == name && a.until() == 0) return &o;
    }
  }
  return nullptr;
}

void IncidentBook::HoldRecovering(const ClusterView& view, double now,
                                  std::map<TaskRef, Holding>& causes) {
  for (auto& [key, o] : open_) {
    if (o.restored) continue;
    std::map<TaskRef, int64_t> held_steps;
    std::map<TaskRef, double> recovering;
    std::set<TaskRef> resumed;
    for (const pb::AffectedTask& a : o.incident.affected()) {
      auto t = ParseTaskRef(a.task());
      const TaskView* v = FindTask(view.tasks, a.task());
      if (!t.ok() || v == nullptr || !v->source.empty() || a.until() != 0 ||
          (t->role != "worker" && t->role != "chief") ||
          (key.kind == "task" && key.a == a.task())) {
        continue;
      }
      if (auto c = causes.find(*t); c != causes.end()) {
        if (c->second.cause == key) held_steps[*t] = v->steps;
        continue;
      }
      auto was = o.held_steps.find(*t);
      const bool gone = v->state == TaskState::kDead || v->state == TaskState::kMissing ||
                        v->state == TaskState::kDone;
      if (was == o.held_steps.end() || gone) continue;  // Not there to train: back.
      if (v->steps != was->second) {
        // Its steps moved: training again from the next tick on. This one is still the
        // incident's: of it, the ledger counts productive only its new steps at their usual
        // pace (the first steps after a stall come part way through the tick).
        if (o.resumed.contains(*t)) continue;
        resumed.insert(*t);
      }
      const double since = o.recovering.contains(*t) ? o.recovering.at(*t) : now;
      if (now - since > kRecoveringAtMostS) continue;
      held_steps[*t] = v->steps;
      recovering[*t] = since;
      causes[*t] =
          Holding{key, o.incident.kind(), "recovering", a.waits_in(), o.incident.started()};
    }
    o.held_steps = std::move(held_steps);
    o.recovering = std::move(recovering);
    o.resumed = std::move(resumed);
  }
}

void IncidentBook::Track(const ClusterView& view, const NewestStacks* stacks, double now) {
  std::map<TaskRef, Holding> causes = RootCauses(view, now, options_.missing_after_s);
  HoldRecovering(view, now, causes);
  std::map<CauseKey, std::map<TaskRef, const Holding*>> by_cause;
  for (auto& [t, h] : causes) {
    if (h.kind.empty()) {
      // Blocked on a peer that answers: with that peer's open incident, else with the one that
      // holds it already (still reconnecting after it), else the link's.
      if (!open_.contains(h.cause)) {
        if (const Open* holder = HolderOf(t); holder != nullptr) {
          h.cause = holder->key;
          h.kind = holder->incident.kind();
        } else {
          if (now - h.since < kBlockedOnAWellPeerAfterS) continue;
          h.cause = {"link", t.ShortName(), h.cause.a};
          h.kind = "blocked";
        }
      }
    }
    by_cause[h.cause][t] = &h;
  }
  for (auto& [key, held] : by_cause) {
    Open& o = OpenFor(*held.begin()->second, view, now);
    Update(o, held, view, stacks, now);
    Adopt(o.incident, view, now);
  }
  for (auto it = open_.begin(); it != open_.end();) {
    if (by_cause.contains(it->first)) {
      ++it;
      continue;
    }
    const bool restored = it->second.restored;
    const double when = restored ? it->second.incident.updated() : now;
    Close(it->second, when,
          restored
              ? "closed: not seen after the sidecar restarted"
              : absl::StrCat("closed: ", it->first.Text(), " and every task it held are back"));
    it = open_.erase(it);
  }
  for (auto it = closed_.rbegin(); it != closed_.rend(); ++it) {
    if (now - it->ended() > kRenameClosedWithinS) break;  // Oldest first: the rest are older.
    if (Adopt(*it, view, now)) Changed(*it);
  }
  Charge(view, causes, now);
}

// Charges the ledger the seconds since the previous view, each held task to the open incident
// that holds it, and sets each open incident's cost from it.
void IncidentBook::Charge(const ClusterView& view, const std::map<TaskRef, Holding>& causes,
                          double now) {
  std::map<TaskRef, HeldBy> held_by;
  for (const auto& [t, h] : causes) {
    auto o = open_.find(h.cause);
    if (o == open_.end()) continue;
    held_by[t] = {o->second.incident.id(), o->second.incident.kind(),
                  h.cause.kind == "task" && h.cause.a == t.ShortName(),
                  now - o->second.incident.started()};
  }
  // Of the tasks not held, those an open incident, or one closed a moment ago, let go of.
  std::map<TaskRef, HeldBy> after;
  auto let_go = [&](const pb::Incident& in) {
    for (const pb::AffectedTask& a : in.affected()) {
      auto t = ParseTaskRef(a.task());
      if (t.ok() && !held_by.contains(*t)) after.try_emplace(*t, HeldBy{in.id(), in.kind()});
    }
  };
  for (const auto& [key, o] : open_) let_go(o.incident);
  std::vector<pb::Incident*> recent;
  for (auto it = closed_.rbegin(); it != closed_.rend() && now - it->ended() <= kAftermathS; ++it) {
    let_go(*it);
    recent.push_back(&*it);
  }
  const double dt = last_now_ > 0 ? std::clamp(now - last_now_, 0.0, 5.0) : 0;
  last_now_ = now;
  ledger_.Charge(view.tasks, held_by, after, dt);
  auto cost = [&](pb::Incident& in) {
    const double was = in.lost_seconds();
    in.set_lost_seconds(ledger_.LostTo(in.id()));
    for (pb::AffectedTask& a : *in.mutable_affected()) {
      if (auto t = ParseTaskRef(a.task()); t.ok()) a.set_lost_seconds(ledger_.LostTo(in.id(), *t));
    }
    return in.lost_seconds() != was;
  };
  for (auto& [key, o] : open_) {
    cost(o.incident);
    Changed(o.incident);
  }
  for (pb::Incident* in : recent) {
    if (cost(*in)) Changed(*in);
  }
}

std::vector<pb::Incident> IncidentBook::List() const {
  std::vector<pb::Incident> out;
  for (const auto& [key, o] : open_) out.push_back(o.incident);
  std::sort(out.begin(), out.end(),
            [](const pb::Incident& a, const pb::Incident& b) { return a.started() > b.started(); });
  for (auto it = closed_.rbegin(); it != closed_.rend(); ++it) out.push_back(*it);
  return out;
}

IncidentsNow IncidentBook::Now(const std::string& cluster) const {
  IncidentsNow now;
  now.incidents = List();
  now.goodput = ledger_.Goodput(cluster);
  now.seconds = ledger_.SinceStart();
  now.lost_by_kind = ledger_.LostByKindSinceStart();
  now.open = static_cast<int>(open_.size());
  return now;
}

const pb::Incident* OpenIncidentOf(const IncidentsNow& now, std::string_view task) {
  for (const pb::Incident& in : now.incidents) {  // Open ones are newest first.
    if (in.open() && in.cause().kind() == "task" && in.cause().task() == task) return &in;
  }
  return nullptr;
}

const pb::Incident* OpenLinkIncident(const IncidentsNow& now, const ClusterView& view,
                                     const TaskRef& a, const TaskRef& b) {
  const PartitionInfo* p = nullptr;
  for (const PartitionInfo& q : view.partitions) {
    if ((q.a == a && q.b == b) || (q.a == b && q.b == a)) p = &q;
  }
  if (p == nullptr) return nullptr;
  const std::set<std::string> ends_a = {p->a.ShortName(), p->a_node};
  const std::set<std::string> ends_b = {p->b.ShortName(), p->b_node};
  for (const pb::Incident& in : now.incidents) {
    if (!in.open() || in.cause().kind() != "link") continue;
    const pb::IncidentCause& c = in.cause();
    auto names = [&c](const std::set<std::string>& ends) {
      return (!c.task().empty() && ends.count(c.task())) ||
             (!c.node().empty() && ends.count(c.node()));
    };
    if ((names(ends_a) && ends_b.count(c.peer())) || (names(ends_b) && ends_a.count(c.peer()))) {
      return &in;
    }
  }
  return nullptr;
}

std::vector<v1::OwnedIncident> OwnedIncidents(const IncidentsNow& now, const std::string& self,
                                              double now_unix) {
  std::vector<v1::OwnedIncident> out;
  for (const pb::Incident& in : now.incidents) {
    if (in.owner().empty() || in.owner() != self) continue;
    if (!in.open() && now_unix - in.ended() > kRenameClosedWithinS) continue;
    const CauseKey key = KeyOf(in.cause());
    v1::OwnedIncident& o = out.emplace_back();
    o.set_id(in.id());
    o.set_cause_kind(key.kind);
    o.set_cause_a(key.a);
    o.set_cause_b(key.b);
    o.set_started(in.started());
  }
  return out;
}

const pb::Incident* IncidentBook::Find(std::string_view id) const {
  for (const auto& [key, o] : open_) {
    if (o.incident.id() == id) return &o.incident;
  }
  for (const pb::Incident& c : closed_) {
    if (c.id() == id) return &c;
  }
  return nullptr;
}

std::vector<pb::Incident> IncidentBook::TakeChanged() {
  std::vector<pb::Incident> out;
  for (auto& [id, in] : changed_) out.push_back(std::move(in));
  changed_.clear();
  return out;
}

void IncidentBook::Restore(const std::vector<pb::Incident>& kept) {
  for (const pb::Incident& in : kept) {
    if (Find(in.id()) != nullptr || in.id().empty()) continue;
    ledger_.RestoreLost(in);  // A closed one too: what its aftermath costs adds to it.
    if (!in.open()) {
      closed_.push_back(in);
      continue;
    }
    Open& o = open_[KeyOf(in.cause())];
    o.incident = in;
    o.key = KeyOf(in.cause());
    o.restored = true;
  }
  std::sort(closed_.begin(), closed_.end(),
            [](const pb::Incident& a, const pb::Incident& b) { return a.ended() < b.ended(); });
  while (closed_.size() > options_.max_closed) closed_.erase(closed_.begin());
}

}  // namespace trainscope::sidecar
