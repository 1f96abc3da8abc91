#pragma once
// The sidecar as the node's trace agent: opentelemetry.proto.collector.trace.v1.TraceService/Export
// on the sidecar's gRPC port. The only place that sees OTLP messages: it validates and converts
// spans into SpanRecords for the TraceStore, and hands every request, unchanged, to an
// OtlpForwarder when an upstream is configured. Private to the sidecar library.

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "opentelemetry/proto/collector/trace/v1/trace_service.grpc.pb.h"
#include "trainscope/sidecar/trace_stats.h"
#include "trainscope/sidecar/trace_store.h"

namespace trainscope::sidecar {

namespace otlp = ::opentelemetry::proto::collector::trace::v1;

// What a conversion skipped, and why (the first reason, for the partial-success message).
struct ConvertResult {
  std::vector<SpanRecord> spans;
  int64_t total = 0;
  int64_t invalid = 0;
  std::string first_error;
};

// Converts and validates the spans of an Export request: trace ids must be 16 bytes and not all
// zero, span ids 8 bytes and not all zero, parent ids empty or 8 bytes (all zero = root); strings
// are cut to a bounded length and attributes and events beyond a bound are ignored. Never throws.
ConvertResult ConvertExport(const otlp::ExportTraceServiceRequest& request);

// Sends Export requests to an upstream OTLP/gRPC endpoint from one thread, through a bounded
// queue: Enqueue never blocks; when the queue is full the request is dropped and counted.
// Thread-safe.
class OtlpForwarder {
 public:
  using Stats = ForwarderStats;
  // `endpoint`: "http://host:port" (insecure), "https://host:port" (TLS) or "host:port".
  // InvalidArgument when it is none of these.
  static absl::StatusOr<std::unique_ptr<OtlpForwarder>> Create(const std::string& endpoint,
                                                               size_t max_queue_bytes,
                                                               int deadline_ms = 5000);
  ~OtlpForwarder();

  // Queues a copy of `request` (of `spans` spans). False when dropped.
  bool Enqueue(const otlp::ExportTraceServiceRequest& request, int64_t spans);
  Stats stats() const;
  const std::string& target() const { return target_; }

 private:
  OtlpForwarder() = default;
  void Loop();

  struct Item {
    otlp::ExportTraceServiceRequest request;
    int64_t spans = 0;
    size_t bytes = 0;
  };
  std::string target_;
  int deadline_ms_ = 5000;
  size_t max_queue_bytes_ = 0;
  std::unique_ptr<otlp::TraceService::Stub> stub_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Item> queue_;  // Guarded by mu_.
  size_t queue_bytes_ = 0;  // Guarded by mu_.
  bool stop_ = false;       // Guarded by mu_.
  std::atomic<int64_t> forwarded_{0};
  std::atomic<int64_t> dropped_{0};
  std::atomic<int64_t> failures_{0};
  std::thread thread_;
};

// The TraceService implementation. Thread-safe (gRPC calls Export from its threads).
// Who may send spans: this node itself (a unix socket, loopback, or one of `addresses`: the
// node's interfaces and its tasks' hosts, numeric), or a client whose certificate the server
// verified (mutual TLS). Spans from anywhere else could fill the slow-request list with lies.
struct SpanSenders {
  std::vector<std::string> addresses;
};

// Whether the gRPC peer string `peer` ("ipv4:10.0.0.1:5", "ipv6:[::1]:5", "ipv6:%5B::1%5D:5",
// "unix:/path") is this node as `senders` says; false for anything it cannot parse.
bool IsNodeLocalPeer(const std::string& peer, const SpanSenders& senders);

class TraceReceiver final : public otlp::TraceService::Service {
 public:
  using Stats = ReceiverStats;
  // `store` must outlive this; `forwarder` may be null. Export from a peer that is not this node
  // and has no verified certificate is refused (PERMISSION_DENIED, counted in stats().refused);
  // a null context is an in-process call (the fuzzer), taken.
  TraceReceiver(TraceStore* store, OtlpForwarder* forwarder, SpanSenders senders);

  grpc::Status Export(grpc::ServerContext* context, const otlp::ExportTraceServiceRequest* request,
                      otlp::ExportTraceServiceResponse* response) override;
  Stats stats() const;

 private:
  TraceStore* store_;
  OtlpForwarder* forwarder_;
  const SpanSenders senders_;
  std::atomic<int64_t> refused_{0};
  std::atomic<double> refusal_logged_at_{-1e9};
  std::atomic<int64_t> requests_{0};
  std::atomic<int64_t> received_{0};
  std::atomic<int64_t> invalid_{0};
};

}  // namespace trainscope::sidecar
