#pragma once
// A task's answer to a Heartbeat: who it is, its phase and progress, what it waits on, the health
// of its calls to each peer, the calls in flight, its resource usage, what it served (a ps), and
// what a ps holds (its incarnation and restored checkpoint). Private to the runtime; the
// TaskService answers with it.

#include <string>

#include "trainscope/v1/runtime.pb.h"

namespace trainscope {

class PsMemory;
class TaskStatus;

// Thread-safe: Fill reads the task's status (thread-safe) and values fixed at construction.
class Heartbeat {
 public:
  // `status` must outlive this; `ps_memory` too, on a ps (null on other tasks). `identity` is who
  // the task is (built once in Start); `metrics_address` where its /metrics is, empty when none.
  Heartbeat(const TaskStatus* status, v1::TaskIdentity identity, std::string metrics_address,
            const PsMemory* ps_memory);

  // The answer, as of now (the status read once, resource usage and clocks read now).
  void Fill(v1::HeartbeatResponse* response) const;

 private:
  const TaskStatus* status_;
  v1::TaskIdentity identity_;
  std::string metrics_address_;
  const PsMemory* ps_memory_;
};

}  // namespace trainscope
