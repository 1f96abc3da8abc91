// The per-task state decision; see task_tracker.h.
#include "trainscope/sidecar/task_tracker.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "trainscope/common/clock.h"

namespace trainscope::sidecar {
namespace {

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

// "; 98% of it in calls to ps:0 (700 ms each)" for the peer that took most of the last step.
std::string SlowestPeer(const std::vector<PeerInfo>& peers) {
  const PeerInfo* worst = nullptr;
  for (const PeerInfo& p : peers) {
    if (p.step_share >= 0.5 && (worst == nullptr || p.step_share > worst->step_share)) worst = &p;
  }
  if (worst == nullptr) return "";
  return absl::StrCat("; ", static_cast<int>(worst->step_share * 100 + 0.5), "% of it in calls to ",
                      worst->peer.ShortName(),
                      worst->latency_seconds > 0
                          ? absl::StrCat(" (", HumanDuration(worst->latency_seconds), " each)")
                          : "");
}

// A /proc state letter in words.
std::string ProcStateWords(char state) {
  switch (state) {
    case 'R':
      return "running";
    case 'S':
      return "sleeping";
    case 'D':
      return "in uninterruptible wait (state D)";
    case 'T':
    case 't':
      return absl::StrCat("stopped (state ", std::string(1, state), ")");
    case 'Z':
      return "a zombie (state Z)";
    default:
      return absl::StrCat("state ", std::string(1, state));
  }
}

constexpr const char* kOutside = kOutsideReasonPrefix;
constexpr char kOutsideCannot[] =
    "; steps, progress and CreateSession waits cannot be seen from outside";

bool IsFatal(TaskState s) {
  return s == TaskState::kDead || s == TaskState::kHung || s == TaskState::kUnreachable;
}

}  // namespace

const std::vector<double>& LatencyBounds() {
  static const std::vector<double> kBounds = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                              0.1,    0.25,  0.5,    1,     2.5,  5};
  return kBounds;
}

TaskTracker::TaskTracker(std::string cluster, TaskRef task, std::string address, bool local,
                         TrackerOptions options, double now_s, double now_unix)
    : options_(options),
      local_(local),
      watch_start_s_(now_s),
      watch_start_unix_(now_unix),
      detector_(PhiAccrualOptions{
          .window = 200, .min_stddev_s = options.min_stddev_s, .first_gap_s = options.interval_s}) {
  view_.cluster = std::move(cluster);
  view_.task = std::move(task);
  view_.address = std::move(address);
  view_.state = TaskState::kMissing;
  view_.since = now_unix;
  counters_.latency_buckets.assign(LatencyBounds().size(), 0);
  counters_.transitions[static_cast<int>(TaskState::kMissing)] = 1;
}

std::vector<std::string> TaskTracker::TakeEvents() {
  std::vector<std::string> out;
  out.swap(events_);
  return out;
}

