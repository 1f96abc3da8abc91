#pragma once
// Tracing for the runtime: W3C trace context (`traceparent`), span data as plain structs, the
// sampler and the Tracer that names spans and decides which are kept. No protobuf here: spans
// become OTLP only in otlp_exporter.cc. The counters in TracingStats feed the /metrics side.

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "absl/strings/string_view.h"

namespace trainscope::telemetry {

// The gRPC metadata key that carries a SpanContext between processes.
inline constexpr char kTraceparentKey[] = "traceparent";

// The identity of a span as it crosses process boundaries. A plain value; thread-compatible.
struct SpanContext {
  std::array<uint8_t, 16> trace_id{};
  std::array<uint8_t, 8> span_id{};
  bool sampled = false;

  // True when neither id is all zeros.
  bool valid() const;
  // 32 and 16 lowercase hex digits, as in `traceparent` and in log lines.
  std::string TraceIdHex() const;
  std::string SpanIdHex() const;
};

// Parses a W3C `traceparent` header value, "00-<32 hex>-<16 hex>-<2 hex flags>". nullopt for
// anything the W3C Trace Context spec says to ignore: wrong lengths, uppercase or non-hex
// digits, all-zero ids, version "ff", version 00 with trailing text. A version above 00 is read
// by the version-00 rules when its first 55 characters fit them and what follows starts with
// '-'. Never crashes on any input. Thread-safe.
std::optional<SpanContext> ParseTraceparent(absl::string_view header);

// "00-<trace id>-<span id>-01" (or "-00" when not sampled). Thread-safe.
std::string FormatTraceparent(const SpanContext& context);

// OTLP's span kinds (the values are OTLP's).
enum class SpanKind { kInternal = 1, kServer = 2, kClient = 3 };

// OTLP status codes for SpanData::status_code.
inline constexpr int kStatusUnset = 0;
inline constexpr int kStatusOk = 1;
inline constexpr int kStatusError = 2;

// A span or event attribute. Keys follow OpenTelemetry's semantic conventions where one fits
// ("rpc.method", "net.peer.name", ...).
struct Attribute {
  std::string key;
  std::variant<std::string, int64_t, double, bool> value;
};

// A time-stamped annotation on a span (e.g. "queued", "applied" on the ps).
struct SpanEvent {
  std::string name;
  uint64_t time_unix_nano = 0;
  std::vector<Attribute> attributes;
};

// A finished span, filled by the caller and handed to Tracer::End. Thread-compatible.
struct SpanData {
  SpanContext context;
  std::array<uint8_t, 8> parent_span_id{};  // All zeros for a root span.
  std::string name;
  SpanKind kind = SpanKind::kInternal;
  uint64_t start_unix_nano = 0;
  uint64_t end_unix_nano = 0;
  std::vector<Attribute> attributes;
  std::vector<SpanEvent> events;
  int status_code = kStatusUnset;  // kStatusUnset, kStatusOk or kStatusError (OTLP's values).
  std::string status_message;
};

// Counters of the tracing pipeline, for the metrics side to read (relaxed loads are enough).
// Shared by the Tracer and the BatchSpanProcessor when both are given the same instance.
// Thread-safe.
struct TracingStats {
  std::atomic<uint64_t> spans_started{0};    // Tracer::NewContext calls.
  std::atomic<uint64_t> spans_sampled{0};    // ... of which sampled.
  std::atomic<uint64_t> spans_ended{0};      // Tracer::End calls.
  std::atomic<uint64_t> spans_dropped{0};    // Queue full, or still queued at shutdown.
  std::atomic<uint64_t> spans_exported{0};   // In batches the exporter accepted.
  std::atomic<uint64_t> spans_failed{0};     // In batches whose export failed.
  std::atomic<uint64_t> export_failures{0};  // Failed export calls (batches).
};

// Receives every sampled span when it ends. Implementations must be thread-safe and OnEnd
// must never block the caller (it runs on the RPC path).
class SpanProcessor {
 public:
  virtual ~SpanProcessor();
  virtual void OnEnd(SpanData&& span) = 0;
};

// How the Tracer decides which new traces to keep.
struct SamplerOptions {
  // Share of new traces kept, deterministic on the trace id (OpenTelemetry's
  // TraceIdRatioBased): 1 keeps all, 0 none.
  double ratio = 1.0;
  // When a span has a valid parent, follow the parent's sampled flag instead.
  bool parent_based = true;
};

// Wall-clock time in nanoseconds since the Unix epoch that never goes backwards within the
// process: the system clock read once, advanced by the steady clock. Thread-safe.
uint64_t NowUnixNanos();
// The same clock at a steady-clock reading (so a call's start needs one clock read). Thread-safe.
uint64_t UnixNanosAt(std::chrono::steady_clock::time_point when);

// Names spans and samples them, and forwards the sampled ones to a SpanProcessor.
// Thread-safe and cheap: no lock, ids from a thread-local generator.
class Tracer {
 public:
  // `processor` may be null: tracing is off (contexts are still made and propagated, nothing
  // is recorded). `stats` may be null: the Tracer counts into its own TracingStats. Both, when
  // given, must outlive the Tracer.
  Tracer(SamplerOptions sampler, SpanProcessor* processor, TracingStats* stats = nullptr);
  Tracer(const Tracer&) = delete;
  Tracer& operator=(const Tracer&) = delete;

  // A context for a new span: a fresh span id; the parent's trace id when `parent` is valid,
  // else a fresh one; sampled per the SamplerOptions.
  SpanContext NewContext(const SpanContext* parent);

  // Hands a finished span to the processor when it is sampled and tracing is on.
  void End(SpanData&& span);

  // True when spans are recorded (a processor was given).
  bool enabled() const { return processor_ != nullptr; }

  const TracingStats& stats() const { return *stats_; }
  const SamplerOptions& sampler() const { return sampler_; }

  // The sampler that OTEL_TRACES_SAMPLER (always_on, always_off, traceidratio,
  // parentbased_always_on, parentbased_always_off, parentbased_traceidratio; default
  // parentbased_always_on) and OTEL_TRACES_SAMPLER_ARG (the ratio, default 1) ask for. A value
  // it cannot use falls back to its default and `*warning` (when not null) says so, for the
  // caller to log; otherwise `*warning` is left empty.
  static SamplerOptions SamplerFromEnv(std::string* warning = nullptr);

  // The sampling decision for a root span with this trace id: the lowest 56 bits of the id,
  // read big-endian, against the threshold (1 - ratio) * 2^56, as OpenTelemetry's consistent
  // probability sampling has it. Exposed for tests.
  static bool SampledByRatio(const std::array<uint8_t, 16>& trace_id, double ratio);

 private:
  const SamplerOptions sampler_;
  SpanProcessor* const processor_;
  TracingStats own_stats_;
  TracingStats* const stats_;
};

}  // namespace trainscope::telemetry
