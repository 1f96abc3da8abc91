// StackKeeper: a thread that looks at the local views every tick, captures a task when it enters
// a stuck state (once per incident) or when asked, keeps the newest snapshots within bounds, and
// refreshes the explanation of every stuck task.
#include "trainscope/sidecar/stack_keeper.h"

#include <malloc.h>

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"
#include "trainscope/common/clock.h"
#include "trainscope/common/proc.h"

namespace trainscope::sidecar {
namespace {

pb::CallInFlight CallToProto(const CallInFlight& c, double extra_age) {
  pb::CallInFlight out;
  out.set_method(c.method);
  out.set_peer(c.peer.ShortName());
  out.set_age_seconds(c.age_seconds + std::max(0.0, extra_age));
  out.set_trace_id(c.trace_id);
  out.set_tid(c.tid);
  out.set_served(c.served);
  return out;
}

}  // namespace

StackKeeper::StackKeeper(KeeperOptions options, Views local, Capturer capture)
    : options_(std::move(options)),
      local_(std::move(local)),
      capture_(capture ? std::move(capture) : [o = options_.capture](const TaskView& view) {
        return forensics::Capture(view.pid, o);
      }) {}

StackKeeper::~StackKeeper() { Stop(); }

void StackKeeper::Start() {
  thread_ = std::thread([this] { Loop(); });
}

void StackKeeper::Stop() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
    for (auto& d : demands_) {
      d->done = true;
      d->status = absl::UnavailableError("the sidecar is stopping");
    }
    demands_.clear();
    pending_.clear();
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void StackKeeper::Loop() {
  while (true) {
    {
      std::unique_lock lock(mu_);
      cv_.wait_for(lock, std::chrono::duration<double>(options_.tick_s),
                   [&] { return stop_ || !demands_.empty(); });
      if (stop_) return;
    }
    Tick();
  }
}

void StackKeeper::Tick() {
  ServeDemands();
  const std::vector<TaskView> local = local_();
  const double now = UnixSeconds();
  for (const TaskView& v : local) {
    const std::string name = v.task.ShortName();
    Incident& incident = incidents_[name];
    if (!IsStuck(v.state)) {
      incident.taken = false;
      continue;
    }
    if (incident.since != v.since) {  // A new incident (or a change between stuck states).
      incident.since = v.since;
      incident.taken = false;
    }
    const bool due = v.state != TaskState::kBlocked || now - v.since >= options_.blocked_after_s;
    if (incident.taken || !due || v.pid <= 0 ||
        MonotonicSeconds() - incident.last_auto < options_.auto_min_interval_s) {
      continue;
    }
    {
      std::lock_guard lock(mu_);
      if (Recent(name, v.pid)) continue;  // At most one a second; tried again next tick.
    }
    incident.taken = true;
    incident.last_auto = MonotonicSeconds();
    if (Take(v, std::string(StateName(v.state))).ok()) {
      std::lock_guard lock(mu_);
      ++stats_.automatic;
    }
  }
}

void StackKeeper::ServeDemands() {
  while (true) {
    std::shared_ptr<Demand> d;
    {
      std::lock_guard lock(mu_);
      if (demands_.empty()) return;
      d = demands_.front();
      demands_.pop_front();
      if (d->waiters <= 0) {  // Every asker left (or timed out): nobody wants it now.
        d->done = true;
        if (auto it = pending_.find(d->task); it != pending_.end() && it->second == d) {
          pending_.erase(it);
        }
        continue;
      }
      if (std::optional<absl::Status> recent = Recent(d->task, d->pid)) {
        Finish(d, *recent);  // Captured meanwhile (automatically): that one serves.
        continue;
      }
    }
    absl::Status st;
    const std::vector<TaskView> local = local_();  // As the demand was made, not a tick ago.
    const TaskView* v = FindTask(local, d->task);
    if (v == nullptr) {
      st = absl::NotFoundError(absl::StrCat(d->task, " is not watched by this sidecar"));
    } else if (v->pid <= 0 && !v->identity_error.empty()) {
      st = absl::FailedPreconditionError(
          absl::StrCat("not capturing ", d->task, ": ", v->identity_error));
    } else if (v->pid <= 0) {
      st = absl::FailedPreconditionError(
          absl::StrCat(d->task, " has not answered a heartbeat yet: nothing to capture"));
    } else {
      st = Take(*v, "demand");
    }
    std::lock_guard lock(mu_);
    Finish(d, st);
  }
}

void StackKeeper::Finish(const std::shared_ptr<Demand>& d, absl::Status status) {
  d->status = std::move(status);
  d->done = true;
  if (auto it = pending_.find(d->task); it != pending_.end() && it->second == d) {
    pending_.erase(it);
  }
  cv_.notify_all();
}

std::optional<absl::Status> StackKeeper::Recent(const std::string& task, int64_t pid) const {
  auto it = attempts_.find(task);
  if (it == attempts_.end() || !it->second.done || it->second.pid != pid ||
      MonotonicSeconds() - it->second.at >= options_.demand_min_interval_s) {
    return std::nullopt;
  }
  return it->second.status;
}

namespace {

// OK when `view`'s process is still the one its pid was verified as (the same start time): a
// task that died and whose pid now names another process is never captured as the task. (A view
// with no start time is not checked: tests' made-up views.)
absl::Status SameProcess(const TaskView& view) {
  if (view.pid_start_ticks == 0) return absl::OkStatus();
  std::optional<ProcStat> st = ReadProcStat(view.pid);
  if (!st) return absl::FailedPreconditionError(absl::StrCat("pid ", view.pid, " has exited"));
  if (view.pid_start_ticks != 0 && st->start_ticks != view.pid_start_ticks) {
    return absl::FailedPreconditionError(absl::StrCat(
        "pid ", view.pid, " now names a process started after the task's: not captured"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status StackKeeper::Take(const TaskView& view, const std::string& trigger) {
  const std::string name = view.task.ShortName();
  // The start time is checked before and after: a capture that raced the task's death and a
  // reuse of its pid is dropped.
  const absl::Status before = SameProcess(view);
  {
    std::lock_guard lock(mu_);
    attempts_[name] = Attempt{view.pid, MonotonicSeconds(), false, absl::OkStatus()};
  }
  absl::StatusOr<forensics::ProcessSnapshot> s =
      before.ok() ? capture_(view) : absl::StatusOr<forensics::ProcessSnapshot>(before);
  if (s.ok()) {
    if (absl::Status after = SameProcess(view); !after.ok()) s = after;
  }
  if (!s.ok()) {
    std::lock_guard lock(mu_);
    ++stats_.failures;
    attempts_[name].status = s.status();
    attempts_[name].done = true;
    spdlog::warn("trainscope-sidecar: no snapshot of {} (pid {}): {}", name, view.pid,
                 std::string(s.status().message()));
    return s.status();
  }
  // libdw's symbol tables and line info (tens of MiB for a program with debug info) were freed
  // with the capture's session; give the memory back rather than keep the peak.
  malloc_trim(0);
  pb::StackSnapshot snapshot = ToProto(view, *s, trigger);
  spdlog::info("trainscope-sidecar: snapshot of {} ({}, {} threads, longest pause {:.1f} ms){}{}",
               name, trigger, s->threads.size(), s->pause_ms_max,
               snapshot.summary().empty() ? "" : ": ", snapshot.summary());
  {
    std::lock_guard lock(mu_);
    ++stats_.captures;
    stats_.last_pause_ms = s->pause_ms_max;
  }
  Keep(name, std::move(snapshot));
  std::lock_guard lock(mu_);
  attempts_[name].done = true;
  return absl::OkStatus();
}

pb::StackSnapshot StackKeeper::ToProto(const TaskView& view, const forensics::ProcessSnapshot& s,
                                       const std::string& trigger) const {
  pb::StackSnapshot out;
  out.set_task(view.task.ShortName());
  out.set_node(options_.node);
  out.set_pid(s.pid);
  out.set_command(s.command);
  out.set_process_state(std::string(1, s.state));
  out.set_taken_unix(s.taken_unix);
  out.set_trigger(trigger);
  out.set_reason(view.reason);
  out.set_stacks(s.stacks);
  out.set_stacks_error(s.stacks_error);
  out.set_pause_ms_max(s.pause_ms_max);
  out.set_pause_ms_total(s.pause_ms_total);
  const double extra =
      view.inflight_reported_unix > 0 ? s.taken_unix - view.inflight_reported_unix : 0;
  for (const forensics::ThreadSnapshot& t : s.threads) {
    pb::ThreadStack* thread = out.add_threads();
    thread->set_tid(t.tid);
    thread->set_name(t.name);
    thread->set_state(std::string(1, t.state));
    thread->set_wchan(t.wchan);
    thread->set_syscall(t.syscall);
    thread->set_stack_error(t.stack_error);
    for (const forensics::Frame& f : t.frames) {
      pb::StackFrame* frame = thread->add_frames();
      frame->set_pc(f.pc);
      frame->set_function(f.function);
      frame->set_module(f.module);
      frame->set_file(f.file);
      frame->set_line(f.line);
    }
    for (const CallInFlight& c : view.inflight) {
      if (c.tid == t.tid) *thread->add_calls() = CallToProto(c, extra);
    }
  }
  for (const CallInFlight& c : view.inflight) *out.add_inflight() = CallToProto(c, extra);
  out.set_inflight_reported_unix(view.inflight_reported_unix);
  if (options_.summarize) out.set_summary(options_.summarize(view, out));
  out.set_bytes(static_cast<int64_t>(out.ByteSizeLong()));
  return out;
}

void StackKeeper::Keep(const std::string& task, pb::StackSnapshot snapshot) {
  std::lock_guard lock(mu_);
  std::deque<pb::StackSnapshot>& list = kept_[task];
  stats_.bytes_kept += snapshot.bytes();
  ++stats_.kept;
  list.push_front(std::move(snapshot));
  auto drop_oldest = [&](std::deque<pb::StackSnapshot>& from) {
    stats_.bytes_kept -= from.back().bytes();
    --stats_.kept;
    from.pop_back();
  };
  while (static_cast<int>(list.size()) > std::max(1, options_.per_task)) drop_oldest(list);
  // Over the memory bound: drop the oldest snapshot of the task holding the most, never the one
  // just taken.
  while (stats_.bytes_kept > options_.memory_bytes) {
    std::deque<pb::StackSnapshot>* largest = nullptr;
    int64_t largest_bytes = 0;
    for (auto& [name, l] : kept_) {
      int64_t bytes = 0;
      for (const pb::StackSnapshot& s : l) bytes += s.bytes();
      if (l.size() > (name == task ? 1u : 0u) && bytes > largest_bytes) {
        largest = &l;
        largest_bytes = bytes;
      }
    }
    if (largest == nullptr) break;
    drop_oldest(*largest);
  }
  PublishNewest();
}

// Waits for a capture of `view`'s process: the one already asked for, or a new one, unless one
// was begun within the last demand_min_interval_s (its result then).
absl::Status StackKeeper::AwaitCapture(const TaskView& view, const DemandOptions& options) {
  const std::string task = view.task.ShortName();
  std::unique_lock lock(mu_);
  if (stop_) return absl::UnavailableError("the sidecar is stopping");
  if (std::optional<absl::Status> recent = Recent(task, view.pid)) {
    ++stats_.demands_recent;
    return *recent;
  }
  std::shared_ptr<Demand>& pending = pending_[task];
  if (pending != nullptr && pending->pid == view.pid && !pending->done) {
    ++stats_.demands_shared;
  } else {
    pending = std::make_shared<Demand>();
    pending->task = task;
    pending->pid = view.pid;
    demands_.push_back(pending);
    ++stats_.demands_captured;
    cv_.notify_all();
  }
  const std::shared_ptr<Demand> d = pending;
  ++d->waiters;
  const double deadline = MonotonicSeconds() + options.timeout_s;
  while (!d->done) {
    const bool cancelled = options.cancelled && options.cancelled();
    if (cancelled || MonotonicSeconds() >= deadline) {
      --d->waiters;
      ++stats_.demands_dropped;
      if (cancelled) return absl::CancelledError("the asker left");
      return absl::DeadlineExceededError(
          absl::StrCat("the snapshot of ", task, " took longer than ", options.timeout_s, " s"));
    }
    cv_.wait_for(lock, std::chrono::milliseconds(100));
  }
  --d->waiters;
  return d->status;
}

absl::StatusOr<pb::StackList> StackKeeper::Stacks(const std::string& task, bool fresh,
                                                  const DemandOptions& demand) {
  const std::vector<TaskView> local = local_();
  const TaskView* v = FindTask(local, task);
  if (v == nullptr) return absl::NotFoundError(absl::StrCat(task, " is not watched here"));
  if (fresh) {
    // An exited task first: its pid may still name a zombie that no longer holds the task's port.
    if (v->state == TaskState::kDead || v->state == TaskState::kDone) {
      return absl::FailedPreconditionError(
          absl::StrCat(task, " has exited (", std::string(StateName(v->state)), ": ", v->reason,
                       "): no process to capture; the kept snapshots are at this URL without "
                       "fresh=1"));
    }
    if (v->pid <= 0 && !v->identity_error.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat("not capturing ", task, ": ", v->identity_error));
    }
    if (v->pid <= 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          task, " has not answered a heartbeat yet: its process is not known, nothing to capture"));
    }
    if (absl::Status st = AwaitCapture(*v, demand); !st.ok()) return st;
  }
  pb::StackList out;
  out.set_task(task);
  out.set_node(options_.node);
  std::lock_guard lock(mu_);
  if (auto it = kept_.find(task); it != kept_.end()) {
    for (const pb::StackSnapshot& s : it->second) *out.add_snapshots() = s;
  }
  return out;
}

std::shared_ptr<const NewestStacks> StackKeeper::Newest() const {
  std::lock_guard lock(mu_);
  return newest_;
}

void StackKeeper::PublishNewest() {
  auto newest = std::make_shared<NewestStacks>();
  for (const auto& [task, list] : kept_) {
    if (!list.empty()) newest->emplace(task, list.front());
  }
  newest_ = std::move(newest);
}

KeeperStats StackKeeper::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

}  // namespace trainscope::sidecar