void TaskTracker::OnResult(const PollResult& r) {
  if (r.ok) {
    if (answered_ && r.received_s < last_answer_s_) return;
    const HeartbeatInfo& hb = r.heartbeat;
    bool cluster_ok = hb.cluster_name.empty() || hb.cluster_name == view_.cluster;
    // An answer from outside has no identity to check: the address is all it has.
    if (!hb.outside && (!cluster_ok || hb.task != view_.task)) {
      PollResult wrong = r;
      wrong.ok = false;
      wrong.failure = FailureKind::kWrongIdentity;
      wrong.error = absl::StrCat("answers as cluster \"", hb.cluster_name, "\" task ",
                                 hb.task.ShortName(), " (pid ", hb.pid, " on ", hb.hostname,
                                 "), not cluster \"", view_.cluster, "\" ", view_.task.ShortName());
      OnResult(wrong);
      return;
    }
    // Latency bookkeeping.
    double latency = std::max(0.0, r.received_s - r.sent_s);
    // On time: no suspicion yet, latency near its usual value (adaptive polling needs a run).
    bool on_time =
        detector_.Phi(r.received_s, skipped_s_) < 1 &&
        (usual_latency_ < 0 || latency <= std::max(3 * usual_latency_, usual_latency_ + 0.05));
    on_time_answers_ = on_time ? on_time_answers_ + 1 : 0;
    view_.latency_seconds = latency;
    counters_.latency_count++;
    counters_.latency_sum += latency;
    const auto& bounds = LatencyBounds();
    for (size_t i = 0; i < bounds.size(); ++i) {
      if (latency <= bounds[i]) counters_.latency_buckets[i]++;
    }
    recent_latency_.push_back(latency);
    if (recent_latency_.size() > 5) recent_latency_.erase(recent_latency_.begin());
    ++latency_samples_;
    if (usual_latency_ < 0) {
      usual_latency_ = latency;
    } else if (latency_samples_ < 10) {
      usual_latency_ = 0.7 * usual_latency_ + 0.3 * latency;
    } else if (latency <= std::max(usual_latency_ * options_.slow_latency_factor,
                                   usual_latency_ + options_.slow_latency_min_s)) {
      usual_latency_ = 0.95 * usual_latency_ + 0.05 * latency;
    }
    ApplyHeartbeat(hb, r.received_s);
    return;
  }
  on_time_answers_ = 0;
  last_error_ = r.error;
  last_failure_kind_ = r.failure;
  if (!answered_ || r.received_s >= last_answer_s_) last_failure_ = r;
}

void TaskTracker::ObservePace(const HeartbeatInfo& hb, double t) {
  if (options_.edges) edges_.Observe(t, view_.peers);
  const std::optional<double> pace = pace_.Observe(t, hb.steps);
  if (!view_.expects_progress || !pace) return;
  const RaisedWatch::Reading step = steps_.Observe(t, *pace);
  view_.recent_step_seconds = step.recent;
  view_.usual_step_seconds = step.usual;
  view_.step_raised_seconds = step.raised_seconds;
}

void TaskTracker::ApplyHeartbeat(const HeartbeatInfo& hb, double t) {
  // An answer from outside whose process was not read this time (its port's new holder not
  // found yet) has no incarnation: it is neither a restart nor the end of one. A restart is
  // counted once, between the last known incarnation and the next.
  const bool unknown = hb.outside && hb.incarnation == 0;
  const bool restarted =
      !unknown && known_incarnation_ && hb.incarnation != last_known_incarnation_;
  if (restarted) {
    view_.restarts++;
    events_.push_back(absl::StrCat(view_.task.ShortName(), " (", view_.task.FullName(),
                                   ") restarted: incarnation ", last_known_incarnation_, " -> ",
                                   hb.incarnation, ", pid ", last_known_pid_, " -> ", hb.pid));
    last_steps_ = -1;
    usual_step_ = -1;
    expecting_ = false;
    last_serving_.reset();
    serve_samples_.clear();
    usual_serve_ = -1;
    serve_calls_seen_ = 0;
  }
  if (!unknown) {
    known_incarnation_ = true;
    last_known_incarnation_ = hb.incarnation;
    last_known_pid_ = hb.pid;
  }
  ApplyServing(hb, t);
  detector_.Heartbeat(t, skipped_s_);
  skipped_s_ = 0;
  if (hb.steps != last_steps_) {
    if (last_steps_ >= 0 && hb.last_step_seconds > 0 && !hb.last_step_recovered) {
      if (usual_step_ < 0) {
        usual_step_ = hb.last_step_seconds;
      } else if (hb.last_step_seconds <= std::max(usual_step_ * options_.slow_step_factor,
                                                  usual_step_ + options_.slow_step_min_s)) {
        usual_step_ = 0.9 * usual_step_ + 0.1 * hb.last_step_seconds;
      }
    }
    last_steps_ = hb.steps;
    last_progress_s_ = t;
  }
  if (hb.expects_progress && !expecting_) last_progress_s_ = t;
  expecting_ = hb.expects_progress;
  answered_ = true;
  last_answer_s_ = t;
  last_failure_.reset();
  late_cpu_.reset();
  last_hb_ = hb;

  static_cast<TaskReport&>(view_) = hb;  // The report, whole (task_view.h).
  if (hb.last_step_recovered) view_.last_step_seconds = 0;
  ObservePace(hb, t);
}

