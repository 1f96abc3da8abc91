#pragma once
// The ledger: every second of every worker (and chief) counted once, as one of
//   productive  training, steps past the highest reached;
//   waiting     held by an incident (blocked, stalled or slowed by another task, a link, a node);
//   down        the task itself dead or gone quiet (its own incident);
//   redone      training again through steps already done once (after a checkpoint restore);
//   idle        before its session, or done.
// From it: the lost seconds of each incident and of each cause kind, and the job's goodput
// (productive over the time that was not idle). Pure: the seconds come in as values.
//
// A first-hand task's steps (its heartbeat, every 100 ms) correct what the states alone would
// say: seconds called productive while its steps stood still go to the incident that then takes
// it, and a held task whose steps rise past its highest (training again before its state is well)
// is productive. Remote tasks' steps come with their node's record, too seldom for either.

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "trainscope/common/cluster_spec.h"
#include "trainscope/sidecar/api.h"
#include "trainscope/sidecar/task_view.h"

namespace trainscope::sidecar {

enum class Outcome { kProductive, kWaiting, kDown, kRedone, kIdle };
inline constexpr int kNumOutcomes = 5;
std::string_view OutcomeName(Outcome outcome);  // "productive", ...

// The incident holding a task, as the ledger needs it.
struct HeldBy {
  std::string id;    // The incident's id.
  std::string kind;  // Its kind ("dead", "partition", ...).
  bool own = false;  // The task is the incident's cause.
  // How long the incident has been open; of a longer step, only this part is the incident's.
  double open_for = 1e18;
};

struct TaskSeconds {
  std::array<double, kNumOutcomes> seconds{};
  int64_t highest_steps = 0;  // The most steps it has reported.
  bool seen = false;          // Charged before: its steps have a baseline to rise from.
  // Its process. A worker started again counts its steps from 0 again and redoes nothing (the
  // model is on the ps): its steps are a new baseline.
  uint64_t incarnation = 0;
  // First-hand tasks: the productive seconds charged since its steps last rose. They are the
  // incident's when one takes the task before the steps rise again (the time its detection
  // took: the steps had stopped).
  double unconfirmed = 0;
  // First-hand tasks, not held: the seconds since its steps last rose, all charged productive.
  // When they rise again after an incident let go of the task, the new steps are worth their
  // pace over all of it, and what falls short is that incident's (reconnecting, a link that
  // flaps faster than a detection).
  double since_rise = 0;
  // First-hand tasks: its seconds per step in its last ticks of steady training (not held, its
  // steps rising in this tick and the one before), a ring of the last 16 (`paces_seen` in all).
  // Their median is its pace until the view has learned its usual one (10 s into training).
  std::array<double, 16> paces{};
  int64_t paces_seen = 0;
  bool trained_last_tick = false;
};

class Ledger {
 public:
  // Charges `dt` seconds of each worker and chief of `views` to one outcome. `held`: the
  // incident holding each task, when one does. `after`: of the tasks no longer held, the
  // incident that let go of each a moment ago; the time a task's steps then fall short of its
  // pace is that incident's.
  void Charge(const std::vector<TaskView>& views, const std::map<TaskRef, HeldBy>& held,
              const std::map<TaskRef, HeldBy>& after, double dt);

  const std::map<TaskRef, TaskSeconds>& tasks() const { return tasks_; }
  // Seconds lost (waiting and down) to one incident, and by incident kind.
  double LostTo(const std::string& id) const;
  double LostTo(const std::string& id, const TaskRef& task) const;
  const std::map<std::string, double>& lost_by_kind() const { return lost_by_kind_; }

  pb::Goodput Goodput(const std::string& cluster) const;

  // What the store keeps and gives back: (task, outcome, seconds) rows, and per kind.
  struct Row {
    std::string task;
    std::string outcome;  // An OutcomeName, or "lost:<kind>" for the seconds lost by kind.
    double seconds = 0;
  };
  std::vector<Row> Rows() const;
  // Adds rows kept before a restart (unknown tasks and outcomes are skipped). Goodput and Rows
  // count them; SinceStart does not.
  void Restore(const std::vector<Row>& rows);
  // What was charged since this process started (Prometheus counters start at 0 with it), as
  // counters: never lower than before. Seconds first called productive and then taken back (its
  // steps had stood still) are waiting at once, and productive stands still until it has caught
  // up; a counter that fell would read as a restart to rate().
  std::map<TaskRef, TaskSeconds> SinceStart() const;
  std::map<std::string, double> LostByKindSinceStart() const;
  // The seconds lost to incident `from` are lost to `to` from now on (renamed to its owner's id).
  void Rename(const std::string& from, const std::string& to);
  // Puts back the seconds an incident kept before a restart had cost each task.
  void RestoreLost(const pb::Incident& incident);

 private:
  void ChargeTask(const TaskView& v, const HeldBy* held, const HeldBy* after, double dt);
  // After a tick in which a first-hand task was free (productive, not held) and made `risen` new
  // steps (-1: it was not free): charges the time its steps fell short of their pace since they
  // last rose to `after`, the incident that let go of it a moment ago, and learns its pace.
  void FollowPace(TaskSeconds& s, const TaskRef& task, int64_t risen, double usual,
                  const HeldBy* after, double dt);
  // Counts `seconds` of `task` as lost to the incident `by`.
  void Lose(const TaskRef& task, const HeldBy& by, double seconds);
  // Raises each task's since-start seconds to what it has now, where that is higher.
  void RaiseSinceStart();

  std::map<TaskRef, TaskSeconds> tasks_;
  std::map<std::string, double> lost_by_kind_;
  std::map<std::pair<std::string, TaskRef>, double> lost_by_incident_;
  std::map<TaskRef, TaskSeconds> restored_;
  std::map<TaskRef, std::array<double, kNumOutcomes>> since_start_;  // See SinceStart.
  std::map<std::string, double> restored_lost_by_kind_;
};

// The outcome of one second of `v`, held by `held` (null: by nothing).
Outcome OutcomeOf(const TaskView& v, const HeldBy* held, int64_t highest_steps);

}  // namespace trainscope::sidecar
