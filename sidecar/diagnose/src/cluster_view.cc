// Building and reading the cluster view; see cluster_view.h.
#include "trainscope/sidecar/cluster_view.h"

#include <algorithm>
#include <map>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "trainscope/common/clock.h"
#include "trainscope/sidecar/starved_nodes.h"
#include "trainscope/sidecar/stragglers.h"
#include "trainscope/sidecar/stuck_explain.h"

namespace trainscope::sidecar {
namespace {

bool IsWildcardOrLoopback(const std::string& host) {
  return host == "0.0.0.0" || host == "::" || host == "localhost" || host == "::1" ||
         host.rfind("127.", 0) == 0;
}

std::string Shorten(const std::string& s, size_t n) {
  return s.size() <= n ? s : s.substr(0, n - 3) + "...";
}

// "n3 (10.0.0.3:4317)", or the id alone when the host name is unknown.
std::string NodeName(const std::string& id, const std::string& hostname) {
  return hostname.empty() || hostname == id ? id : absl::StrCat(hostname, " (", id, ")");
}

// A silent member whose port refuses connections: its machine answers, its sidecar is down.
bool SidecarDown(const Member& m) {
  return m.status == MemberStatus::kSilent && SaysRefused(m.last_error);
}

// A state in which a task answers its own sidecar.
bool Answers(TaskState s) {
  return s == TaskState::kUp || s == TaskState::kSlow || s == TaskState::kBlocked ||
         s == TaskState::kStalled;
}

struct Merge {
  explicit Merge(const ClusterViewInputs& inputs) : in(inputs) {}
  const ClusterViewInputs& in;
  std::map<TaskRef, TaskView> tasks;
  std::map<std::string, const Member*> members;  // By node id (not this node).
  std::map<std::string, std::string> hostnames;  // By node id.
  std::map<std::string, std::vector<TaskRef>> node_tasks;
  std::map<std::string, std::set<std::string>> unreachable;  // node -> nodes it cannot reach.
  std::optional<double> isolated_since;
  std::set<std::pair<TaskRef, TaskRef>> slow_links;  // (caller, ps)
  std::map<std::string, NodeLoad> loads;             // By node id, this node's too.
  std::map<std::string, std::string> starved;        // Node id -> the verdict's words.
  std::set<TaskRef> starving;                        // The slow tasks of a starved node.
  int skipped = 0;