void TaskTracker::ApplyServing(const HeartbeatInfo& hb, double t) {
  if (!hb.serving) return;
  if (last_serving_ && hb.served_calls >= last_serving_->served_calls) {
    const double calls = static_cast<double>(hb.served_calls - last_serving_->served_calls);
    if (calls > 0) {
      const ServeSample s{t, calls, hb.served_seconds - last_serving_->served_seconds,
                          hb.served_queue_seconds - last_serving_->served_queue_seconds,
                          hb.served_work_seconds - last_serving_->served_work_seconds};
      serve_samples_.push_back(s);
      const double mean = std::max(0.0, s.seconds / calls);
      serve_calls_seen_ += static_cast<int64_t>(calls);
      if (usual_serve_ < 0) {
        usual_serve_ = mean;
      } else if (mean <= std::max(usual_serve_ * options_.slow_serve_factor,
                                  usual_serve_ + options_.slow_serve_min_s)) {
        usual_serve_ = 0.9 * usual_serve_ + 0.1 * mean;
      }
    }
  }
  last_serving_ = hb;
  while (!serve_samples_.empty() && serve_samples_.front().t < t - options_.serve_window_s) {
    serve_samples_.erase(serve_samples_.begin());
  }
  // The median of the recent heartbeats' per-call means: a change shows within half the window
  // however many calls came before it.
  if (!serve_samples_.empty()) {
    std::vector<const ServeSample*> order;
    for (const ServeSample& s : serve_samples_) order.push_back(&s);
    std::sort(order.begin(), order.end(), [](const ServeSample* a, const ServeSample* b) {
      return a->seconds / a->calls < b->seconds / b->calls;
    });
    const ServeSample& mid = *order[order.size() / 2];
    view_.serve_seconds = std::max(0.0, mid.seconds / mid.calls);
    view_.serve_queue_seconds = std::max(0.0, mid.queue / mid.calls);
    view_.serve_work_seconds = std::max(0.0, mid.work / mid.calls);
  }
}

std::optional<TaskTracker::Decision> TaskTracker::DecideServing(double now_s) {
  double calls = 0;
  for (const ServeSample& s : serve_samples_) {
    if (s.t >= now_s - options_.serve_window_s) calls += s.calls;
  }
  // Judged against its usual time once it has served a while.
  if (calls <= 0 || serve_calls_seen_ < 20 || usual_serve_ <= 0) return std::nullopt;
  const double mean = view_.serve_seconds;
  if (mean <= std::max(usual_serve_ * options_.slow_serve_factor,
                       usual_serve_ + options_.slow_serve_min_s)) {
    return std::nullopt;
  }
  return Decision{
      TaskState::kSlow,
      absl::StrCat("parameter calls take ", HumanDuration(mean), " on the ps itself (usually ",
                   HumanDuration(usual_serve_), "): ", HumanDuration(view_.serve_queue_seconds),
                   " waiting before the work, ", HumanDuration(view_.serve_work_seconds),
                   " applying and reading")};
}

void TaskTracker::OnSidecarPause(double now_s) {
  detector_.Reset(now_s);
  silence_origin_s_ = now_s;
  relearn_until_s_ = now_s + options_.relearn_s;
  late_cpu_.reset();
  last_failure_.reset();
  skipped_s_ = 0;
  on_time_answers_ = 0;
}

bool TaskTracker::CanCheckProcess() const {
  // By identity, not by host name: a pod's host name differs from its node's, and a process the
  // poller did not verify (by its listening socket) is never read as the task.
  return local_ && last_hb_.pid > 0 && last_hb_.pid_verified;
}

