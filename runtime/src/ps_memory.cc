// PsMemory: the incarnation and restored checkpoint a ps reports; see ps_memory.h.
#include "ps_memory.h"

#include <utility>

namespace trainscope {

void PsMemory::SetRestored(int64_t step, std::string from) {
  restored_ = true;
  restored_step_ = step;
  restored_from_ = std::move(from);
}

void PsMemory::Fill(v1::PsState* state) const {
  state->set_incarnation(incarnation_);
  if (!restored_) return;
  state->set_restored(true);
  state->set_restored_step(restored_step_);
  state->set_restored_from(restored_from_);
}

}  // namespace trainscope
