#pragma once
// The flight recorder: every RPC this process makes or serves, as one small fixed-size record
// (ids, times, sizes, status; no strings, no allocation) in a ring buffer, so that which calls to
// trace is decided afterwards, on a thread of its own (tail_sampler.h): Hindsight's retroactive
// sampling. Memory is fixed when it is built; the oldest records are overwritten.

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"

namespace trainscope::telemetry {

enum class CallKind : uint8_t { kClient = 1, kServer = 2 };

// CallRecord::flags.
inline constexpr uint8_t kRecordSampled = 1;  // The head sampler (OTEL_TRACES_SAMPLER) chose it.

// CallRecord::peer when the other side is not a task of the cluster.
inline constexpr uint16_t kNoPeer = 0xffff;

// One call, client or server side. 80 bytes; a plain value.
struct CallRecord {
  std::array<uint8_t, 16> trace_id{};
  std::array<uint8_t, 8> span_id{};
  // Client: the span the caller was in (zeros for none); server: the client's span.
  std::array<uint8_t, 8> parent_span_id{};
  uint64_t start_unix_nano = 0;
  uint64_t duration_nano = 0;
  // Server: the first two phases of the call (e.g. queue, then apply), back to back from its
  // start; names are indices into the recorder's phase names (0 = none). Saturating.
  uint32_t phase_nano[2] = {0, 0};
  uint32_t deadline_ms = 0;  // The time the call was given; 0 = none. Saturating.
  uint32_t request_bytes = 0;
  uint32_t response_bytes = 0;
  uint32_t error = 0;       // The status message's id (FlightRecorder::AddError); 0 = none.
  uint16_t peer = kNoPeer;  // Client: the callee; server: the caller (RpcMetrics::PeerIndex).
  uint8_t method = 0;       // RpcMetrics' method index.
  uint8_t status = 0;       // gRPC status code.
  CallKind kind = CallKind::kClient;
  uint8_t flags = 0;
  uint8_t phase_name[2] = {0, 0};
};
static_assert(sizeof(CallRecord) == 80);

// Saturating conversion for the 32-bit fields.
inline uint32_t Saturate32(uint64_t v) { return v > 0xffffffffu ? 0xffffffffu : uint32_t(v); }

// Record() is lock-free and may be called from any thread: a thread writes into one of a few
// shards (picked once per thread), reserving a slot with one atomic add and publishing it with
// a sequence number. Reading (ReadNew, ScanBack) is for one thread at a time: it sees every
// record that was complete and not yet overwritten, and counts the ones it lost.
class FlightRecorder {
 public:
  // Room for at least `capacity` records (rounded up to a power of two per shard).
  explicit FlightRecorder(size_t capacity);
  ~FlightRecorder();
  FlightRecorder(const FlightRecorder&) = delete;
  FlightRecorder& operator=(const FlightRecorder&) = delete;

  void Record(const CallRecord& record);

  // Keeps a failed call's status message (the only string a record refers to; failures are
  // rare, so this takes a lock) and returns its id, or 0 for an empty message. The last 1024
  // messages are kept. Thread-safe.
  uint32_t AddError(absl::string_view message);
  // The message of `id`, or "" when it was forgotten. Thread-safe.
  std::string Error(uint32_t id) const;

  // Index (1-based) of a phase name; the name must be a string with static storage. Names are
  // interned on first use, 15 at most (later ones map to 0, no name). Thread-safe.
  static uint8_t PhaseIndex(const char* name);
  // The name of a phase index, or null for 0.
  static const char* PhaseName(uint8_t index);

  // Where a reader stands in each shard.
  struct Cursor {
    std::vector<uint64_t> next;
  };
  Cursor Start() const;
  // Calls `fn` for every complete record written since `cursor` (per shard, oldest first) and
  // advances the cursor; returns how many were overwritten before they could be read.
  uint64_t ReadNew(Cursor* cursor, const std::function<void(const CallRecord&)>& fn) const;
  // What ScanBack's callback says after each record.
  enum class Scan { kGoOn, kStopShard, kStop };
  // Calls `fn` for the records before `cursor` that are still held, newest first in each shard,
  // the shards in turn a few dozen records at a time (so that recent records are found first
  // whichever shard holds them), until `fn` says to stop.
  void ScanBack(const Cursor& cursor, const std::function<Scan(const CallRecord&)>& fn) const;

  // Memory of the rings.
  size_t bytes() const;
  size_t capacity() const;

 private:
  struct Shard;
  bool Read(const Shard& shard, uint64_t index, CallRecord* out) const;

  std::vector<std::unique_ptr<Shard>> shards_;
  uint64_t shard_mask_ = 0;  // slots per shard - 1

  mutable std::mutex errors_mu_;
  uint32_t next_error_ ABSL_GUARDED_BY(errors_mu_) = 1;
  std::vector<std::pair<uint32_t, std::string>> errors_ ABSL_GUARDED_BY(errors_mu_);
};

}  // namespace trainscope::telemetry