std::optional<ProcStat> TaskTracker::ReadOwnProcess(const ProcReader& proc, bool* reused) const {
  std::optional<ProcStat> p = proc(last_hb_.pid);
  *reused = p && last_hb_.pid_start_ticks != 0 && p->start_ticks != last_hb_.pid_start_ticks;
  return *reused ? std::nullopt : p;
}

bool TaskTracker::MaySkipPoll(double now_s, const ProcReader& proc) {
  // About 2 s of on-time answers at the full rate before relaxing.
  constexpr int kSettleAnswers = 20;
  if (!answered_ || !proc || !CanCheckProcess() || view_.state != TaskState::kUp) return false;
  if (last_failure_ || now_s < relearn_until_s_ || on_time_answers_ < kSettleAnswers) return false;
  if (last_hb_.waiting || last_hb_.phase == "done" || last_hb_.phase == "leaving") return false;
  if (detector_.Phi(now_s, skipped_s_) >= 1) return false;  // Already a little late.
  bool reused = false;
  std::optional<ProcStat> p = ReadOwnProcess(proc, &reused);
  return p && p->state != 'Z' && p->state != 'X' && p->state != 'T' && p->state != 't';
}

void TaskTracker::OnPollSkipped() { skipped_s_ += options_.interval_s; }

double TaskTracker::UsualLatency() const { return std::max(0.0, usual_latency_); }

// Blocked: waiting on peers for at least blocked_after_s (they are added to the view's
// blocked_on); else none.
std::optional<TaskTracker::Decision> TaskTracker::DecideBlocked(double age) {
  const HeartbeatInfo& hb = last_hb_;
  if (!hb.waiting || hb.waiting_on.empty()) return std::nullopt;
  double waited = std::max(0.0, hb.inflight_reported_unix - hb.waiting_since_unix) + age;
  if (hb.waiting_since_unix <= 0) waited = 0;
  if (waited >= options_.blocked_after_s) {
    std::vector<std::string> parts;
    for (const PeerInfo& p : hb.waiting_on) {
      view_.blocked_on.push_back({p.peer, p.address, waited, p.last_error});
      parts.push_back(absl::StrCat(p.peer.ShortName(), " at ", p.address,
                                   p.last_error.empty() ? "" : " (" + p.last_error + ")"));
    }
    return Decision{TaskState::kBlocked,
                    absl::StrCat("waiting ", HumanDuration(waited), " in ",
                                 hb.waiting_what.empty() ? "CreateSession" : hb.waiting_what,
                                 " for ", absl::StrJoin(parts, ", "))};
  }
  return std::nullopt;
}

// Stalled: no progress for stall_after_s, or a call it serves running that long; else none.
std::optional<TaskTracker::Decision> TaskTracker::DecideStalled(double now_s, double age) const {
  const HeartbeatInfo& hb = last_hb_;
  if (expecting_ && now_s - last_progress_s_ >= options_.stall_after_s) {
    return Decision{
        TaskState::kStalled,
        absl::StrCat("steps stuck at ", hb.steps, " for ", HumanDuration(now_s - last_progress_s_),
                     " while ", hb.phase.empty() ? "training" : hb.phase,
                     hb.hooked ? (hb.hook_silent_s > 0
                                      ? absl::StrCat(" (its trainscope hook has not reported for ",
                                                     HumanDuration(hb.hook_silent_s), ")")
                                      : std::string(" (its process lives and its trainscope hook "
                                                    "reports, its loop makes no progress)"))
                               : std::string(" (answers heartbeats, makes no progress)"))};
  }
  // A call this task serves (a ps's Pull) that has run as long as a stall: its serving is stuck,
  // and the callers wait behind it; the blame is this task's.
  const CallInFlight* stuck_call = nullptr;
  for (const CallInFlight& c : hb.inflight) {
    if (c.served && (stuck_call == nullptr || c.age_seconds > stuck_call->age_seconds)) {
      stuck_call = &c;
    }
  }
  if (stuck_call != nullptr && stuck_call->age_seconds + age >= options_.stall_after_s) {
    int served = 0;
    for (const CallInFlight& c : hb.inflight) served += c.served;
    return Decision{
        TaskState::kStalled,
        absl::StrCat("a ", stuck_call->method, " it serves (from ", stuck_call->peer.ShortName(),
                     ") has run ", HumanDuration(stuck_call->age_seconds + age), "; ", served,
                     " call(s) in flight (answers heartbeats, its serving is stuck)")};
  }
  return std::nullopt;
}

