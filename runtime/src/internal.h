#pragma once
// Runtime internals shared by task.cc and parameter_client.cc: the session (channels and peer
// health for each ps task) and gRPC plumbing. Not part of the public API.

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "trainscope/runtime/cluster_spec.h"
#include "trainscope/runtime/task_status.h"
#include "trainscope/runtime/tensor.h"
#include "trainscope/v1/runtime.pb.h"

namespace trainscope {

// A channel to `address` that reconnects quickly (100 ms to 1 s backoff) and carries messages
// of any size.
std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address);

// The ps tasks a worker reached in CreateSession. Immutable after creation; thread-safe.
class Session {
 public:
  struct Peer {
    TaskRef task;
    std::string address;
    std::shared_ptr<grpc::Channel> channel;
    PeerHealth* health;
  };
  explicit Session(std::vector<Peer> ps) : ps_(std::move(ps)) {}
  const Peer& ps(int index) const { return ps_[index]; }
  int num_ps() const { return static_cast<int>(ps_.size()); }

 private:
  std::vector<Peer> ps_;
};

// Proto <-> bookkeeping conversions at the edge.
TensorSpec SpecFromProto(const v1::Tensor& tensor);
void SpecToProto(const TensorSpec& spec, v1::Tensor* tensor);
v1::TaskId TaskIdToProto(const TaskRef& ref);
TaskRef TaskIdFromProto(const v1::TaskId& id);

}  // namespace trainscope
