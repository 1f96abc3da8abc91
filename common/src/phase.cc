// Phase names; see phase.h.
#include "trainscope/common/phase.h"

namespace trainscope {

std::string_view PhaseName(Phase phase) {
  switch (phase) {
    case Phase::kStarting:
      return "starting";
    case Phase::kCreatingSession:
      return "creating_session";
    case Phase::kTraining:
      return "training";
    case Phase::kDone:
      return "done";
    case Phase::kServing:
      return "serving";
    case Phase::kLeaving:
      return "leaving";
    case Phase::kUnknown:
      break;
  }
  return "";
}

Phase PhaseFromWire(int value) {
  return value >= 1 && value <= 6 ? static_cast<Phase>(value) : Phase::kUnknown;
}

}  // namespace trainscope