// Slow: heartbeat latency well above its usual value; else none.
std::optional<TaskTracker::Decision> TaskTracker::DecideSlowLatency() const {
  if (latency_samples_ < 10 || recent_latency_.empty()) return std::nullopt;
  double recent = Median(recent_latency_);
  double usual = UsualLatency();
  if (recent >
      std::max(usual * options_.slow_latency_factor, usual + options_.slow_latency_min_s)) {
    return Decision{TaskState::kSlow, absl::StrCat("heartbeat latency ", HumanDuration(recent),
                                                   ", usually ", HumanDuration(usual))};
  }
  return std::nullopt;
}

// Slow: the last step well above the usual step time; else none.
std::optional<TaskTracker::Decision> TaskTracker::DecideSlowStep() const {
  const HeartbeatInfo& hb = last_hb_;
  // A step that recovered from a failure (retried calls, a restarted ps) took the recovery's time:
  // the failure was named as such while it lasted.
  if (usual_step_ > 0 && expecting_ && hb.last_step_seconds > 0 && !hb.last_step_recovered &&
      hb.last_step_seconds > std::max(usual_step_ * options_.slow_step_factor,
                                      usual_step_ + options_.slow_step_min_s)) {
    return Decision{TaskState::kSlow,
                    absl::StrCat("last step took ", HumanDuration(hb.last_step_seconds),
                                 ", usually ", HumanDuration(usual_step_), SlowestPeer(hb.peers))};
  }
  return std::nullopt;
}

// The reason of a task that answers and is up: its phase, answer rate, latency, step, restarts.
std::string TaskTracker::AnsweringUpReason() const {
  const HeartbeatInfo& hb = last_hb_;
  std::string what = hb.phase.empty() ? "answering" : hb.phase;
  std::string reason = absl::StrCat(what, ", answers every ", HumanDuration(detector_.MeanGap()),
                                    " (latency ", HumanDuration(view_.latency_seconds), ")");
  if (hb.steps > 0) absl::StrAppend(&reason, ", step ", hb.steps);
  if (hb.hooked) {
    absl::StrAppend(&reason, "; its phase and steps from its trainscope hook, ", ProcessWords());
  }
  if (view_.restarts > 0) absl::StrAppend(&reason, "; restarted ", view_.restarts, "x");
  if (local_ && !hb.identity_error.empty()) {
    absl::StrAppend(&reason, "; its process is not read here: ", hb.identity_error);
  }
  // Says why a restarted ps is up with variables at all, and how far back its shard went.
  if (hb.restored_step >= 0) {
    absl::StrAppend(&reason, view_.restarts > 0 ? ", " : "; ",
                    "restored its variables from the checkpoint of step ", hb.restored_step);
  }
  return reason;
}

TaskTracker::Decision TaskTracker::DecideAnswering(double now_s, double now_unix) {
  double age = now_s - last_answer_s_;
  if (auto blocked = DecideBlocked(age)) return *std::move(blocked);
  if (auto stalled = DecideStalled(now_s, age)) return *std::move(stalled);
  if (auto slow = DecideSlowLatency()) return *std::move(slow);
  if (auto serving = DecideServing(now_s)) return *serving;
  if (auto slow = DecideSlowStep()) return *std::move(slow);
  if (last_hb_.outside) return {TaskState::kUp, OutsideUpReason()};
  return {TaskState::kUp, AnsweringUpReason()};
}

