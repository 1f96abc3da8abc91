// TaskView state names and ordering; see task_view.h.
#include "trainscope/sidecar/task_view.h"

#include <algorithm>
#include <array>

#include "trainscope/sidecar/names.h"

namespace trainscope::sidecar {
namespace {

constexpr std::array<std::string_view, kNumTaskStates> kStateNames = {
    names::kStateUp,      names::kStateSlow,    names::kStateStalled,
    names::kStateBlocked, names::kStateMissing, names::kStateUnreachable,
    names::kStateHung,    names::kStateDead,    names::kStateDone};

}  // namespace

std::string_view StateName(TaskState state) { return kStateNames[static_cast<int>(state)]; }

bool ParseStateName(std::string_view name, TaskState* state) {
  for (int i = 0; i < kNumTaskStates; ++i) {
    if (kStateNames[i] == name) {
      *state = static_cast<TaskState>(i);
      return true;
    }
  }
  return false;
}

int Severity(TaskState state) { return state == TaskState::kDone ? -1 : static_cast<int>(state); }

bool IsHealthy(TaskState state) { return state == TaskState::kUp || state == TaskState::kDone; }

const TaskView* FindTask(const std::vector<TaskView>& views, std::string_view task) {
  for (const TaskView& v : views) {
    if (v.task.ShortName() == task) return &v;
  }
  return nullptr;
}

bool IsStuck(TaskState state) {
  return state == TaskState::kHung || state == TaskState::kStalled || state == TaskState::kBlocked;
}

bool HeldUpByAPeer(const TaskView& v) {
  return std::any_of(v.inflight.begin(), v.inflight.end(), WaitsLong) ||
         std::any_of(v.peers.begin(), v.peers.end(), FailsToReach);
}

double FailingSeconds(const PeerInfo& p) {
  if (!FailsToReach(p)) return 0;
  return p.seconds_failing > 0 ? p.seconds_failing : std::max(0.0, p.seconds_since_success);
}

std::vector<std::string> TaskView::WaitingOn() const {
  std::vector<std::string> out;
  for (const auto& b : blocked_on) out.push_back(b.peer.ShortName());
  return out;
}

void SortForPeople(std::vector<TaskView>& views) {
  std::stable_sort(views.begin(), views.end(), [](const TaskView& a, const TaskView& b) {
    if (Severity(a.state) != Severity(b.state)) return Severity(a.state) > Severity(b.state);
    return a.task < b.task;
  });
}

}  // namespace trainscope::sidecar
