#pragma once
// The phases a task goes through, as the heartbeat reports them, and their one spelling (the
// `phase` label, the sidecar's API and its reasons all use it).

#include <string_view>

namespace trainscope {

// Values match trainscope.v1.Phase.
enum class Phase : int {
  kUnknown = 0,
  kStarting = 1,
  kCreatingSession = 2,
  kTraining = 3,
  kDone = 4,
  kServing = 5,
  // Stopped by a signal (SIGTERM: eviction, node drain) before finishing: not done.
  kLeaving = 6,
};

// "starting", "creating_session", "training", "done", "serving",
// "leaving"; "" for kUnknown or any value
// outside the enum (a newer peer's phase).
std::string_view PhaseName(Phase phase);
// The phase of a wire value; kUnknown for values this build does not know.
Phase PhaseFromWire(int value);

}  // namespace trainscope