std::string TaskTracker::ProcessWords() const {
  const HeartbeatInfo& hb = last_hb_;
  if (hb.ns_pid <= 0 || hb.ns_pid == hb.pid) return absl::StrCat("process ", hb.pid);
  return absl::StrCat("process ", hb.pid, " (pid ", hb.ns_pid, " in its own PID namespace)");
}

std::string TaskTracker::CannotCheckWords() const {
  if (local_ && !last_hb_.identity_error.empty()) {
    return absl::StrCat("; cannot check its process here: ", last_hb_.identity_error);
  }
  return absl::StrCat("; cannot check the process", WhereItRan(" (pid "),
                      last_hb_.pid > 0 ? ")" : "", " from this host");
}

std::string TaskTracker::WhereItRan(absl::string_view lead) const {
  // An outside task seen from another host has no pid: only its address is known.
  if (last_hb_.pid <= 0) return "";
  return absl::StrCat(lead, last_hb_.pid, " on ",
                      last_hb_.hostname.empty() ? "?" : last_hb_.hostname);
}

std::string TaskTracker::OutsideUpReason() const {
  const HeartbeatInfo& hb = last_hb_;
  std::string reason =
      absl::StrCat(kOutside, "gRPC answers in ", HumanDuration(view_.latency_seconds), "; ");
  if (hb.pid > 0) {
    absl::StrAppend(&reason, "pid ", hb.pid, " (", hb.command, ") ", ProcStateWords(hb.proc_state),
                    ", ", hb.threads, " threads, ",
                    absl::StrFormat("%.0f MiB", static_cast<double>(hb.resident_bytes) / 1048576));
  } else if (local_) {
    absl::StrAppend(&reason, "the process holding its port is not visible in /proc here");
  } else {
    absl::StrAppend(&reason, "its process is on another host (not checked from here)");
  }
  if (view_.restarts > 0) absl::StrAppend(&reason, "; restarted ", view_.restarts, "x");
  if (!hb.log_path.empty()) {
    return absl::StrCat(reason,
                        "; steps and progress cannot be seen from outside; its CreateSession "
                        "waits are read from its log ",
                        hb.log_path);
  }
  return absl::StrCat(reason, kOutsideCannot);
}

bool TaskTracker::StoppedBySignal(const ProcReader& proc) const {
  if (!proc || !CanCheckProcess()) return false;
  bool reused = false;
  std::optional<ProcStat> p = ReadOwnProcess(proc, &reused);
  return p && p->state == 'T';
}

