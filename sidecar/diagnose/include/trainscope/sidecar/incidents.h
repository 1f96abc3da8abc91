#pragma once
// Incidents: one record per root cause. Every view of the cluster (cluster_view.h) says, for
// each task that is not well, what holds it (RootCauses): itself (dead, hung, stalled,
// missing), a peer it waits on (followed to the root: a ps that died holds the workers blocked
// on it), a cut link, a node cut off, a slow ps or link. The book opens one incident per cause
// when first seen, adds the tasks it holds and the lines of its timeline, keeps the newest
// snapshot of each stuck task of this node as evidence, and closes it once its cause and every
// task it held are well again. It charges every second of every worker to the ledger
// (ledger.h) as it goes. Pure: the views and the time come in as values; the incident's one
// shape is its proto (pb::Incident), which the API, the store and the exchange carry as is.

#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "trainscope/sidecar/api.h"
#include "trainscope/sidecar/cluster_view.h"
#include "trainscope/sidecar/ledger.h"

namespace trainscope::sidecar {

// What an incident is about; compared as a whole.
struct CauseKey {
  std::string kind;  // "task", "node" or "link"
  std::string a;     // The task ("ps:1"), the node's id, or the link's failing side.
  std::string b;     // A link's other side.
  friend auto operator<=>(const CauseKey&, const CauseKey&) = default;
  std::string Text() const;  // "ps:1", "node n2", "worker:0 -> ps:1"
};

// What holds one task that is not well.
struct Holding {
  CauseKey cause;
  std::string kind;      // The incident's kind (pb::Incident.kind).
  std::string how;       // The held task's state: "blocked", "dead", ...
  std::string waits_in;  // "Pull to ps:1" when known.
  double since = 0;      // When the cause's state began (its `since`), unix seconds.
};

// What holds each task of `view` that is not well, by task. A task not listed is well, or
// (missing for less than `missing_after_s`) not yet anyone's concern.
std::map<TaskRef, Holding> RootCauses(const ClusterView& view, double now, double missing_after_s);

struct IncidentBookOptions {
  double missing_after_s = 10;  // A task never heard or gone quiet is an incident after this.
  // A cause back this soon after its close reopens the incident (a flapping link is one). At
  // least 10 s: ids take the start to 10 s, so a new incident of one cause never takes an old id.
  double reopen_within_s = 10;
  size_t max_closed = 200;  // Closed incidents kept in memory (the store keeps more).
  int max_timeline = 64;    // Lines of one incident's timeline.
  int max_evidence = 16;    // Snapshots kept as one incident's evidence.
};

// What the book shows at one moment: the wiring publishes it, serve renders it.
struct IncidentsNow {
  std::vector<pb::Incident> incidents;  // As List().
  pb::Goodput goodput;
  // The ledger's since this process started (for /metrics' counters), by task and by kind;
  // `goodput` counts what was kept before too.
  std::map<TaskRef, TaskSeconds> seconds;
  std::map<std::string, double> lost_by_kind;
  int open = 0;
};

// The open incident whose cause is `task` ("role:index") itself; null: none. The dead and hung
// alerts a sidecar posts carry its id as the label `incident`, and trainscope_task_incident
// names the same one, so that the rules' copies carry it too. Not an incident that merely holds
// the task: a worker stopped while blocked on a dead ps is its own incident, not the ps's.
const pb::Incident* OpenIncidentOf(const IncidentsNow& now, std::string_view task);

// The open incident of the partition between `a` and `b` (either way round in `view`): the link
// incident whose cause names both sides, as tasks or as their nodes; null: none. A partition's
// alerts from both sides, and trainscope_task_partition, carry its id, whatever else holds the
// tasks (a worker behind a slow ps as well).
const pb::Incident* OpenLinkIncident(const IncidentsNow& now, const ClusterView& view,
                                     const TaskRef& a, const TaskRef& b);

// The incidents of `now` that node `self` owns (their cause is one of its tasks, or a link's
// failing side there; a node cut off: the smallest other node id), open or closed for less than
// 30 s at `now_unix`, as its exchange record carries them: the other nodes take their ids.
std::vector<v1::OwnedIncident> OwnedIncidents(const IncidentsNow& now, const std::string& self,
                                              double now_unix);

class IncidentBook {
 public:
  explicit IncidentBook(IncidentBookOptions options = {});

