#pragma once
// Where a stuck task is stuck, in words, from what its sidecar knows: the calls in flight of its
// last heartbeat, the snapshot of its threads, and the states of the tasks it calls. The reason
// a person reads: "main thread waiting 41 s in Pull to ps:1 (ps:1 is hung: ...)". Pure
// functions of values (the keeper's snapshots come in as NewestStacks); thread-safe.

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "trainscope/sidecar/api.h"
#include "trainscope/sidecar/task_view.h"

namespace trainscope::sidecar {

// The state of another task in a few words ("hung: process 42 is stopped (state T)"), or ""
// when it is up or unknown.
using PeerStateWords = std::function<std::string(const std::string& task)>;

// The explanation of `task` (a local task that is hung, stalled or blocked) at `now_unix`, from
// its last in-flight calls, `snapshot` (null when none of the current process) and its peers'
// states. "" when nothing is known beyond the state's own reason.
std::string ExplainStuck(const TaskView& task, const pb::StackSnapshot* snapshot, double now_unix,
                         const PeerStateWords& peer_state);

// Appends to the reason of each stuck task of `local` where it is stuck (ExplainStuck, with the
// newest snapshot of its current process in `newest`, and the states of its peers in `peers`,
// every task's view) and sets its stuck_where.
void ExplainStuckTasks(std::vector<TaskView>& local, const NewestStacks& newest,
                       const std::vector<TaskView>& peers, double now_unix);

// "trainscope::FaultInjector::TakeAThenB" from a demangled function with its parameters.
std::string ShortFunction(std::string_view function);

// The innermost frame of `thread` that is the program's own code: not libc, the pthread or
// futex internals, nor the standard library's lock wrappers. "" when none.
std::string OwnFunction(const pb::ThreadStack& thread);

// True when `thread` waits to take a mutex (its stack is in a lock function).
bool WaitsOnLock(const pb::ThreadStack& thread);

}  // namespace trainscope::sidecar
