#pragma once
// Runtime internals shared by task.cc and parameter_client.cc: the session (channels and peer
// health for each ps task) and gRPC plumbing. Not part of the public API.

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "task_status.h"
#include "trainscope/common/cluster_spec.h"
#include "trainscope/runtime/tensor.h"
#include "trainscope/v1/runtime.pb.h"

namespace trainscope {

namespace telemetry {
class Telemetry;
}

// A channel from `self` to `peer` at `address` with keepalive (a connection that stops carrying
// packets fails within about 2 s), quick reconnection (100 ms to 1 s backoff), messages of any
// size, and its calls recorded in `telemetry` (may be null).
std::shared_ptr<grpc::Channel> MakePeerChannel(const std::string& address,
                                               telemetry::Telemetry* telemetry = nullptr,
                                               const TaskRef& self = {}, const TaskRef& peer = {});

// The ps tasks a worker reached in CreateSession. Immutable after creation; thread-safe.
class Session {
 public:
  struct Peer {
    TaskRef task;
    std::string address;
    std::shared_ptr<grpc::Channel> channel;
    PeerHealth* health;
  };
  Session(std::vector<Peer> ps, telemetry::Telemetry* telemetry, TaskStatus* status)
      : ps_(std::move(ps)), telemetry_(telemetry), status_(status) {}
  const Peer& ps(int index) const { return ps_[index]; }
  int num_ps() const { return static_cast<int>(ps_.size()); }
  // May be null.
  telemetry::Telemetry* telemetry() const { return telemetry_; }
  // What the task reports in its heartbeat (waiting on ps tasks whose calls fail).
  TaskStatus* status() const { return status_; }

 private:
  std::vector<Peer> ps_;
  telemetry::Telemetry* telemetry_;
  TaskStatus* status_;
};

// Proto <-> bookkeeping conversions at the edge.
TensorSpec SpecFromProto(const v1::Tensor& tensor);
void SpecToProto(const TensorSpec& spec, v1::Tensor* tensor);
v1::TaskId TaskIdToProto(const TaskRef& ref);
TaskRef TaskIdFromProto(const v1::TaskId& id);

}  // namespace trainscope