  // Advances the book by one view taken at `now` (unix seconds): opens, updates and closes
  // incidents, keeps the newest snapshots of the stuck tasks in `stacks` (may be null) as
  // evidence, and charges the ledger the seconds since the previous view.
  void Track(const ClusterView& view, const NewestStacks* stacks, double now);

  // Open first (newest first), then the closed ones, newest first.
  std::vector<pb::Incident> List() const;
  // The incident with this id; null when the book does not hold it.
  const pb::Incident* Find(std::string_view id) const;
  // The incidents opened, changed or closed since the last call (for the store), and the ids of
  // those dropped from memory.
  std::vector<pb::Incident> TakeChanged();

  // Puts back what the store kept (a sidecar restart). An open incident is closed at its last
  // update unless the first view shows its cause still there.
  void Restore(const std::vector<pb::Incident>& kept);

  IncidentsNow Now(const std::string& cluster) const;

  const Ledger& ledger() const { return ledger_; }
  Ledger& ledger() { return ledger_; }

 private:
  struct Open {
    pb::Incident incident;
    CauseKey key;
    bool restored = false;
    // First-hand workers it holds: their steps while held; and of those well again whose steps
    // have not moved since, since when.
    std::map<TaskRef, int64_t> held_steps;
    std::map<TaskRef, double> recovering;
    std::set<TaskRef> resumed;  // Of those, the ones whose steps moved in the last tick.
  };
  // Holds, with the incident that held them, the first-hand workers well again whose steps have
  // not moved since (reconnecting, restoring): the incident closes when they train again.
  void HoldRecovering(const ClusterView& view, double now, std::map<TaskRef, Holding>& causes);
  // Takes the owner's id and start for `incident` (open, or closed a moment ago) when another
  // node owns its cause and names that fault otherwise (ClusterView::peer_incidents): the former
  // id is kept in `former_ids`. True when it did.
  bool Adopt(pb::Incident& incident, const ClusterView& view, double now);
  // The open incident holding `task` now, if one does.
  const Open* HolderOf(const TaskRef& task) const;
  void Update(Open& open, const std::map<TaskRef, const Holding*>& held, const ClusterView& view,
              const NewestStacks* stacks, double now);
  void Close(Open& open, double when, std::string why);
  void Charge(const ClusterView& view, const std::map<TaskRef, Holding>& causes, double now);
  Open& OpenFor(const Holding& h, const ClusterView& view, double now);
  void Changed(const pb::Incident& incident);

  IncidentBookOptions options_;
  std::map<CauseKey, Open> open_;
  std::vector<pb::Incident> closed_;  // Oldest first.
  std::map<std::string, pb::Incident> changed_;
  Ledger ledger_;
  double last_now_ = 0;
};

// The incident's id: the same on every node that sees the same cause begin at about the same
// time (its start is taken to 10 s).
std::string IncidentId(const std::string& cluster, const CauseKey& key, double started);

// With many stuck tasks: their snapshots' main-thread stacks grouped by signature and, when all
// but one agree, the sentence that names the odd one: "worker:0-19 wait in Pull to ps:3; ps:3's
// main thread is in ApplyGradients (futex)". "" when there is no such one.
std::string OddOneOut(const pb::Incident& incident);
// "worker:0-2,5 ps:1": task names, runs of indices folded.
std::string CompressTasks(std::vector<std::string> names);

// The one line a person reads: "ps:1 dead (...) for 6 s, holding worker:0 and worker:1
// (waiting in Pull to ps:1)".
std::string IncidentSummary(const pb::Incident& incident, const std::string& cause_reason,
                            double now);

}  // namespace trainscope::sidecar
