#pragma once
// What a ps tells its callers of its memory: the incarnation of this process (a new one means it
// restarted and lost what it held) and the checkpoint it restored at startup, if any. In
// Handshake, CreateVariable and Heartbeat answers whole; in Pull and Push answers (the hot path)
// the incarnation alone. Private to the runtime.

#include <cstdint>
#include <string>

#include "trainscope/v1/runtime.pb.h"

namespace trainscope {

// Set up before the ps serves (SetRestored), then only read: thread-safe from then on.
class PsMemory {
 public:
  explicit PsMemory(uint64_t incarnation) : incarnation_(incarnation) {}

  // The ps restored the checkpoint of `step` from `from` (its path) at startup.
  void SetRestored(int64_t step, std::string from);

  // All of it: the incarnation, and what was restored when something was.
  void Fill(v1::PsState* state) const;
  // The incarnation alone: a worker that sees a new one handshakes again and learns the rest.
  void FillIncarnation(v1::PsState* state) const { state->set_incarnation(incarnation_); }

 private:
  const uint64_t incarnation_;
  bool restored_ = false;
  int64_t restored_step_ = 0;
  std::string restored_from_;
};

}  // namespace trainscope
