#pragma once
// The tail sampler: reads the flight recorder on a thread of its own, after the fact, and
// decides which calls become spans. Kept whatever the head sampler said, and marked with the
// span attribute trainscope.kept: every failed call ("error"), every call over a latency
// threshold ("slow") or that used most of its deadline ("deadline"), the slowest client calls
// per (method, peer) in each window ("slowest"), and a server's half of the calls its callers
// kept ("requested"). Also exported: the calls the head sampler (OTEL_TRACES_SAMPLER) chose.
//
// Both halves: a client tells each peer which calls to it were kept through its next call to
// that peer (TakeKept, carried in the request); the peer's sampler then finds its own record
// of them (KeepRequested), already read or still to come, and keeps it.

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "trainscope/telemetry/flight_recorder.h"
#include "trainscope/telemetry/tracing.h"

namespace trainscope::telemetry {

// A client call, as its server half knows it: the trace and the client's span.
struct CallId {
  std::array<uint8_t, 16> trace_id{};
  std::array<uint8_t, 8> span_id{};
  uint64_t start_unix_nano = 0;  // When the client started it (0: unknown).
};

struct TailSamplerOptions {
  // A call that took at least this long is "slow".
  double slow_seconds = 0.1;
  // A call that used at least this share of its deadline is near it ("deadline").
  double deadline_ratio = 0.8;
  // The slowest client calls kept per (method, peer) and window.
  int slowest_per_window = 3;
  double window_seconds = 10;
  // How often the recorder is read.
  int interval_ms = 50;
  // How long a caller's request to keep our half waits for our record of the call.
  double keep_request_ttl_seconds = 10;
  // Spans kept (not head-sampled) per second at most; beyond, dropped and counted.
  int max_kept_per_second = 2000;
};

// How spans name their peers: by peer index (RpcMetrics::PeerIndex).
struct SpanNames {
  std::vector<std::string> peer_tasks;      // "ps:0"
  std::vector<std::string> peer_addresses;  // "10.0.0.3:2222"
};

// Counters of the tail sampler, for /metrics. Thread-safe (relaxed atomics).
struct TailStats {
  std::atomic<uint64_t> calls_read{0};         // Records read from the recorder.
  std::atomic<uint64_t> calls_overwritten{0};  // Overwritten before they could be read.
  std::atomic<uint64_t> kept_error{0};
  std::atomic<uint64_t> kept_deadline{0};
  std::atomic<uint64_t> kept_slow{0};
  std::atomic<uint64_t> kept_slowest{0};
  std::atomic<uint64_t> kept_requested{0};
  std::atomic<uint64_t> kept_dropped{0};   // Over max_kept_per_second.
  std::atomic<uint64_t> keep_requests{0};  // Calls callers asked us to keep.
  std::atomic<uint64_t> keep_matched{0};   // ... whose record we found.
  std::atomic<uint64_t> keep_missed{0};    // ... not found within the ttl (overwritten).
};

// Thread-safe. The thread starts in the constructor; the destructor runs a last pass.
class TailSampler {
 public:
  // `recorder` and `processor` must outlive the sampler; `processor` receives the spans.
  TailSampler(TailSamplerOptions options, const FlightRecorder* recorder, SpanProcessor* processor,
              SpanNames names);
  ~TailSampler();
  TailSampler(const TailSampler&) = delete;
  TailSampler& operator=(const TailSampler&) = delete;

  // Client side: true when calls to `peer` were kept since the last TakeKept. One relaxed load.
  bool HasKept(int peer) const {
    return peer >= 0 && static_cast<size_t>(peer) < outgoing_count_.size() &&
           outgoing_count_[peer].load(std::memory_order_relaxed) != 0;
  }
  // Moves the kept calls to tell `peer` about (at most 64) into `*out`.
  void TakeKept(int peer, std::vector<CallId>* out);

  // Server side: a caller kept these calls; our halves of them are kept too.
  void KeepRequested(const std::vector<CallId>& calls);

  // Reads the recorder and decides, now, on the caller's thread.
  void RunOnce();

  const TailStats& stats() const { return stats_; }
  const TailSamplerOptions& options() const { return options_; }

 private:
  struct TopN {
    uint64_t window = 0;
    std::vector<uint64_t> durations;  // Ascending, at most slowest_per_window.
  };
  struct Pending {
    std::array<uint8_t, 16> trace_id;
    uint64_t start_unix_nano;
    double since;
  };

  void Loop();
  // The reasons to keep `r` (bits), from its own figures.
  uint32_t Reasons(const CallRecord& r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(pass_mu_);
  void Decide(const CallRecord& r, uint32_t extra) ABSL_EXCLUSIVE_LOCKS_REQUIRED(pass_mu_);
  void Emit(const CallRecord& r, uint32_t reasons) ABSL_EXCLUSIVE_LOCKS_REQUIRED(pass_mu_);
  bool TakeToken(double now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(pass_mu_);
  void TellPeer(const CallRecord& r);
  // Moves the callers' requests into pending_; returns the keys it added.
  std::unordered_set<uint64_t> TakeRequests() ABSL_EXCLUSIVE_LOCKS_REQUIRED(pass_mu_);
  // kRequested when `r` is the server half of a pending request (which it then removes).
  uint32_t MatchPending(const CallRecord& r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(pass_mu_);
  bool AlreadyKept(uint64_t client_span) ABSL_EXCLUSIVE_LOCKS_REQUIRED(pass_mu_);
  void RememberKept(uint64_t client_span) ABSL_EXCLUSIVE_LOCKS_REQUIRED(pass_mu_);

  const TailSamplerOptions options_;
  const FlightRecorder* const recorder_;
  SpanProcessor* const processor_;
  const SpanNames names_;
  TailStats stats_;

  std::mutex pass_mu_;  // One pass at a time; guards what a pass uses.
  FlightRecorder::Cursor cursor_ ABSL_GUARDED_BY(pass_mu_);
  std::unordered_map<uint32_t, TopN> slowest_ ABSL_GUARDED_BY(pass_mu_);
  std::unordered_map<uint64_t, Pending> pending_ ABSL_GUARDED_BY(pass_mu_);
  std::unordered_set<uint64_t> kept_server_ ABSL_GUARDED_BY(pass_mu_);
  std::deque<uint64_t> kept_server_order_ ABSL_GUARDED_BY(pass_mu_);
  double tokens_ ABSL_GUARDED_BY(pass_mu_) = 0;
  double tokens_at_ ABSL_GUARDED_BY(pass_mu_) = 0;

  std::mutex mu_;  // Guards what other threads hand in, and the thread's wake-ups.
  std::condition_variable wake_;
  std::vector<CallId> incoming_ ABSL_GUARDED_BY(mu_);
  std::vector<std::vector<CallId>> outgoing_ ABSL_GUARDED_BY(mu_);  // By peer.
  std::vector<std::atomic<uint32_t>> outgoing_count_;               // By peer.
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace trainscope::telemetry