std::optional<TaskTracker::Decision> TaskTracker::DecideByProcess(const Silence& q,
                                                                  const ProcReader& proc) {
  const double silence = q.seconds;
  const bool late = q.late, long_silence = q.long_silence, refused = q.refused;
  const double now_s = q.now_s, phi = q.phi;
  const std::string& err_note = q.err_note;
  const int64_t pid = last_hb_.pid;
  const std::string process = ProcessWords();
  bool reused = false;
  std::optional<ProcStat> p = ReadOwnProcess(proc, &reused);
  if (!p) {
    return Decision{
        TaskState::kDead,
        absl::StrCat(process, " is gone (",
                     reused ? "its pid now names a later process" : absl::StrCat("no /proc/", pid),
                     "); no answer at ", view_.address, " for ", HumanDuration(silence), err_note)};
  }
  if (p->state == 'Z' || p->state == 'X') {
    return Decision{TaskState::kDead,
                    absl::StrCat(process, " exited (zombie, not yet reaped)", err_note)};
  }
  if (refused) {
    return Decision{TaskState::kDead,
                    absl::StrCat("connection refused at ", view_.address, " although ", process,
                                 " still exists (its server is down, or the pid was reused)")};
  }
  // Stopped by a signal (SIGSTOP, SIGTSTP): it cannot answer until continued, so one missed
  // answer is enough, whatever its usual rhythm. A tracing stop ('t': a debugger, or this
  // sidecar's own stack capture) is brief as a rule: it must be late too.
  const bool stopped = p->state == 'T' && silence > 2 * options_.interval_s;
  if (stopped || (p->state == 't' && late)) {
    return Decision{
        TaskState::kHung,
        absl::StrCat(process, " is stopped (state ", std::string(1, p->state),
                     ": SIGSTOP or a debugger); no answer for ", HumanDuration(silence))};
  }
  if (late && !late_cpu_) {
    late_cpu_ = p->cpu_seconds;
    late_since_s_ = now_s;
  }
  if (long_silence) {
    bool cpu_moving = late_cpu_ && p->cpu_seconds > *late_cpu_ + 0.02;
    if (cpu_moving && silence < 4 * options_.hung_after_s) {
      return Decision{TaskState::kSlow,
                      absl::StrCat("no answer for ", HumanDuration(silence), ", but ", process,
                                   " is using CPU (overloaded or starved)", err_note)};
    }
    return Decision{TaskState::kHung,
                    absl::StrCat(process, " exists (state ", std::string(1, p->state),
                                 ") but has not answered for ", HumanDuration(silence),
                                 absl::StrFormat(" (suspicion %.0f)", phi), err_note)};
  }
  return std::nullopt;
}

TaskTracker::Decision TaskTracker::DecideSilent(double now_s, double silence, double phi,
                                                const ProcReader& proc) {
  Silence q;
  q.now_s = now_s;
  q.seconds = silence;
  q.phi = phi;
  q.late = phi >= options_.phi_late && silence > 2 * options_.interval_s;
  q.long_silence = q.late && silence >= options_.hung_after_s && phi >= options_.phi_hung;
  q.refused = last_failure_ && last_failure_->failure == FailureKind::kRefused;
  const std::string err = last_failure_ ? last_failure_->error : "";
  q.err_note = err.empty() ? "" : absl::StrCat(" (last error: ", err, ")");
  if (proc && CanCheckProcess()) {
    if (std::optional<Decision> d = DecideByProcess(q, proc)) return *d;
  } else if (q.refused) {
    return {TaskState::kDead,
            absl::StrCat("connection refused at ", view_.address, "; last answered ",
                         HumanDuration(silence), " ago", WhereItRan(" as pid "))};
  } else if (q.long_silence) {
    return {TaskState::kUnreachable,
            absl::StrCat("no answer at ", view_.address, " for ", HumanDuration(silence),
                         q.err_note, CannotCheckWords())};
  }
  if (q.late) {
    return {TaskState::kSlow,
            absl::StrCat("heartbeat late: no answer for ", HumanDuration(silence),
                         ", usually every ", HumanDuration(detector_.MeanGap()), q.err_note)};
  }
  return DecideAnswering(now_s, 0);
}

TaskTracker::Decision TaskTracker::Decide(double now_s, double now_unix, const ProcReader& proc) {
  view_.blocked_on.clear();
  if (!answered_) {
    std::string reason = absl::StrCat("never answered at ", view_.address, " in ",
                                      HumanDuration(now_s - watch_start_s_), " of watching");
    if (!last_error_.empty()) absl::StrAppend(&reason, " (", last_error_, ")");
    if (last_failure_kind_ == FailureKind::kRefused && !last_error_.empty()) {
      absl::StrAppend(&reason, ": not started, or listening on another port");
    } else if (last_failure_kind_ == FailureKind::kWrongIdentity) {
      absl::StrAppend(&reason,
                      ": another task answers there; check the cluster spec and --cluster_name");
    }
    return {TaskState::kMissing, reason};
  }
  // Polls skipped on purpose (adaptive polling) are not silence.
  double silence = std::max(0.0, now_s - std::max(last_answer_s_, silence_origin_s_) - skipped_s_);
  double phi = detector_.Phi(now_s, skipped_s_);
  view_.phi = phi;
  bool late = phi >= options_.phi_late && silence > 2 * options_.interval_s;
  if (last_failure_ || late || (silence > 2 * options_.interval_s && StoppedBySignal(proc))) {
    return DecideSilent(now_s, silence, phi, proc);
  }
  return DecideAnswering(now_s, now_unix);
}

