// libFuzzer target: OTLP Export requests as the sidecar's receiver takes them
// (sidecar/traces/src/trace_receiver.cc, TraceReceiver::Export without gRPC): the input is a
// serialized ExportTraceServiceRequest, which any task on the node may send. The spans it files go
// into a TraceStore that is then read the way the HTTP API reads it (slow and failed requests, each
// trace as JSON).
#include <cstddef>
#include <cstdint>
#include <set>
#include <string>

#include "google/protobuf/stubs/logging.h"
#include "trainscope/common/clock.h"
#include "trainscope/sidecar/api.h"
#include "trainscope/sidecar/trace_receiver.h"
#include "trainscope/sidecar/trace_store.h"

namespace {

namespace otlp = ::opentelemetry::proto::collector::trace::v1;
using trainscope::sidecar::TraceStore;

constexpr size_t kMaxTracesRead = 8;

// Reads back what was filed, as /api/v1/traces/... does.
void ReadStore(TraceStore& store, const otlp::ExportTraceServiceRequest& request) {
  const double now = trainscope::MonotonicSeconds();
  (void)store.Slow({}, now);
  (void)store.Errors({}, now);
  (void)store.Slow({"Push", "ps:0", 5}, now);
  std::set<std::string> trace_ids;
  for (const auto& rs : request.resource_spans()) {
    for (const auto& ss : rs.scope_spans()) {
      for (const auto& span : ss.spans()) {
        if (trace_ids.size() < kMaxTracesRead) trace_ids.insert(span.trace_id());
      }
    }
  }
  for (const std::string& id : trace_ids) {
    auto detail = store.Trace(trainscope::sidecar::HexId(id), now);
    if (detail) (void)trainscope::sidecar::ApiJson(trainscope::sidecar::ToProto(*detail));
  }
  (void)store.stats();
}

}  // namespace

// Protobuf logs every string field with invalid UTF-8 it refuses; at fuzzing speed that is noise.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  otlp::ExportTraceServiceRequest request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return 0;
  TraceStore store;
  trainscope::sidecar::TraceReceiver receiver(&store, /*forwarder=*/nullptr,
                                              trainscope::sidecar::SpanSenders{});
  otlp::ExportTraceServiceResponse response;
  (void)receiver.Export(/*context=*/nullptr, &request, &response);
  ReadStore(store, request);
  return 0;
}
