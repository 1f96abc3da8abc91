#pragma once
// Runtime internals shared by task.cc and parameter_client.cc: the session (channels and peer
// health for each ps task) and gRPC plumbing. Not part of the public API.

#include <grpcpp/grpcpp.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "task_status.h"
#include "trainscope/common/cluster_spec.h"
#include "trainscope/common/grpc_channel.h"
#include "trainscope/runtime/tensor.h"
#include "trainscope/telemetry/grpc_instrumentation.h"
#include "trainscope/v1/runtime.pb.h"

namespace trainscope {

namespace telemetry {
class Telemetry;
}

// How tasks talk to each other: a ping 200 ms after the last, answered within 300 ms, so a
// connection that stops carrying packets fails within 0.5 s (the sidecar names the partition
// from that failure); reconnection 100-250 ms apart, so a healed path carries calls again within
// a quarter of a second (docs/sidecar.md, "Chaos"). The ps servers accept pings that often.
ChannelOptions PeerChannelOptions();

// A channel to `address` with PeerChannelOptions, messages of any size, and `credentials`
// (plain text or TLS, see MakeChannelCredentials).
std::shared_ptr<grpc::Channel> MakePeerChannel(
    const std::string& address, std::shared_ptr<grpc::ChannelCredentials> credentials);

// The ps tasks a worker reached in CreateSession. Immutable after creation; thread-safe.
class FaultInjector;

class Session {
 public:
  struct Peer {
    TaskRef task;
    std::string address;
    std::shared_ptr<grpc::Channel> channel;
    PeerHealth* health;
    int index = -1;  // Its telemetry peer index (RpcMetrics::PeerIndex).
  };
  Session(std::vector<Peer> ps, telemetry::Telemetry* telemetry, TaskStatus* status,
          v1::TaskIdentity identity, FaultInjector* faults = nullptr,
          std::function<bool()> stopping = nullptr)
      : ps_(std::move(ps)),
        telemetry_(telemetry),
        status_(status),
        identity_(std::move(identity)),
        faults_(faults),
        stopping_(std::move(stopping)) {}
  const Peer& ps(int index) const { return ps_[index]; }
  int num_ps() const { return static_cast<int>(ps_.size()); }
  // May be null.
  telemetry::Telemetry* telemetry() const { return telemetry_; }
  // What the task reports in its heartbeat (waiting on ps tasks whose calls fail).
  TaskStatus* status() const { return status_; }
  // Who this task is, as its handshakes say.
  const v1::TaskIdentity& identity() const { return identity_; }
  // The wedges InjectFault arms; may be null.
  FaultInjector* faults() const { return faults_; }
  // The task was told to stop (a signal): waiting on a ps ends.
  bool stopping() const { return stopping_ && stopping_(); }

 private:
  std::vector<Peer> ps_;
  telemetry::Telemetry* telemetry_;
  TaskStatus* status_;
  v1::TaskIdentity identity_;
  FaultInjector* faults_;
  std::function<bool()> stopping_;
};

class ParameterClient;
// The client of the ps tasks of `session`, as `self`, with a deadline on every attempt and
// `ps_patience_s` of patience with an outage (ParameterClient). `session` must outlive it.
std::unique_ptr<ParameterClient> NewParameterClient(Session* session, const TaskRef& self,
                                                    int rpc_deadline_ms, double ps_patience_s);

// One handshake with `peer` as `identity`, waiting at most `deadline_ms`; records the peer's
// identity in its PeerHealth. Used again when a ps turns out to have restarted, so that it
// knows this task's session (and accepts its Done).
absl::StatusOr<v1::HandshakeResponse> HandshakeWith(const Session::Peer& peer,
                                                    const v1::TaskIdentity& identity,
                                                    int deadline_ms);

// A message's size in bytes, as its call metrics count it.
inline int64_t MessageBytes(const google::protobuf::MessageLite& message) {
  return static_cast<int64_t>(message.ByteSizeLong());
}

// Proto <-> bookkeeping conversions at the edge.
TensorSpec SpecFromProto(const v1::Tensor& tensor);
void SpecToProto(const TensorSpec& spec, v1::Tensor* tensor);
v1::TaskId TaskIdToProto(const TaskRef& ref);
TaskRef TaskIdFromProto(const v1::TaskId& id);
// Tracing fields of a ParameterService request (they all have the same ones).
struct TraceFields {
  uint64_t trace_id_high = 0;
  uint64_t trace_id_low = 0;
  uint64_t span_id = 0;
  uint32_t flags = 0;
};
// The trace context of `call` as request fields; all zero when the call is not traced.
TraceFields TraceToFields(const telemetry::ClientCall& call);
// Earlier calls to the same peer that `call` should tell it were kept, as CallIds.
void KeptToProto(const telemetry::ClientCall& call,
                 google::protobuf::RepeatedPtrField<v1::CallId>* kept);
// What a request carried.
telemetry::RemoteContext TraceFromFields(
    const TraceFields& fields, const google::protobuf::RepeatedPtrField<v1::CallId>& kept);

// Puts `call`'s trace context into `request`; leaves untraced calls' requests without it.
template <typename Request>
void SetTrace(const telemetry::ClientCall& call, Request* request) {
  if (!call.context().valid()) return;
  const TraceFields f = TraceToFields(call);
  request->set_trace_id_high(f.trace_id_high);
  request->set_trace_id_low(f.trace_id_low);
  request->set_span_id(f.span_id);
  request->set_trace_flags(f.flags);
  request->clear_kept_calls();
  KeptToProto(call, request->mutable_kept_calls());
}

// What `request` carried, or null (into `*out`) when it carried no trace context.
template <typename Request>
const telemetry::RemoteContext* GetTrace(const Request& request, telemetry::RemoteContext* out) {
  if (request.span_id() == 0) return nullptr;
  *out = TraceFromFields(
      {request.trace_id_high(), request.trace_id_low(), request.span_id(), request.trace_flags()},
      request.kept_calls());
  return out;
}

}  // namespace trainscope
