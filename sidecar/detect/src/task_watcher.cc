// The poll loop of this node's tasks; see task_watcher.h.
#include "trainscope/sidecar/task_watcher.h"

#include <algorithm>

#include "spdlog/spdlog.h"
#include "trainscope/common/clock.h"
#include "trainscope/common/proc.h"
#include "trainscope/sidecar/poller.h"

namespace trainscope::sidecar {

namespace {

// Adaptive polling: a task that is up, regular and checkable in /proc is asked only every
// `relax_ticks`-th tick; on the ticks between, /proc/<pid>/stat (a few microseconds, against
// ~100 us of CPU for a heartbeat round trip) tells gone, zombie and stopped, and any of those,
// a failure, a late or slow answer, waiting, done, ... puts it back to every tick at once. The
// relaxed gap stays <= 250 ms: the runtime answers for 300 ms after it reaches phase done, and
// the sidecar must see that phase before the process goes (done, not dead).
int RelaxTicks(double interval) { return std::max(1, static_cast<int>(0.25 / interval + 1e-9)); }

// At tick `tick_no`: polls every task not in flight, except a relaxed one that may skip it.
void PollDue(std::vector<TaskTracker>& trackers, HeartbeatPoller& poller, double now,
             uint64_t tick_no, int relax_ticks, const ProcReader& proc) {
  for (size_t i = 0; i < trackers.size(); ++i) {
    if (poller.InFlight(i)) continue;
    if (relax_ticks > 1 && (tick_no + i) % relax_ticks != 0 && trackers[i].MaySkipPoll(now, proc)) {
      trackers[i].OnPollSkipped();
      continue;
    }
    poller.Poll(i, now);
  }
}

// Every tracker's view and counters now, its events logged; true when there was an event.
bool EvaluateAll(std::vector<TaskTracker>& trackers, double now, const ProcReader& proc,
                 std::vector<TaskView>& views, std::vector<TaskCounters>& counters) {
  const double unix_now = UnixSeconds();
  bool changed = false;
  for (size_t i = 0; i < trackers.size(); ++i) {
    views[i] = trackers[i].Evaluate(now, unix_now, proc);
    counters[i] = trackers[i].counters();
    for (const std::string& e : trackers[i].TakeEvents()) {
      spdlog::info("{}", e);
      changed = true;
    }
  }
  return changed;
}

}  // namespace

TaskWatcher::TaskWatcher(WatcherOptions options, std::function<void()> on_change)
    : options_(std::move(options)), on_change_(std::move(on_change)) {
  const double now = MonotonicSeconds();
  auto snapshot = std::make_shared<LocalSnapshot>();
  for (const WatchedTask& t : options_.tasks) {
    trackers_.emplace_back(options_.cluster, t.task, t.address, t.local, options_.tracker, now,
                           options_.start_unix);
    if (t.local) trackers_.back().SetCgroupReader(RealCgroupReader());
    snapshot->views.push_back(trackers_.back().view());
    snapshot->counters.push_back(trackers_.back().counters());
  }
  snapshot_ = std::move(snapshot);
}

TaskWatcher::~TaskWatcher() { Stop(); }

void TaskWatcher::Start() {
  thread_ = std::thread([this] { Loop(); });
}

void TaskWatcher::Stop() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

std::shared_ptr<const LocalSnapshot> TaskWatcher::snapshot() const {
  std::lock_guard lock(mu_);
  return snapshot_;
}

void TaskWatcher::Publish(std::vector<TaskView> views, std::vector<TaskCounters> counters,
                          bool paused, bool changed) {
  // A task held up by a peer is news for the exchange at every poll, not only at a transition:
  // it probes that peer's node at once.
  const bool held_up = std::any_of(views.begin(), views.end(), HeldUpByAPeer);
  auto s = std::make_shared<LocalSnapshot>();
  s->views = std::move(views);
  s->counters = std::move(counters);
  {
    std::lock_guard lock(mu_);
    s->pauses = snapshot_->pauses + (paused ? 1 : 0);
    snapshot_ = std::move(s);
  }
  if ((changed || held_up) && on_change_) on_change_();
}

void TaskWatcher::Loop() {
  std::vector<HeartbeatPoller::Target> targets;
  for (const WatchedTask& t : options_.tasks) {
    targets.push_back({t.address, t.local, t.black_box, t.task});
  }
  HeartbeatPoller poller(targets, options_.heartbeat_deadline_ms, options_.watcher_name,
                         options_.credentials, options_.finder, options_.hooks.get());
  const double interval = options_.tracker.interval_s;
  const double pause_threshold = std::max(1.0, 10 * interval);
  const int relax_ticks = RelaxTicks(interval);
  const ProcReader proc = [](int64_t pid) { return ReadProcStat(pid); };
  uint64_t tick_no = 0;
  double next_tick = MonotonicSeconds();
  std::vector<TaskView> views(trackers_.size());
  std::vector<TaskCounters> counters(trackers_.size());
  while (true) {
    {
      std::lock_guard lock(mu_);
      if (stop_) break;
    }
    bool failed = false;
    // Until the next tick (a stop request is seen within one interval).
    poller.Wait(next_tick, [&](size_t i, const PollResult& r) {
      trackers_[i].OnResult(r);
      failed |= !r.ok;
    });
    double now = MonotonicSeconds();
    // A failed poll may be decisive (connection refused, process gone): judge it now rather
    // than at the next tick.
    if (now < next_tick && !failed) continue;
    const bool tick = now >= next_tick;
    const bool paused = tick && now - next_tick > pause_threshold;
    if (paused) {
      spdlog::warn("the sidecar itself was paused for {:.1f} s; re-learning before judging tasks",
                   now - next_tick);
      for (auto& t : trackers_) t.OnSidecarPause(now);
    }
    if (tick) PollDue(trackers_, poller, now, ++tick_no, relax_ticks, proc);
    const bool changed = EvaluateAll(trackers_, now, proc, views, counters);
    Publish(views, counters, paused, changed);
    if (tick) {
      next_tick += interval;
      if (next_tick < now) next_tick = now + interval;
    }
  }
  poller.Shutdown();
}

}  // namespace trainscope::sidecar
