#include "trainscope/sidecar/ledger.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "trainscope/common/phase.h"

namespace trainscope::sidecar {
namespace {

constexpr std::array<std::string_view, kNumOutcomes> kOutcomeNames = {"productive", "waiting",
                                                                      "down", "redone", "idle"};
constexpr char kLostPrefix[] = "lost:";
// The most of a task's unconfirmed productive time an incident takes back: a detection is
// slower than this only when the task's steps stopped for a reason of its own.
constexpr double kMaxUnconfirmedSeconds = 10;
// New steps at up to this many times the usual seconds per step are on pace.
constexpr double kPaceSlack = 2;

bool Trains(const TaskRef& t) { return t.role == "worker" || t.role == "chief"; }

bool BeforeOrAfterTraining(const TaskView& v) {
  return v.phase == PhaseName(Phase::kStarting) || v.phase == PhaseName(Phase::kCreatingSession) ||
         v.phase == PhaseName(Phase::kDone) || v.phase == PhaseName(Phase::kLeaving) ||
         v.phase.empty();
}

double& At(TaskSeconds& s, Outcome o) { return s.seconds[static_cast<int>(o)]; }

// The fewest ticks of steady training whose median stands for a task's pace.
constexpr int kFewestPaces = 5;

// Of `dt` seconds in which a first-hand task made `risen` new steps, the seconds they are worth:
// all of them when they came at up to half its usual pace (`usual` seconds a step), else the new
// steps at its usual pace (a slowed task). All of `dt` when its pace is not known (0).
double PacedSeconds(double usual, int64_t risen, double dt) {
  if (usual <= 0) return dt;
  const double worth = static_cast<double>(risen) * usual;
  return dt <= kPaceSlack * worth ? dt : std::min(dt, worth);
}

// A first-hand task's usual seconds a step: the view's, else the median of its last ticks of
// steady training (the view learns its own only 10 s into training); 0 when neither is known.
double UsualPace(const TaskView& v, const TaskSeconds& s) {
  if (v.usual_step_seconds > 0) return v.usual_step_seconds;
  const int n = static_cast<int>(std::min<int64_t>(s.paces_seen, s.paces.size()));
  if (n < kFewestPaces) return 0;
  std::array<double, std::tuple_size_v<decltype(s.paces)>> sorted = s.paces;
  std::nth_element(sorted.begin(), sorted.begin() + n / 2, sorted.begin() + n);
  return sorted[n / 2];
}

}  // namespace

std::string_view OutcomeName(Outcome outcome) { return kOutcomeNames[static_cast<int>(outcome)]; }

Outcome OutcomeOf(const TaskView& v, const HeldBy* held, int64_t highest_steps) {
  if (v.state == TaskState::kDone) return Outcome::kIdle;
  if (held != nullptr) {
    const bool gone = v.state == TaskState::kDead || v.state == TaskState::kMissing;
    return held->own && gone ? Outcome::kDown : Outcome::kWaiting;
  }
  if (v.state == TaskState::kDead) return Outcome::kDown;
  // Missing and not (yet) an incident: never heard, or quiet for less than the book waits.
  if (v.state == TaskState::kMissing || BeforeOrAfterTraining(v)) return Outcome::kIdle;
  return v.steps < highest_steps ? Outcome::kRedone : Outcome::kProductive;
}

void Ledger::Charge(const std::vector<TaskView>& views, const std::map<TaskRef, HeldBy>& held,
                    const std::map<TaskRef, HeldBy>& after, double dt) {
  if (dt <= 0) return;
  auto find = [](const std::map<TaskRef, HeldBy>& m, const TaskRef& t) {
    auto it = m.find(t);
    return it == m.end() ? nullptr : &it->second;
  };
  for (const TaskView& v : views) {
    if (Trains(v.task)) ChargeTask(v, find(held, v.task), find(after, v.task), dt);
  }
  RaiseSinceStart();
}

void Ledger::Lose(const TaskRef& task, const HeldBy& by, double seconds) {
  lost_by_kind_[by.kind] += seconds;
  lost_by_incident_[{by.id, task}] += seconds;
}

void Ledger::ChargeTask(const TaskView& v, const HeldBy* by, const HeldBy* after, double dt) {
  TaskSeconds& s = tasks_[v.task];
  const bool alive = v.state != TaskState::kDead && v.state != TaskState::kMissing;
  const bool first_hand = v.source.empty();
  if (alive && v.incarnation != 0 && v.incarnation != s.incarnation) {
    if (s.incarnation != 0) s.highest_steps = v.steps;  // Started again: counts from 0 again.
    s.incarnation = v.incarnation;
  }
  const int64_t risen = s.seen && alive ? std::max<int64_t>(0, v.steps - s.highest_steps) : 0;
  const bool rose = first_hand && risen > 0;
  // What its new steps are worth: less than dt when it trained slower than usual.
  const double usual = UsualPace(v, s);
  const double paced = rose ? PacedSeconds(usual, risen, dt) : 0;
  const Outcome o = OutcomeOf(v, by, s.highest_steps);
  double step = dt;
  if (by != nullptr && by->open_for < dt) {
    // The first step an incident holds it: the part before its start is not the incident's.
    const double before = dt - std::max(0.0, by->open_for);
    const Outcome was = OutcomeOf(v, nullptr, s.highest_steps);
    At(s, was) += before;
    if (was == Outcome::kProductive && first_hand && s.seen) s.unconfirmed += before;
    step -= before;
  }
  double lost = step;
  if (o == Outcome::kWaiting) {
    // Held, yet it trains (slowed, or again before its state is well): its new steps at its
    // usual pace are productive.
    double kept = rose ? std::min(step, paced) : 0;
    if (!first_hand && v.state == TaskState::kSlow && v.usual_step_seconds > 0 &&
        v.recent_step_seconds > v.usual_step_seconds) {
      kept = step * v.usual_step_seconds / v.recent_step_seconds;
    }
    At(s, Outcome::kProductive) += kept;
    lost = step - kept;
  }
  if (by != nullptr && (o == Outcome::kWaiting || o == Outcome::kDown)) {
    // The seconds called productive while its steps stood still or crawled were the incident's.
    const double moved = std::min(s.unconfirmed, kMaxUnconfirmedSeconds);
    At(s, Outcome::kProductive) -= moved;
    lost += moved;
    Lose(v.task, *by, lost);
  }
  At(s, o) += lost;
  const bool unsure = o == Outcome::kProductive && first_hand && s.seen && paced < lost;
  s.unconfirmed = unsure ? s.unconfirmed + lost - paced : 0;  // Stood still, or crawled.
  const bool free = o == Outcome::kProductive && by == nullptr && first_hand && s.seen;
  FollowPace(s, v.task, free ? risen : -1, usual, after, dt);
  if (alive) s.highest_steps = std::max(s.highest_steps, v.steps);
  s.seen = true;
}

void Ledger::FollowPace(TaskSeconds& s, const TaskRef& task, int64_t risen, double usual,
                        const HeldBy* after, double dt) {
  const bool rose = risen > 0;
  if (rose && after != nullptr) {
    // Its steps since they last rose, at their pace, against the incident that let go of it a
    // moment ago: the seconds they fall short are that incident's.
    const double since = s.since_rise + dt;
    const double shortfall = since - PacedSeconds(usual, risen, since);
    At(s, Outcome::kProductive) -= shortfall;
    At(s, Outcome::kWaiting) += shortfall;
    Lose(task, *after, shortfall);
    s.unconfirmed = std::max(0.0, s.unconfirmed - shortfall);
  }
  s.since_rise = risen == 0 ? s.since_rise + dt : 0;
  if (rose && s.trained_last_tick) {
    s.paces[s.paces_seen++ % s.paces.size()] = dt / static_cast<double>(risen);
  }
  s.trained_last_tick = rose;
}

double Ledger::LostTo(const std::string& id) const {
  double sum = 0;
  for (auto it = lost_by_incident_.lower_bound({id, TaskRef{}});
       it != lost_by_incident_.end() && it->first.first == id; ++it) {
    sum += it->second;
  }
  return sum;
}

double Ledger::LostTo(const std::string& id, const TaskRef& task) const {
  auto it = lost_by_incident_.find({id, task});
  return it == lost_by_incident_.end() ? 0 : it->second;
}

pb::Goodput Ledger::Goodput(const std::string& cluster) const {
  pb::Goodput g;
  g.set_cluster(cluster);
  std::array<double, kNumOutcomes> sum{};
  for (const auto& [t, s] : tasks_) {
    for (int i = 0; i < kNumOutcomes; ++i) sum[i] += s.seconds[i];
    pb::TaskTime* row = g.add_tasks();
    row->set_task(t.ShortName());
    row->set_productive_seconds(s.seconds[static_cast<int>(Outcome::kProductive)]);
    row->set_waiting_seconds(s.seconds[static_cast<int>(Outcome::kWaiting)]);
    row->set_down_seconds(s.seconds[static_cast<int>(Outcome::kDown)]);
    row->set_redone_seconds(s.seconds[static_cast<int>(Outcome::kRedone)]);
    row->set_idle_seconds(s.seconds[static_cast<int>(Outcome::kIdle)]);
  }
  double elapsed = 0;
  for (double x : sum) elapsed += x;
  g.set_elapsed_seconds(elapsed);
  g.set_productive_seconds(sum[static_cast<int>(Outcome::kProductive)]);
  g.set_waiting_seconds(sum[static_cast<int>(Outcome::kWaiting)]);
  g.set_down_seconds(sum[static_cast<int>(Outcome::kDown)]);
  g.set_redone_seconds(sum[static_cast<int>(Outcome::kRedone)]);
  g.set_idle_seconds(sum[static_cast<int>(Outcome::kIdle)]);
  const double counted = elapsed - g.idle_seconds();
  g.set_goodput(counted > 0 ? g.productive_seconds() / counted : 1);
  for (const auto& [kind, s] : lost_by_kind_) (*g.mutable_lost_by_kind())[kind] = s;
  return g;
}

std::vector<Ledger::Row> Ledger::Rows() const {
  std::vector<Row> rows;
  for (const auto& [t, s] : tasks_) {
    for (int i = 0; i < kNumOutcomes; ++i) {
      rows.push_back({t.ShortName(), std::string(kOutcomeNames[i]), s.seconds[i]});
    }
  }
  for (const auto& [kind, s] : lost_by_kind_) {
    rows.push_back({"", absl::StrCat(kLostPrefix, kind), s});
  }
  return rows;
}

void Ledger::Restore(const std::vector<Row>& rows) {
  for (const Row& r : rows) {
    if (!(r.seconds >= 0) || r.seconds > 1e12) continue;  // Not a count of seconds (or NaN).
    if (absl::StartsWith(r.outcome, kLostPrefix)) {
      const std::string kind = r.outcome.substr(sizeof(kLostPrefix) - 1);
      lost_by_kind_[kind] += r.seconds;
      restored_lost_by_kind_[kind] += r.seconds;
      continue;
    }
    auto task = ParseTaskRef(r.task);
    auto o = std::find(kOutcomeNames.begin(), kOutcomeNames.end(), r.outcome);
    if (!task.ok() || !Trains(*task) || o == kOutcomeNames.end()) continue;
    tasks_[*task].seconds[o - kOutcomeNames.begin()] += r.seconds;
    restored_[*task].seconds[o - kOutcomeNames.begin()] += r.seconds;
  }
}

std::map<TaskRef, TaskSeconds> Ledger::SinceStart() const {
  std::map<TaskRef, TaskSeconds> out;
  for (const auto& [t, s] : tasks_) {
    TaskSeconds& row = out[t];
    if (auto high = since_start_.find(t); high != since_start_.end()) row.seconds = high->second;
  }
  return out;
}

void Ledger::RaiseSinceStart() {
  for (const auto& [t, s] : tasks_) {
    auto before = restored_.find(t);
    std::array<double, kNumOutcomes>& high = since_start_[t];
    for (int i = 0; i < kNumOutcomes; ++i) {
      const double kept = before == restored_.end() ? 0 : before->second.seconds[i];
      high[i] = std::max(high[i], s.seconds[i] - kept);
    }
  }
}

std::map<std::string, double> Ledger::LostByKindSinceStart() const {
  std::map<std::string, double> out = lost_by_kind_;
  for (const auto& [kind, s] : restored_lost_by_kind_) out[kind] -= s;
  return out;
}

void Ledger::Rename(const std::string& from, const std::string& to) {
  for (auto it = lost_by_incident_.lower_bound({from, TaskRef{}});
       it != lost_by_incident_.end() && it->first.first == from; it = lost_by_incident_.erase(it)) {
    lost_by_incident_[{to, it->first.second}] += it->second;
  }
}

void Ledger::RestoreLost(const pb::Incident& incident) {
  for (const pb::AffectedTask& a : incident.affected()) {
    auto task = ParseTaskRef(a.task());
    if (task.ok() && a.lost_seconds() > 0 && a.lost_seconds() < 1e12) {
      lost_by_incident_[{incident.id(), *task}] = a.lost_seconds();
    }
  }
}

}  // namespace trainscope::sidecar