const TaskView& TaskTracker::Evaluate(double now_s, double now_unix, const ProcReader& proc) {
  Decision d = Decide(now_s, now_unix, proc);
  // A task that said it was done and then went away finished: done, not dead.
  if (d.state == TaskState::kDead && answered_ && last_hb_.phase == "done") {
    d = {TaskState::kDone, absl::StrCat("finished training and exited (its last heartbeat said "
                                        "done; ",
                                        d.reason, ")")};
  }
  // One stopped by a signal (eviction, drain) left before finishing: gone, and not done.
  if (d.state == TaskState::kDead && answered_ && last_hb_.phase == "leaving") {
    d.reason = absl::StrCat(
        "stopped by a signal and left before finishing (its last heartbeat "
        "said leaving; ",
        d.reason, ")");
  }
  AddCgroupEvidence(now_s, &d);
  if (now_s < relearn_until_s_ && IsFatal(d.state) && !IsFatal(view_.state)) {
    d = {view_.state, absl::StrCat("re-learning after the sidecar itself paused; ", view_.reason)};
  }
  if (answered_ && last_hb_.outside && d.state != TaskState::kUp) {
    d.reason = absl::StrCat(kOutside, d.reason);
  }
  if (d.state != TaskState::kBlocked) view_.blocked_on.clear();
  if (d.state != view_.state) {
    // Both names: TensorFlow's own logs and errors say /job:ps/replica:0/task:0.
    events_.push_back(absl::StrCat(view_.task.ShortName(), " (", view_.task.FullName(), ") ",
                                   std::string(StateName(view_.state)), " -> ",
                                   std::string(StateName(d.state)), ": ", d.reason));
    view_.state = d.state;
    view_.since = now_unix;
    counters_.transitions[static_cast<int>(d.state)]++;
  }
  view_.reason = std::move(d.reason);
  view_.heartbeat_age_seconds = answered_ ? now_s - last_answer_s_ : -1;
  if (!answered_) view_.phi = 0;
  view_.observed_at = now_unix;
  return view_;
}

void TaskTracker::SetCgroupReader(CgroupReader reader) {
  cgroup_reader_ = std::move(reader);
  cgroup_ = CgroupWatch(options_.cgroup);
}

void TaskTracker::AddCgroupEvidence(double now_s, Decision* d) {
  // Only the process that /proc evidence applies to is read, never a pid taken on trust.
  if (!cgroup_reader_ || !answered_ || !CanCheckProcess()) return;
  const bool gone = d->state == TaskState::kDead || d->state == TaskState::kDone;
  cgroup_.Observe(now_s, last_hb_.pid, gone, cgroup_reader_);
  view_.cgroup = cgroup_.view();
  if (d->state == TaskState::kDead) {
    if (auto oom = cgroup_.OomKilledWords()) d->reason = absl::StrCat(*oom, ": ", d->reason);
    return;
  }
  if (gone) return;
  // Throttled by its quota: the cause of an up task's pace (slow), evidence for any other state.
  if (auto throttled = cgroup_.ThrottledWords()) {
    if (d->state == TaskState::kUp) {
      *d = {TaskState::kSlow, absl::StrCat(*throttled, "; ", d->reason)};
    } else {
      absl::StrAppend(&d->reason, "; ", *throttled);
    }
  }
  if (d->state == TaskState::kUp || d->state == TaskState::kSlow) {
    if (auto warning = cgroup_.MemoryWarning()) absl::StrAppend(&d->reason, " (", *warning, ")");
  }
}

}  // namespace trainscope::sidecar
