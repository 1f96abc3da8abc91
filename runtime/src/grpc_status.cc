// The one place where absl::Status and grpc::Status convert; and proto conversions.
#include <grpcpp/grpcpp.h>

#include "internal.h"
#include "trainscope/common/grpc_channel.h"
#include "trainscope/runtime/status_macros.h"
#include "trainscope/telemetry/grpc_instrumentation.h"

namespace trainscope {

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

std::shared_ptr<grpc::Channel> MakePeerChannel(const std::string& address,
                                               telemetry::Telemetry* telemetry, const TaskRef& self,
                                               const TaskRef& peer) {
  ChannelOptions options;
  options.max_receive_bytes = -1;
  grpc::ChannelArguments args = MakeChannelArguments(options);
  args.SetMaxSendMessageSize(-1);
  // Keep one connection per peer even when several channels point at it.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  auto interceptors = telemetry::ClientInterceptors(telemetry, self, peer, address);
  if (interceptors.empty()) {
    return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
  }
  return grpc::experimental::CreateCustomChannelWithInterceptors(
      address, grpc::InsecureChannelCredentials(), args, std::move(interceptors));
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

}  // namespace trainscope
