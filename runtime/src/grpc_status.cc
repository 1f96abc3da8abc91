// The one place where absl::Status and grpc::Status convert; and proto conversions.
#include <grpcpp/grpcpp.h>

#include "internal.h"
#include "trainscope/common/grpc_channel.h"
#include "trainscope/runtime/status_macros.h"

namespace trainscope {

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

ChannelOptions PeerChannelOptions() {
  ChannelOptions options;
  options.keepalive_time_ms = 200;
  options.keepalive_timeout_ms = 300;
  options.min_reconnect_ms = 100;
  options.max_reconnect_ms = 250;
  return options;
}

std::shared_ptr<grpc::Channel> MakePeerChannel(
    const std::string& address, std::shared_ptr<grpc::ChannelCredentials> credentials) {
  ChannelOptions options = PeerChannelOptions();
  options.max_receive_bytes = -1;
  grpc::ChannelArguments args = MakeChannelArguments(options);
  args.SetMaxSendMessageSize(-1);
  // Keep one connection per peer even when several channels point at it.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return grpc::CreateCustomChannel(address, std::move(credentials), args);
}

TensorSpec SpecFromProto(const v1::Tensor& tensor) {
  TensorSpec spec;
  int dtype = tensor.dtype();
  spec.dtype = dtype >= 1 && dtype <= 4 ? static_cast<DType>(dtype) : DType::kInvalid;
  spec.shape.assign(tensor.shape().begin(), tensor.shape().end());
  return spec;
}

void SpecToProto(const TensorSpec& spec, v1::Tensor* tensor) {
  tensor->set_dtype(static_cast<v1::DataType>(spec.dtype));
  tensor->mutable_shape()->Assign(spec.shape.begin(), spec.shape.end());
}

v1::TaskId TaskIdToProto(const TaskRef& ref) {
  v1::TaskId id;
  id.set_role(ref.role);
  id.set_index(ref.index);
  return id;
}

TaskRef TaskIdFromProto(const v1::TaskId& id) { return TaskRef{id.role(), id.index()}; }

namespace {

template <size_t N>
uint64_t BigEndian(const std::array<uint8_t, N>& bytes, size_t from) {
  uint64_t v = 0;
  for (size_t i = from; i < from + 8; ++i) v = v << 8 | bytes[i];
  return v;
}

template <size_t N>
void FromBigEndian(uint64_t v, std::array<uint8_t, N>* bytes, size_t from) {
  for (size_t i = from + 8; i > from; --i, v >>= 8) (*bytes)[i - 1] = static_cast<uint8_t>(v);
}

}  // namespace

TraceFields TraceToFields(const telemetry::ClientCall& call) {
  const telemetry::SpanContext& context = call.context();
  if (!context.valid()) return {};
  return {BigEndian(context.trace_id, 0), BigEndian(context.trace_id, 8),
          BigEndian(context.span_id, 0), context.sampled ? 1u : 0u};
}

void KeptToProto(const telemetry::ClientCall& call,
                 google::protobuf::RepeatedPtrField<v1::CallId>* kept) {
  std::vector<telemetry::CallId> ids;
  call.TakeKept(&ids);
  for (const telemetry::CallId& id : ids) {
    v1::CallId* out = kept->Add();
    out->set_trace_id_high(BigEndian(id.trace_id, 0));
    out->set_trace_id_low(BigEndian(id.trace_id, 8));
    out->set_span_id(BigEndian(id.span_id, 0));
    out->set_start_unix_nano(id.start_unix_nano);
  }
}

telemetry::RemoteContext TraceFromFields(
    const TraceFields& fields, const google::protobuf::RepeatedPtrField<v1::CallId>& kept) {
  telemetry::RemoteContext remote;
  FromBigEndian(fields.trace_id_high, &remote.parent.trace_id, 0);
  FromBigEndian(fields.trace_id_low, &remote.parent.trace_id, 8);
  FromBigEndian(fields.span_id, &remote.parent.span_id, 0);
  remote.parent.sampled = (fields.flags & 1) != 0;
  for (const v1::CallId& id : kept) {
    telemetry::CallId& c = remote.kept.emplace_back();
    FromBigEndian(id.trace_id_high(), &c.trace_id, 0);
    FromBigEndian(id.trace_id_low(), &c.trace_id, 8);
    FromBigEndian(id.span_id(), &c.span_id, 0);
    c.start_unix_nano = id.start_unix_nano();
  }
  return remote;
}

}  // namespace trainscope