  const Member* MemberOf(const std::string& node) const {
    auto it = members.find(node);
    return it == members.end() ? nullptr : it->second;
  }
  std::string NameOf(const std::string& node) const {
    auto it = hostnames.find(node);
    return NodeName(node, it == hostnames.end() ? "" : it->second);
  }
  std::string Since(double since) const { return HumanDuration(in.now_unix - since); }
};

void MergeFirstHand(Merge& m) {
  for (const TaskView& v : m.in.local) {
    TaskView copy = v;
    copy.source.clear();
    copy.node = m.in.self;
    copy.node_hostname = m.in.self_hostname;
    m.node_tasks[m.in.self].push_back(v.task);
    m.tasks[v.task] = std::move(copy);
  }
  m.hostnames[m.in.self] = m.in.self_hostname;
}

void MergeRecords(Merge& m) {
  if (!m.in.exchange) return;
  for (const Member& mem : m.in.exchange->members) {
    m.members[mem.id] = &mem;
    m.hostnames[mem.id] = mem.hostname;
  }
  std::map<TaskRef, double> made_at;
  for (const auto& [node, entry] : m.in.exchange->records) {
    const v1::NodeRecord& r = entry->record;
    if (!r.hostname().empty()) m.hostnames[node] = r.hostname();
    for (const std::string& u : r.unreachable_nodes()) m.unreachable[node].insert(u);
    if (node == m.in.self) continue;
    if (r.has_load()) m.loads[node] = FromProto(r.load());
    for (const v1::TaskView& t : r.tasks()) {
      auto view = FromProto(t);
      if (!view.ok() || m.in.spec->FindAddress(view->task) == nullptr ||
          (!view->cluster.empty() && view->cluster != m.in.cluster)) {
        ++m.skipped;
        continue;
      }
      m.node_tasks[node].push_back(view->task);
      auto it = m.tasks.find(view->task);
      if (it != m.tasks.end() &&
          (it->second.source.empty() || made_at[view->task] >= r.made_at())) {
        continue;  // First-hand wins; else the newest report.
      }
      made_at[view->task] = r.made_at();
      view->cluster = m.in.cluster;
      view->source = node;
      view->node = node;
      view->node_hostname = r.hostname();
      view->address = *m.in.spec->FindAddress(view->task);
      view->learned_at = entry->learned_at;
      m.tasks[view->task] = *std::move(view);
    }
  }
  if (m.in.exchange->isolated_since_unix) m.isolated_since = *m.in.exchange->isolated_since_unix;
}

// Tasks that no node reports on: say whose sidecar should have, and what is known of it.
std::string UnreportedReason(const Merge& m, const TaskRef& t) {
  if (!m.in.exchange_closed.empty()) {
    return absl::StrCat(
        "not watched by this sidecar: its node's sidecar reports to the others "
        "over the exchange, which is closed here (",
        m.in.exchange_closed, ")");
  }
  if (!m.in.has_peers) return "not watched by this sidecar, and no peer sidecar is configured";
  std::string node;
  if (m.in.expected_nodes != nullptr) {
    if (auto it = m.in.expected_nodes->find(t); it != m.in.expected_nodes->end()) node = it->second;
  }
  if (node.empty()) return "no sidecar reports on it (its host is no node of the exchange)";
  if (node == m.in.self)
    return "its host is this node, but this sidecar does not watch it "
           "(--local_tasks)";
  const Member* mem = m.MemberOf(node);
  std::string name = m.NameOf(node);
  if (mem == nullptr)
    return absl::StrCat("no sidecar reports on it; its node ", name,
                        " is not a member of the exchange (--peer_sidecars?)");
  if (!mem->heard && mem->last_error.empty()) {
    // This sidecar has just started: nothing is known of it yet, which is not its fault.
    return absl::StrCat(
        "no sidecar reports on it yet: this sidecar has not asked the sidecar "
        "of its node ",
        name, " yet (it has just started)");
  }
  if (!mem->heard) {
    return absl::StrCat("no sidecar reports on it: the sidecar of its node ", name,
                        " has never answered (", mem->last_error,
                        "); is it running, with the same --grpc_port?");
  }
  if (SidecarDown(*mem)) {
    return absl::StrCat("no sidecar reports on it: the sidecar of its node ", name, " is down (",
                        mem->last_error, ")");
  }
  if (mem->status == MemberStatus::kSilent) {
    return absl::StrCat("no sidecar reports on it: its node ", name,
                        " is cut off from every other node (isolated, or the machine is down)");
  }
  return absl::StrCat("no sidecar reports on it: the sidecar of its node ", name,
                      " does not watch it (its --local_tasks?)");
}

void FillUnreported(Merge& m) {
  for (const TaskRef& t : m.in.spec->AllTasks()) {
    if (m.tasks.count(t)) continue;
    TaskView v;
    v.cluster = m.in.cluster;
    v.task = t;
    v.address = *m.in.spec->FindAddress(t);
    v.state = TaskState::kUnreachable;
    v.since = m.in.now_unix;
    v.observed_at = m.in.now_unix;
    v.reason = UnreportedReason(m, t);
    m.tasks[t] = std::move(v);
  }
}

// Remote tasks of nodes whose sidecar is silent, suspect or gone. (When this node is the one cut
// off, ApplySelfIsolation says so instead.)
void ApplyNodeStatus(Merge& m) {
  if (m.isolated_since) return;
  for (auto& [t, v] : m.tasks) {
    if (v.source.empty()) continue;
    const Member* mem = m.MemberOf(v.node);
    if (mem == nullptr) continue;
    const std::string name = m.NameOf(v.node);
    const double since = mem->status_since;
    const std::string last = absl::StrCat("last reported ", std::string(StateName(v.state)), ": ",
                                          Shorten(v.reason, 160));
    if (SidecarDown(*mem) && v.state != TaskState::kDone) {
      v.state = TaskState::kUnreachable;
      v.since = since;
      v.reason =
          absl::StrCat("nobody watches it: the sidecar of its node ", name, " is down for ",
                       m.Since(since), " (", mem->last_error, "; the machine answers); ", last);
    } else if (mem->status == MemberStatus::kSilent && v.state != TaskState::kDone) {
      v.state = TaskState::kUnreachable;
      v.since = since;
      v.reason = absl::StrCat("its node ", name, " is cut off from every other node for ",
                              m.Since(since), " (isolated, or the machine is down); ", last);
    } else if (mem->status == MemberStatus::kLeft && v.state != TaskState::kDone) {
      v.state = TaskState::kUnreachable;
      v.since = since;
      v.reason = absl::StrCat("the sidecar of its node ", name, " stopped ", m.Since(since),
                              " ago, so nobody watches it; ", last);
    } else if (mem->status == MemberStatus::kSuspect) {
      absl::StrAppend(&v.reason, "; the sidecar of its node ", name, " has missed probes for ",
                      m.Since(since));
    }
  }
}

// This node is cut off: nothing it says about other nodes is current.
void ApplySelfIsolation(Merge& m) {
  if (!m.isolated_since) return;
  const std::string others =
      absl::StrCat(m.members.size(), " other node", m.members.size() == 1 ? "" : "s");
  const std::string what = absl::StrCat(
      "this node ", m.NameOf(m.in.self), " is cut off from every other node for ",
      m.Since(*m.isolated_since), " (its sidecar reaches none of ", others, "' sidecars)");
  for (auto& [t, v] : m.tasks) {
    if (!v.source.empty() || v.node != m.in.self) {
      if (v.state == TaskState::kDone) continue;
      v.reason = absl::StrCat(what, "; last heard: ", std::string(StateName(v.state)), " (",
                              Shorten(v.reason, 120), ")");
      v.state = TaskState::kUnreachable;
      v.since = *m.isolated_since;
    } else if (v.state == TaskState::kUp || v.state == TaskState::kDone) {
      absl::StrAppend(&v.reason, "; ", what);
    } else {
      v.reason = absl::StrCat(what, "; ", v.reason);
    }
  }
}

struct Evidence {
  TaskRef peer;
  std::string address;
  std::string error;
  double since = 0;  // The last success (or the start of the wait): what the reason says.
  // The first failure of this run: when the failure came to light. A worker held up elsewhere
  // may call a peer long after its last success; only from its first failure on have the
  // sidecars' probes had a reason to look at the peer's node.
  double failing_since = 0;
};

// The peers `v` fails to reach over the network.
std::vector<Evidence> NetworkFailures(const TaskView& v) {
  std::vector<Evidence> out;
  // A peer's own figures say when its failures began; a wait on it (blocked_on) began with the
  // call, which may be long before: it counts only for a peer without figures.
  auto add = [&](const TaskRef& peer, const std::string& address, const std::string& error,
                 double since, double failing_since) {
    for (Evidence& e : out) {
      if (e.peer == peer) {
        e.since = std::min(e.since, since);
        return;
      }
    }
    out.push_back({peer, address, error, since, failing_since});
  };
  for (const PeerInfo& p : v.peers) {
    if (!FailsToReach(p) || !(p.network_failure || IsNetworkError(p.last_error))) {
      continue;
    }
    double ago = p.seconds_since_success >= 0 ? p.seconds_since_success : v.observed_at - v.since;
    const double since = v.observed_at - std::max(0.0, ago);
    add(p.peer, p.address, p.last_error, since, std::max(since, v.observed_at - FailingSeconds(p)));
  }
  for (const BlockedPeer& b : v.blocked_on) {
    if (IsNetworkError(b.last_error)) {
      add(b.peer, b.address, b.last_error, v.observed_at - b.seconds, v.observed_at - b.seconds);
    }
  }
  return out;
}

// How long after a node's sidecar answers again (it was cut off, or missed probes) a failure
// to reach its tasks that began before may still be the same fault: the callers' channels are
// still reconnecting (gRPC backoff, the next retry). Not a partition unless it outlasts this.
constexpr double kRejoinGraceS = 1.5;

// What a node's sidecar says of `node` for a partition between tasks: its sidecar answers
// (kAlive), misses probes (kSuspect: it may be cut off from everyone, which is not a partition
// between two tasks), or is cut off, down or gone (kSilent).
MemberStatus NodeStatus(const Merge& m, const std::string& node) {
  if (node.empty() || node == m.in.self) return MemberStatus::kAlive;
  const Member* mem = m.MemberOf(node);
  if (mem == nullptr) return MemberStatus::kAlive;
  return mem->status == MemberStatus::kLeft ? MemberStatus::kSilent : mem->status;
}

// A failure that began before something answered again at `back_since`, within kRejoinGraceS
// of it: the callers are still reconnecting.
bool BeganBefore(const Merge& m, double back_since, double failing_since) {
  return failing_since < back_since && m.in.now_unix - back_since < kRejoinGraceS;
}

// ... before the peer (or the caller) was up again: resumed after SIGSTOP, or back.
bool FromBeforeResume(const Merge& m, const TaskView& v, double failing_since) {
  return v.state == TaskState::kUp && BeganBefore(m, v.since, failing_since);
}

// ... before `node`'s sidecar answered again (it was cut off, or missed probes); for this node,
// before it heard again after a silence (its own link was down or flapped).
bool FromBeforeRejoin(const Merge& m, const std::string& node, double failing_since) {
  if (node.empty() || node == m.in.self) {
    return m.in.exchange && m.in.exchange->back_since_unix &&
           BeganBefore(m, *m.in.exchange->back_since_unix, failing_since);
  }
  const Member* mem = m.MemberOf(node);
  return mem != nullptr && BeganBefore(m, mem->status_since, failing_since);
}

// Evidence in a record `node`'s sidecar made before it was back (it was cut off, or its link
// flapped, and the record came late): stale at any age, until that node's next record, or until
// kStaleRecordS after it was back (its sidecar says within a second when a failure ends; one it
// has not taken back by then goes on, and is not hidden for good).
constexpr double kStaleRecordS = 5.0;
bool SeenBeforeRejoin(const Merge& m, const std::string& node, double observed_at) {
  const Member* mem = node == m.in.self ? nullptr : m.MemberOf(node);
  return mem != nullptr && mem->back_since >= 0 && observed_at < mem->back_since &&
         m.in.now_unix - mem->back_since < kStaleRecordS;
}

// The notes FindPartitions adds to the reasons of the two sides of failures, once it has
// looked at every task (the tasks are not changed while it looks).
struct PartitionNotes {
  std::vector<std::pair<TaskRef, std::string>> a;  // Of the tasks that cannot reach a peer.
  std::vector<std::pair<TaskRef, std::string>> b;  // Of the peers they cannot reach.
};

// One network failure of task `ta` (its view `a`) to reach the peer `b`, described by `where`
// ("ps:0 at host:port on node").
struct Failure {
  const TaskRef& ta;
  const TaskView& a;
  const TaskView& b;
  const Evidence& e;
  std::string where;
};

// True when the failure `f` is not to be named a partition now. It is named at once
// when the two nodes' sidecars reach each other only through others (the probe the
// failure set off says so: the link is cut, neither node is); else once it had lasted
// kPartitionAfterS when a's sidecar observed it (a record that came before the failure was that
// old does not turn into a partition as this node's clock runs on: a's sidecar sends a new one
// when it crosses, or when the failure ends). Not for a failure from before a node came back.
bool NotAPartitionYet(const Merge& m, const Failure& f, bool nodes_cut) {
  const TaskView& a = f.a;
  const TaskView& b = f.b;
  const Evidence& e = f.e;
  return (!nodes_cut && a.observed_at - e.failing_since < kPartitionAfterS) ||
         FromBeforeRejoin(m, a.node, e.since) || FromBeforeRejoin(m, b.node, e.since) ||
         FromBeforeResume(m, a, e.since) || FromBeforeResume(m, b, e.since);
}

// Records the partition of `f`: in view.partitions, and a note for each side.
void AddPartition(const Merge& m, const Failure& f, bool nodes_cut, PartitionNotes& notes,
                  ClusterView& view) {
  const TaskView& a = f.a;
  const TaskView& b = f.b;
  const Evidence& e = f.e;
  PartitionInfo p{f.ta, e.peer, a.node, b.node, a.address, b.address, e.since, e.error, false};
  p.nodes_cut = nodes_cut;
  std::string cut = p.nodes_cut
                        ? absl::StrCat("; the sidecars of ", m.NameOf(a.node), " and ",
                                       m.NameOf(b.node), " cannot reach each other directly either")
                        : "";
  notes.a.push_back({f.ta, absl::StrCat("partition: cannot reach ", f.where, " for ",
                                        m.Since(e.since), " (", Shorten(e.error, 80), "), though ",
                                        e.peer.ShortName(), " answers its own sidecar", cut)});
  notes.b.push_back({e.peer, absl::StrCat("partitioned from ", f.ta.ShortName(), " on ",
                                          m.NameOf(a.node), " for ", m.Since(e.since), " (",
                                          f.ta.ShortName(), " cannot reach it)")});
  view.partitions.push_back(std::move(p));
}

// Looks at one network failure `e` of task `ta` (view `a`, on an alive node): a note when the
// peer's node is not alive, a partition when both answer their sidecars and it is one now.
void CheckFailure(Merge& m, const TaskRef& ta, const TaskView& a, const Evidence& e,
                  PartitionNotes& notes, ClusterView& view) {
  auto it = m.tasks.find(e.peer);
  if (it == m.tasks.end()) return;
  const TaskView& b = it->second;
  const Failure f{
      ta, a, b, e,
      absl::StrCat(e.peer.ShortName(), " at ", e.address.empty() ? b.address : e.address, " on ",
                   m.NameOf(b.node))};
  const MemberStatus b_node = NodeStatus(m, b.node);
  if (b_node != MemberStatus::kAlive) {
    notes.a.push_back({ta, absl::StrCat("cannot reach ", f.where, " (", Shorten(e.error, 80), "): ",
                                        b_node == MemberStatus::kSuspect
                                            ? "that node's sidecar misses probes too"
                                            : "that node is cut off from every other node")});
    return;
  }
  if (!Answers(b.state)) return;  // b is dead, hung, missing...: not a partition.
  // A record made before this node was back (its own link was down or flapped) of a failure
  // to reach this node's task: stale at any age, as for another node's return.
  if (b.node == m.in.self && m.in.exchange && m.in.exchange->back_since_unix &&
      a.observed_at < *m.in.exchange->back_since_unix) {
    return;
  }
  const bool nodes_cut = m.unreachable[a.node].count(b.node) || m.unreachable[b.node].count(a.node);
  if (NotAPartitionYet(m, f, nodes_cut)) return;
  AddPartition(m, f, nodes_cut, notes, view);
}

// Adds the notes to the reasons (before the reason of a task not up, after it otherwise), and
// each partition's other side to partitioned_from.
void ApplyPartitionNotes(Merge& m, const PartitionNotes& notes, const ClusterView& view) {
  for (auto& [t, note] : notes.a) {
    TaskView& v = m.tasks[t];
    v.reason = v.state == TaskState::kUp ? absl::StrCat(v.reason, "; ", note)
                                         : absl::StrCat(note, "; ", v.reason);
  }
  for (auto& [t, note] : notes.b) absl::StrAppend(&m.tasks[t].reason, "; ", note);
  for (const PartitionInfo& p : view.partitions) {
    m.tasks[p.a].partitioned_from.push_back(p.b.ShortName());
    m.tasks[p.b].partitioned_from.push_back(p.a.ShortName());
  }
}

void FindPartitions(Merge& m, ClusterView& view) {
  if (m.isolated_since) return;  // Nothing this node sees of others is current.
  PartitionNotes notes;
  for (const auto& [ta, a] : m.tasks) {
    if (!Answers(a.state) || NodeStatus(m, a.node) != MemberStatus::kAlive ||
        SeenBeforeRejoin(m, a.node, a.observed_at)) {
      continue;
    }
    for (const Evidence& e : NetworkFailures(a)) CheckFailure(m, ta, a, e, notes, view);
  }
  ApplyPartitionNotes(m, notes, view);
}

std::string Percent(double share) { return absl::StrCat(static_cast<int>(share * 100 + 0.5), "%"); }

// A fail-slow verdict on `v`, raised `raised_s` ago: an up task becomes slow with `words` as its
// reason; any other keeps its state, and `words` goes first (`first`) or last in its reason.
void MarkFailSlow(const Merge& m, TaskView& v, double raised_s, const std::string& words,
                  bool first) {
  if (v.state == TaskState::kUp) {
    v.state = TaskState::kSlow;
    v.since = std::max(v.since, m.in.now_unix - raised_s);
    v.reason = words;
  } else {
    v.reason = first ? absl::StrCat(words, "; ", v.reason) : absl::StrCat(v.reason, "; ", words);
  }
}

// A slow link slows its caller: the caller's reason names the link (worker_ps_map.h), and an up
// caller is slow. Neither the caller nor the ps is blamed for it.
void ApplySlowLinks(Merge& m, ClusterView& view) {
  if (!m.in.worker_ps_map) return;
  view.worker_ps = BuildWorkerPsMap(m.tasks);
  for (const SlowLink& link : view.worker_ps.slow_links) {
    m.slow_links.insert({link.from, link.to});
    MarkFailSlow(m, m.tasks[link.from], link.raised_seconds, SlowLinkWords(link), false);
  }
}

// Most tasks of a node slow together: the node is named, with its evidence, in each of their
// reasons (starved_nodes.h), and none of them is called a straggler.
void ApplyStarvedNodes(Merge& m) {
  m.loads[m.in.self] = m.in.node_load;
  for (const StarvedNode& s : FindStarvedNodes(m.tasks, m.loads)) {
    const std::string words = StarvedNodeWords(s, m.NameOf(s.node));
    m.starved[s.node] = words;
    for (const TaskRef& t : s.slow) {
      m.starving.insert(t);
      MarkFailSlow(m, m.tasks[t], s.raised_seconds, words, true);
    }
  }
}

// A straggler is slow, and its reason says so first, with why (stragglers.h).
void ApplyStragglers(Merge& m, const ClusterView& view) {
  for (const Straggler& s : FindStragglers(m.tasks, view.worker_ps)) {
    if (m.starving.count(s.task) > 0) continue;
    MarkFailSlow(m, m.tasks[s.task], s.raised_seconds, StragglerWords(s), true);
  }
}

// A ps slower than its peers (the median of the other ps tasks) is slow too.
void CompareServingPeers(Merge& m) {
  std::vector<std::pair<TaskView*, double>> ps;
  for (auto& [t, v] : m.tasks) {
    if (v.serve_seconds > 0 && Answers(v.state)) ps.push_back({&v, v.serve_seconds});
  }
  if (ps.size() < 3) return;
  for (auto& [v, serve] : ps) {
    if (v->state != TaskState::kUp) continue;
    std::vector<double> others;
    for (auto& [o, s] : ps) {
      if (o != v) others.push_back(s);
    }
    std::nth_element(others.begin(), others.begin() + others.size() / 2, others.end());
    const double median = others[others.size() / 2];
    if (serve > std::max(10 * median, median + 0.05)) {
      v->state = TaskState::kSlow;
      v->reason =
          absl::StrCat("parameter calls take ", HumanDuration(serve),
                       " on the ps itself; the other ps tasks' median is ", HumanDuration(median));
    }
  }
}

// Blame goes to the cause: each worker slowed by a ps names it and says whether the ps is slow
// for everyone (overloaded) or only the way to it is (the network between the two); the ps
// names the workers it slows. A worker held back by its own CPU quota blames no one: its calls
// wait for its own CPU.
void BlameSlowPs(Merge& m) {
  CompareServingPeers(m);
  std::map<TaskRef, std::vector<std::string>> slows;  // ps -> workers it slows, in words
  for (auto& [tw, w] : m.tasks) {
    if (w.state != TaskState::kSlow || w.serve_seconds > 0 || HeldByItsCpuQuota(w.cgroup)) continue;
    for (const PeerInfo& p : w.peers) {
      if (p.step_share < 0.5) continue;
      auto it = m.tasks.find(p.peer);
      if (it == m.tasks.end()) continue;
      const TaskView& ps = it->second;
      const std::string name = p.peer.ShortName();
      if (ps.state == TaskState::kSlow && ps.serve_seconds > 0) {
        absl::StrAppend(&w.reason, "; ", name,
                        " is slow for every caller (overloaded): ", Shorten(ps.reason, 160));
        slows[p.peer].push_back(
            absl::StrCat(tw.ShortName(), " (", Percent(p.step_share), " of its step)"));
      } else if (m.slow_links.contains({tw, p.peer})) {
        continue;  // Named as a link (ApplySlowLinks): neither end is to blame.
      } else if (ps.serve_seconds > 0 && p.latency_seconds > 5 * ps.serve_seconds &&
                 p.latency_seconds > ps.serve_seconds + 0.05) {
        absl::StrAppend(&w.reason, "; ", name, " serves calls in ", HumanDuration(ps.serve_seconds),
                        " but they take ", HumanDuration(p.latency_seconds), " from ",
                        tw.ShortName(), ": the network between ", tw.ShortName(), " (",
                        m.NameOf(w.node), ") and ", name, " (", m.NameOf(ps.node), ") is slow");
        slows[p.peer].push_back(absl::StrCat(tw.ShortName(),
                                             " through the network (its calls take ",
                                             HumanDuration(p.latency_seconds), ")"));
      }
    }
  }
  for (auto& [t, who] : slows) {
    absl::StrAppend(&m.tasks[t].reason, "; slows ", absl::StrJoin(who, ", "));
  }
}

void BuildNodes(const Merge& m, ClusterView& view) {
  NodeInfo self;
  self.id = m.in.self;
  self.hostname = m.in.self_hostname;
  self.self = true;
  self.status = m.isolated_since ? "isolated" : "alive";
  self.since = m.isolated_since.value_or(0);
  if (m.isolated_since) {
    self.reason =
        absl::StrCat("this node is cut off from every other node for ", m.Since(*m.isolated_since));
  }
  if (auto it = m.node_tasks.find(m.in.self); it != m.node_tasks.end()) self.tasks = it->second;
  view.nodes.push_back(std::move(self));
  for (const auto& [id, mem] : m.members) {
    NodeInfo n;
    n.id = id;
    n.hostname = m.NameOf(id) == id ? "" : mem->hostname;
    n.status = std::string(MemberStatusName(mem->status));
    n.since = mem->status_since;
    if (auto it = m.node_tasks.find(id); it != m.node_tasks.end()) n.tasks = it->second;
    if (m.isolated_since && mem->status != MemberStatus::kLeft) {
      n.status = "unreachable";
      n.reason = "not reachable from this node, which is cut off from every other node";
    } else if (!mem->heard) {
      n.status = "unknown";
      n.reason = absl::StrCat("has never answered",
                              mem->last_error.empty() ? "" : " (" + mem->last_error + ")");
    } else if (SidecarDown(*mem)) {
      n.status = "down";
      n.reason = absl::StrCat("its sidecar is down for ", m.Since(n.since), " (", mem->last_error,
                              "): the machine answers; is trainscope-sidecar running there?");
    } else if (mem->status == MemberStatus::kSilent) {
      n.reason = absl::StrCat("cut off from every other node for ", m.Since(n.since),
                              ": answers no probe, directly or through other nodes (isolated, "
                              "or the machine is down)");
    } else if (mem->status == MemberStatus::kSuspect) {
      n.reason = absl::StrCat("missed probes for ", m.Since(n.since));
    } else if (mem->status == MemberStatus::kLeft) {
      n.reason = "its sidecar stopped";
    } else if (mem->reached_indirectly && mem->direct_failures > 0) {
      n.reason = absl::StrCat("reached only through other nodes: the direct link is cut (",
                              mem->last_error, ")");
    }
    view.nodes.push_back(std::move(n));
  }
}

// A starved node's entry says so, unless something worse is said of it already.
void NameStarvedNodes(const Merge& m, ClusterView& view) {
  for (NodeInfo& n : view.nodes) {
    auto it = m.starved.find(n.id);
    if (it != m.starved.end() && n.reason.empty()) n.reason = it->second;
  }
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

bool IsNetworkError(absl::string_view error) {
  const std::string e = absl::AsciiStrToLower(error);
  for (const char* needle : {"connection lost", "no route", "network is unreachable",
                             "connection timed out", "connection reset", "keepalive"}) {
    if (absl::StrContains(e, needle)) return true;
  }
  return false;
}

std::vector<TaskView> ExplainedLocal(const ClusterViewInputs& in) {
  const bool stuck = std::any_of(in.local.begin(), in.local.end(),
                                 [](const TaskView& v) { return IsStuck(v.state); });
  if (in.stacks == nullptr || !stuck) return in.local;
  ClusterViewInputs plain = in;
  plain.stacks = nullptr;
  const ClusterView first = BuildClusterView(plain);
  std::vector<TaskView> local = in.local;
  ExplainStuckTasks(local, *in.stacks, first.tasks, in.now_unix);
  return local;
}

ClusterView BuildClusterView(const ClusterViewInputs& in) {
  if (in.stacks != nullptr) {
    ClusterViewInputs explained = in;
    explained.local = ExplainedLocal(in);
    explained.stacks = nullptr;
    return BuildClusterView(explained);
  }
  Merge m(in);
  MergeFirstHand(m);
  MergeRecords(m);
  FillUnreported(m);
  ApplyNodeStatus(m);
  ClusterView view;
  view.cluster = in.cluster;
  view.self = in.self;
  view.self_hostname = in.self_hostname;
  view.isolated_since = m.isolated_since;
  view.exchange_unauthenticated = in.exchange != nullptr && !in.exchange->stats.authenticated;
  view.exchange_closed = in.exchange_closed;
  FindPartitions(m, view);
  ApplySlowLinks(m, view);
  ApplyStarvedNodes(m);
  ApplyStragglers(m, view);
  BlameSlowPs(m);
  ApplySelfIsolation(m);
  BuildNodes(m, view);
  NameStarvedNodes(m, view);
  for (const TaskView& v : in.local) view.local.push_back(v.task);
  for (auto& [t, v] : m.tasks) view.tasks.push_back(std::move(v));
  if (in.exchange != nullptr) {
    for (const auto& [node, entry] : in.exchange->records) {
      if (node == in.self) continue;
      for (const v1::OwnedIncident& i : entry->record.incidents()) {
        view.peer_incidents.push_back(
            {node, i.id(), i.cause_kind(), i.cause_a(), i.cause_b(), i.started()});
      }
    }
  }
  AnnotateBlocked(view.tasks, *in.spec);
  SortForPeople(view.tasks);
  return view;
}

pb::TaskList ToTaskList(const std::string& cluster, const ClusterView& view, bool local_only) {
  pb::TaskList list;
  list.set_cluster(CleanText(cluster));
  list.set_api_version(kApiVersion);
  list.set_node(CleanText(view.self));
  list.set_isolated(view.isolated_since.has_value());
  list.set_exchange_unauthenticated(view.exchange_unauthenticated);
  list.set_exchange_closed(CleanText(view.exchange_closed));
  for (const TaskView& v : view.tasks) {
    if (local_only && std::find(view.local.begin(), view.local.end(), v.task) == view.local.end()) {
      continue;
    }
    ToProto(v, /*full_peers=*/true, list.add_tasks());
  }
  for (const NodeInfo& n : view.nodes) {
    if (local_only && !n.self) continue;
    pb::NodeView* o = list.add_nodes();
    o->set_node(CleanText(n.id));
    o->set_hostname(CleanText(n.hostname));
    o->set_status(n.status);
    o->set_since(n.since);
    for (const TaskRef& t : n.tasks) o->add_tasks(t.ShortName());
    o->set_reason(CleanText(n.reason));
  }
  for (const PartitionInfo& p : view.partitions) {
    pb::Partition* o = list.add_partitions();
    o->set_a(p.a.ShortName());
    o->set_a_node(CleanText(p.a_node));
    o->set_a_address(CleanText(p.a_address));
    o->set_b(p.b.ShortName());
    o->set_b_node(CleanText(p.b_node));
    o->set_b_address(CleanText(p.b_address));
    o->set_since(p.since);
    o->set_error(CleanText(p.error));
    o->set_nodes_cut(p.nodes_cut);
  }
  if (!local_only) {
    for (const MapEdge& e : SampleMap(view.worker_ps.edges, 32, 16)) {
      pb::MapEdge* o = list.add_worker_ps();
      o->set_from(e.from.ShortName());
      o->set_to(e.to.ShortName());
      o->set_recent_seconds(e.recent_seconds);
      o->set_usual_seconds(e.usual_seconds);
      o->set_raised_seconds(e.raised_seconds);
      o->set_slow_link(e.slow_link);
    }
  }
  return list;
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
      const std::string* spec_address = spec.FindAddress(b.peer);
      if (spec_address == nullptr) {
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
      } else if (pv != nullptr && !Answers(pv->state)) {
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

}  // namespace trainscope::sidecar
