#pragma once
// The sidecar's memory of traces. Spans arrive over OTLP (converted to plain SpanRecords at the
// gRPC edge, trace_receiver.h), are joined into ps requests (the CLIENT half on the worker, the
// SERVER half on the ps and its breakdown: child spans or events ps.queue / ps.apply / ps.read),
// and what matters is kept in bounded memory: every failed request, and the slowest requests per
// (method, ps) over a sliding window. Time is injected (monotonic seconds), so tests drive it.

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "trainscope/sidecar/v1/api.pb.h"

namespace trainscope::sidecar {

namespace pb = ::trainscope::sidecar::v1;

// OTLP span kinds (the values of Span.SpanKind).
enum class SpanKind { kUnspecified = 0, kInternal = 1, kServer = 2, kClient = 3, kOther = 4 };

// A span event with what the store reads from it.
struct SpanEventRecord {
  std::string name;
  uint64_t time_unix_nano = 0;
  int64_t duration_ns = -1;  // The event's "duration_ns" attribute; -1 when absent.
};

// One span, protobuf-free. Ids are lowercase hex (trace 32 digits, span 16), validated at the edge.
struct SpanRecord {
  std::string trace_id;
  std::string span_id;
  std::string parent_span_id;  // "" for a root span.
  std::string name;
  SpanKind kind = SpanKind::kUnspecified;
  uint64_t start_unix_nano = 0;
  uint64_t end_unix_nano = 0;
  int status_code = 0;  // OTLP: 0 unset, 1 ok, 2 error.
  std::string status_message;
  int grpc_status_code = -1;   // rpc.grpc.status_code; -1 when absent.
  std::string peer_task;       // trainscope.peer_task ("ps:0" on a client, the caller on a server).
  std::string net_peer_name;   // net.peer.name
  int64_t deadline_ms = -1;    // rpc.deadline_ms
  int64_t request_bytes = -1;  // rpc.request.bytes
  int64_t response_bytes = -1;  // rpc.response.bytes
  std::string task;             // From the resource: service.instance.id, or role:task.
  std::string service_name;     // Resource service.name.
  // trainscope.kept: why the task kept this span whatever its sampler said ("slow", "error,
  // slowest", ...); "" for an ordinary (head-sampled) span.
  std::string kept;
  std::vector<SpanEventRecord> events;

