// ExplainStuck: the oldest call the task waits for (and the state of the task it calls), else the
// oldest call it has served too long, else the threads waiting on locks (a deadlock names two),
// else where the main thread is.
#include "trainscope/sidecar/stuck_explain.h"

#include <algorithm>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "trainscope/common/clock.h"

namespace trainscope::sidecar {
namespace {

// Served calls older than this are worth naming.
constexpr double kLongServedCallS = 1.0;

bool IsRuntimeInternal(const pb::StackFrame& f) {
  const std::string& fn = f.function();
  const std::string& m = f.module();
  if (absl::StartsWith(m, "libc.so") || absl::StartsWith(m, "libpthread") ||
      absl::StartsWith(m, "ld-linux") || absl::StartsWith(m, "libstdc++")) {
    return true;
  }
  return fn.empty() || absl::StartsWith(fn, "__") || absl::StartsWith(fn, "std::") ||
         absl::StartsWith(fn, "pthread_") || absl::StartsWith(fn, "void std::") ||
         absl::StartsWith(fn, "gthread") || absl::StrContains(fn, "__gthread");
}

const pb::ThreadStack* FindThread(const pb::StackSnapshot* s, int64_t tid) {
  if (s == nullptr) return nullptr;
  for (const pb::ThreadStack& t : s->threads()) {
    if (t.tid() == tid) return &t;
  }
  return nullptr;
}

std::string ThreadWords(const TaskView& task, const pb::StackSnapshot* s, int64_t tid) {
  if (tid == task.pid && tid > 0) return "main thread";
  const pb::ThreadStack* t = FindThread(s, tid);
  if (t != nullptr && !t->name().empty()) return absl::StrCat("thread ", t->name(), " (", tid, ")");
  return absl::StrCat("thread ", tid);
}

std::string InWords(const pb::StackSnapshot* s, int64_t tid) {
  const pb::ThreadStack* t = FindThread(s, tid);
  if (t == nullptr) return "";
  const std::string own = OwnFunction(*t);
  return own.empty() ? "" : absl::StrCat(" in ", own);
}

// The oldest call in flight, made (served=false) or served, with its age now.
const CallInFlight* Oldest(const TaskView& task, bool served, double now_unix, double* age) {
  const CallInFlight* oldest = nullptr;
  for (const CallInFlight& c : task.inflight) {
    if (c.served != served) continue;
    if (oldest == nullptr || c.age_seconds > oldest->age_seconds) oldest = &c;
  }
  if (oldest != nullptr) {
    const double since =
        task.inflight_reported_unix > 0 ? now_unix - task.inflight_reported_unix : 0;
    *age = oldest->age_seconds + std::max(0.0, since);
  }
  return oldest;
}

std::string ExplainLocks(const TaskView& task, const pb::StackSnapshot& s) {
  std::vector<std::string> waiting;
  for (const pb::ThreadStack& t : s.threads()) {
    if (!WaitsOnLock(t)) continue;
    const std::string own = OwnFunction(t);
    waiting.push_back(
        absl::StrCat(ThreadWords(task, &s, t.tid()), own.empty() ? "" : " in " + own));
  }
  if (waiting.empty()) return "";
  if (waiting.size() == 1) return absl::StrCat(waiting[0], " waits for a mutex");
  const size_t shown = std::min<size_t>(waiting.size(), 4);
  std::vector<std::string> named(waiting.begin(), waiting.begin() + static_cast<long>(shown));
  return absl::StrCat("deadlock? ", waiting.size(),
                      " threads wait for mutexes: ", absl::StrJoin(named, ", "),
                      waiting.size() > shown ? ", ..." : "");
}

}  // namespace

std::string ShortFunction(std::string_view function) {
  // Cut the parameters: the first '(' at template depth 0 that is not "(anonymous namespace)".
  int depth = 0;
  for (size_t i = 0; i < function.size(); ++i) {
    const char c = function[i];
    if (c == '<') ++depth;
    if (c == '>') --depth;
    if (c == '(' && depth == 0 && function.substr(i, 21) != "(anonymous namespace)") {
      function = function.substr(0, i);
      break;
    }
  }
  // Cut a return type ("void foo" -> "foo"): the last space at depth 0.
  depth = 0;
  size_t start = 0;
  for (size_t i = 0; i < function.size(); ++i) {
    const char c = function[i];
    if (c == '<') ++depth;
    if (c == '>') --depth;
    if (c == ' ' && depth == 0 && function.substr(i + 1, 10) != "namespace)") start = i + 1;
  }
  return std::string(function.substr(start));
}

std::string OwnFunction(const pb::ThreadStack& thread) {
  for (const pb::StackFrame& f : thread.frames()) {
    if (!IsRuntimeInternal(f)) return ShortFunction(f.function());
  }
  return "";
}

bool WaitsOnLock(const pb::ThreadStack& thread) {
  for (const pb::StackFrame& f : thread.frames()) {
    const std::string& fn = f.function();
    if (absl::StartsWith(fn, "__lll_lock_wait") || absl::StartsWith(fn, "pthread_mutex_lock") ||
        absl::StartsWith(fn, "___pthread_mutex_lock") ||
        absl::StartsWith(fn, "__pthread_mutex_lock") || absl::StrContains(fn, "mutex::lock") ||
        absl::StartsWith(fn, "pthread_rwlock_") || absl::StartsWith(fn, "__pthread_rwlock_")) {
      return true;
    }
    if (!IsRuntimeInternal(f)) return false;  // Only the innermost frames count.
  }
  return false;
}

std::string ExplainStuck(const TaskView& task, const pb::StackSnapshot* snapshot, double now_unix,
                         const PeerStateWords& peer_state) {
  double age = 0;
  if (const CallInFlight* c = Oldest(task, false, now_unix, &age)) {
    const std::string peer = c->peer.ShortName();
    const std::string state = peer_state ? peer_state(peer) : "";
    return absl::StrCat(ThreadWords(task, snapshot, c->tid), " waiting ", HumanDuration(age),
                        " in ", c->method, " to ", peer,
                        state.empty() ? "" : absl::StrCat(" (", peer, " is ", state, ")"));
  }
  if (const CallInFlight* c = Oldest(task, true, now_unix, &age); c && age >= kLongServedCallS) {
    return absl::StrCat(ThreadWords(task, snapshot, c->tid), " serving ", c->method, " from ",
                        c->peer.ShortName(), " for ", HumanDuration(age),
                        InWords(snapshot, c->tid));
  }
  if (snapshot == nullptr) return "";
  if (std::string locks = ExplainLocks(task, *snapshot); !locks.empty()) return locks;
  for (const pb::ThreadStack& t : snapshot->threads()) {
    for (const pb::StackFrame& f : t.frames()) {
      if (absl::StrContains(f.function(), "CreateSession")) {
        return absl::StrCat(ThreadWords(task, snapshot, t.tid()), " in CreateSession");
      }
    }
  }
  if (const pb::ThreadStack* main = FindThread(snapshot, task.pid)) {
    const std::string own = OwnFunction(*main);
    if (!own.empty()) {
      return absl::StrCat("main thread in ", own,
                          main->syscall().empty() ? "" : " (" + main->syscall() + ")");
    }
  }
  return "";
}

namespace {

// The state of `peer` in a few words for the explanation of `task`; "" when up or unknown, and
// for a peer a blocked task's reason names already.
std::string PeerWords(const TaskView& task, const std::vector<TaskView>& peers,
                      const std::string& peer) {
  for (const BlockedPeer& b : task.blocked_on) {
    if (b.peer.ShortName() == peer) return "";
  }
  const TaskView* p = FindTask(peers, peer);
  if (p == nullptr || IsHealthy(p->state)) return "";
  // The state and the first clause of its reason: what it is, not where it is stuck.
  std::string words(StateName(p->state));
  const std::string first = p->reason.substr(0, p->reason.find("; "));
  if (!first.empty()) absl::StrAppend(&words, ": ", first.substr(0, 160));
  return words;
}

}  // namespace

void ExplainStuckTasks(std::vector<TaskView>& local, const NewestStacks& newest,
                       const std::vector<TaskView>& peers, double now_unix) {
  for (TaskView& v : local) {
    if (!IsStuck(v.state)) continue;
    const pb::StackSnapshot* snapshot = nullptr;
    if (auto it = newest.find(v.task.ShortName());
        it != newest.end() && it->second.pid() == v.pid) {
      snapshot = &it->second;
    }
    std::string e = ExplainStuck(
        v, snapshot, now_unix, [&](const std::string& peer) { return PeerWords(v, peers, peer); });
    if (e.empty()) continue;
    absl::StrAppend(&v.reason, v.reason.empty() ? "" : "; ", e);
    v.stuck_where = std::move(e);
  }
}

}  // namespace trainscope::sidecar