  // end - start, 0 when the times are absent or reversed.
  int64_t DurationNs() const;
  // Error status, or rpc.grpc.status_code other than OK (0).
  bool IsError() const;
  // An estimate of the memory this record holds, for the store's budget.
  size_t ByteSize() const;
};

// One ps request as far as its halves are known. Optional parts are unknown (a half that never
// arrived), shown as null in JSON.
struct RequestSummary {
  std::string trace_id;
  std::string method;  // "trainscope.v1.ParameterService/Push"
  std::string worker;  // "worker:0": the client's task, else the server span's peer task.
  std::string ps;      // "ps:0": the client's peer task, else the server's task.
  double start_unix = 0;
  double duration_ms = 0;  // The client span's, else the server span's.
  bool has_client = false;
  bool has_server = false;
  std::optional<double> server_ms;
  std::optional<double> network_ms;  // Client - server duration.
  std::optional<double> queue_ms;
  std::optional<double> apply_ms;
  std::optional<double> read_ms;
  std::string status;  // "OK", "DEADLINE_EXCEEDED", ..., or "ERROR".
  std::string error;   // The span status message, when failed.
  bool failed = false;
  std::string client_span_id;         // "" when unknown.
  std::string server_span_id;         // "" when unknown.
  std::string server_parent_span_id;  // "" when unknown.
  int64_t deadline_ms = -1;
  std::string peer_address;  // The client's net.peer.name.
  std::string kept;          // Why its halves were kept (union of their trainscope.kept).
};

struct TraceStoreOptions {
  // Budget for everything held (spans of pending, slow and failed requests), estimated bytes.
  size_t memory_bytes = 4 << 20;
  // The sliding window of the slow list, and how many requests per (method, ps) it keeps.
  double slow_window_s = 300;
  int slow_per_key = 10;
  // The window is kept in this many buckets (granularity slow_window_s / buckets).
  int window_buckets = 6;
  // How long a trace waits for its other halves before it is dropped unless slow or failed.
  double join_window_s = 10;
  // Spans beyond this many in one trace are dropped (a runaway or hostile trace).
  size_t max_spans_per_trace = 128;
  // Failed traces kept at most (oldest forgotten first).
  size_t max_error_traces = 1000;
  // Traces a task marked slow or near its deadline (trainscope.kept) listed in Slow() whatever
  // their rank, within the window; at most this many (oldest forgotten first).
  size_t max_marked_traces = 1000;
};

// What a filter on the lists selects; empty fields select all.
struct RequestFilter {
  std::string method;  // Full ("trainscope.v1.ParameterService/Push") or short ("Push").
  std::string ps;      // "ps:0"
  size_t limit = 50;
};

// The spans kept for one trace, and the requests they make up.
struct TraceDetail {
  std::string trace_id;
  std::vector<SpanRecord> spans;
  std::vector<RequestSummary> requests;
};

struct TraceStoreStats {
  int64_t spans_added = 0;         // Accepted by Add().
  int64_t spans_kept = 0;          // Held now.
  int64_t bytes_kept = 0;          // Held now (estimate).
  int64_t traces_kept = 0;         // Held now.
  int64_t dropped_evicted = 0;     // Spans forgotten early to stay within the budget.
  int64_t dropped_trace_full = 0;  // Spans refused: their trace had too many.
  int64_t dropped_duplicate = 0;   // Spans refused: the same span id was already held.
};

// Thread-safe: every method takes an internal mutex (Add from the OTLP handlers, the queries from
// HTTP handlers). Memory stays within options.memory_bytes (plus the small per-bucket indexes).
class TraceStore {
 public:
  explicit TraceStore(TraceStoreOptions options = {});
  ~TraceStore();

  // Adds spans received at `now_s` (monotonic). Spans may come in any order and from any task.
  void Add(std::vector<SpanRecord> spans, double now_s);
  // The slowest requests in the window, slowest first: at most slow_per_key per (method, ps),
  // and every request a task marked slow or near its deadline; then filtered and limited.
  std::vector<RequestSummary> Slow(const RequestFilter& filter, double now_s);
  // Failed requests (error status or a non-OK gRPC code), newest first.
  std::vector<RequestSummary> Errors(const RequestFilter& filter, double now_s);
  // The spans held for `trace_id` (32 hex digits), or nullopt.
  std::optional<TraceDetail> Trace(const std::string& trace_id, double now_s);
  TraceStoreStats stats();
  const TraceStoreOptions& options() const { return options_; }

 private:
  struct Impl;
  const TraceStoreOptions options_;
  std::mutex mu_;  // std, not absl: ThreadSanitizer sees pthread mutexes (scripts/sanitize)
  std::unique_ptr<Impl> impl_ ABSL_GUARDED_BY(mu_);
};

// The body of /api/v1/traces/slow (with the window and how many per key it keeps) and of
// /api/v1/traces/errors (window_s and per_key negative: absent). Strings are cleaned (CleanText),
// so ToJson never fails on them.
pb::RequestList ToRequestList(const std::vector<RequestSummary>& requests, double window_s = -1,
                              int per_key = -1);
// The body of /api/v1/traces/<trace id>.
pb::TraceDetail ToProto(const TraceDetail& detail);

// Lowercase hex of bytes ("" for empty input).
std::string HexId(std::string_view bytes);
// The gRPC status code name ("OK", "DEADLINE_EXCEEDED", ...), "CODE_<n>" when unknown.
std::string GrpcCodeName(int code);

}  // namespace trainscope::sidecar
