// The tail sampler's passes over the flight recorder; see tail_sampler.h.
#include "trainscope/telemetry/tail_sampler.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_join.h"
#include "trainscope/common/clock.h"
#include "trainscope/telemetry/metrics.h"

namespace trainscope::telemetry {
namespace {

// Why a call was kept (bits, in the order the attribute lists them).
constexpr uint32_t kError = 1;
constexpr uint32_t kDeadline = 2;
constexpr uint32_t kSlow = 4;
constexpr uint32_t kSlowest = 8;
constexpr uint32_t kRequested = 16;
constexpr const char* kReasonNames[] = {"error", "deadline", "slow", "slowest", "requested"};

constexpr size_t kMaxOutgoingPerPeer = 256;
constexpr size_t kMaxTakenPerCall = 64;
constexpr size_t kMaxIncoming = 4096;
constexpr size_t kMaxRemembered = 8192;
constexpr int kUnavailable = 14;
// How far apart the clocks of a client and a server may be, for bounding searches.
constexpr uint64_t kClockSkewNanos =
    5'000'000'000;  // gRPC's code: the call may never have reached the peer.

uint64_t U64(const std::array<uint8_t, 8>& id) {
  uint64_t v;
  std::memcpy(&v, id.data(), sizeof(v));
  return v;
}

std::string ReasonNames(uint32_t bits) {
  std::vector<const char*> names;
  for (size_t i = 0; i < std::size(kReasonNames); ++i) {
    if (bits & (1u << i)) names.push_back(kReasonNames[i]);
  }
  return absl::StrJoin(names, ",");
}

}  // namespace

TailSampler::TailSampler(TailSamplerOptions options, const FlightRecorder* recorder,
                         SpanProcessor* processor, SpanNames names)
    : options_(options),
      recorder_(recorder),
      processor_(processor),
      names_(std::move(names)),
      outgoing_count_(names_.peer_tasks.size()) {
  cursor_ = recorder_->Start();
  outgoing_.resize(names_.peer_tasks.size());
  tokens_ = options_.max_kept_per_second;
  tokens_at_ = MonotonicSeconds();
  thread_ = std::thread([this] { Loop(); });
}

TailSampler::~TailSampler() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
  RunOnce();
}

void TailSampler::Loop() {
  std::unique_lock lock(mu_);
  while (!stop_) {
    wake_.wait_for(lock, std::chrono::milliseconds(options_.interval_ms),
                   [&] { return stop_ || !incoming_.empty(); });
    if (stop_) break;
    lock.unlock();
    RunOnce();
    lock.lock();
  }
}

void TailSampler::TakeKept(int peer, std::vector<CallId>* out) {
  if (peer < 0 || static_cast<size_t>(peer) >= outgoing_.size()) return;
  std::lock_guard lock(mu_);
  std::vector<CallId>& held = outgoing_[peer];
  const size_t n = std::min(held.size(), kMaxTakenPerCall);
  out->insert(out->end(), held.begin(), held.begin() + n);
  held.erase(held.begin(), held.begin() + n);
  outgoing_count_[peer].store(static_cast<uint32_t>(held.size()), std::memory_order_relaxed);
}

void TailSampler::KeepRequested(const std::vector<CallId>& calls) {
  {
    std::lock_guard lock(mu_);
    for (const CallId& c : calls) {
      if (incoming_.size() >= kMaxIncoming) {
        stats_.keep_missed.fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      incoming_.push_back(c);
    }
  }
  wake_.notify_one();
}

void TailSampler::RunOnce() {
  std::lock_guard pass(pass_mu_);
  std::unordered_set<uint64_t> fresh = TakeRequests();
  uint64_t read = 0;
  const uint64_t lost = recorder_->ReadNew(&cursor_, [&](const CallRecord& r) {
    ++read;
    Decide(r, MatchPending(r));
  });
  stats_.calls_read.fetch_add(read, std::memory_order_relaxed);
  stats_.calls_overwritten.fetch_add(lost, std::memory_order_relaxed);
  // Requests for calls read in earlier passes: look back, newest first.
  std::erase_if(fresh, [&](uint64_t key) { return pending_.count(key) == 0; });
  if (!fresh.empty()) {
    // Our record of a call starts after the client started it, give or take the clocks' skew.
    uint64_t oldest = UINT64_MAX;
    for (uint64_t key : fresh) oldest = std::min(oldest, pending_[key].start_unix_nano);
    oldest = oldest > kClockSkewNanos ? oldest - kClockSkewNanos : 0;
    recorder_->ScanBack(cursor_, [&](const CallRecord& r) {
      using Scan = FlightRecorder::Scan;
      if (r.start_unix_nano < oldest) return Scan::kStopShard;
      if (r.kind != CallKind::kServer || fresh.count(U64(r.parent_span_id)) == 0) {
        return Scan::kGoOn;
      }
      if (const uint32_t matched = MatchPending(r)) {
        fresh.erase(U64(r.parent_span_id));
        Decide(r, matched);
      }
      return fresh.empty() ? Scan::kStop : Scan::kGoOn;
    });
  }
  // Requests whose record never came (overwritten, or the call never reached us).
  const double now = MonotonicSeconds();
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (now - it->second.since > options_.keep_request_ttl_seconds) {
      stats_.keep_missed.fetch_add(1, std::memory_order_relaxed);
      it = pending_.erase(it);
    } else {
      ++it;
    }
  }
}

std::unordered_set<uint64_t> TailSampler::TakeRequests() {
  std::vector<CallId> incoming;
  {
    std::lock_guard lock(mu_);
    incoming.swap(incoming_);
  }
  std::unordered_set<uint64_t> fresh;
  if (incoming.empty()) return fresh;
  const double now = MonotonicSeconds();
  for (const CallId& c : incoming) {
    stats_.keep_requests.fetch_add(1, std::memory_order_relaxed);
    const uint64_t key = U64(c.span_id);
    if (AlreadyKept(key)) {
      stats_.keep_matched.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    if (pending_.emplace(key, Pending{c.trace_id, c.start_unix_nano, now}).second) {
      fresh.insert(key);
    }
  }
  return fresh;
}

uint32_t TailSampler::MatchPending(const CallRecord& r) {
  if (r.kind != CallKind::kServer || pending_.empty()) return 0;
  auto it = pending_.find(U64(r.parent_span_id));
  if (it == pending_.end() || it->second.trace_id != r.trace_id) return 0;
  stats_.keep_matched.fetch_add(1, std::memory_order_relaxed);
  pending_.erase(it);
  return kRequested;
}

uint32_t TailSampler::Reasons(const CallRecord& r) {
  uint32_t reasons = 0;
  if (r.status != 0) reasons |= kError;
  if (static_cast<double>(r.duration_nano) >= options_.slow_seconds * 1e9) reasons |= kSlow;
  if (r.deadline_ms > 0 && static_cast<double>(r.duration_nano) >=
                               options_.deadline_ratio * 1e6 * static_cast<double>(r.deadline_ms)) {
    reasons |= kDeadline;
  }
  const size_t n = static_cast<size_t>(std::max(0, options_.slowest_per_window));
  if (r.kind == CallKind::kClient && r.peer != kNoPeer && n > 0) {
    TopN& top = slowest_[static_cast<uint32_t>(r.method) << 16 | r.peer];
    const uint64_t window =
        r.start_unix_nano / static_cast<uint64_t>(std::max(0.001, options_.window_seconds) * 1e9);
    if (window > top.window) {
      top.window = window;
      top.durations.clear();
    }
    if (window == top.window && (top.durations.size() < n || r.duration_nano > top.durations[0])) {
      if (top.durations.size() >= n) top.durations.erase(top.durations.begin());
      top.durations.insert(
          std::upper_bound(top.durations.begin(), top.durations.end(), r.duration_nano),
          r.duration_nano);
      reasons |= kSlowest;
    }
  }
  return reasons;
}

void TailSampler::Decide(const CallRecord& r, uint32_t extra) {
  const uint32_t reasons = Reasons(r) | extra;
  const bool sampled = (r.flags & kRecordSampled) != 0;
  const uint64_t client_span = r.kind == CallKind::kServer ? U64(r.parent_span_id) : 0;
  if (client_span != 0 && reasons != 0) {
    if (AlreadyKept(client_span)) return;
    RememberKept(client_span);
  }
  if (reasons != 0 || sampled) Emit(r, reasons);
  if (reasons != 0 && r.kind == CallKind::kClient) TellPeer(r);
}

bool TailSampler::AlreadyKept(uint64_t client_span) { return kept_server_.count(client_span) != 0; }

void TailSampler::RememberKept(uint64_t client_span) {
  if (!kept_server_.insert(client_span).second) return;
  kept_server_order_.push_back(client_span);
  if (kept_server_order_.size() > kMaxRemembered) {
    kept_server_.erase(kept_server_order_.front());
    kept_server_order_.pop_front();
  }
}

void TailSampler::TellPeer(const CallRecord& r) {
  if (r.peer == kNoPeer || r.peer >= outgoing_.size() || r.status == kUnavailable) return;
  std::lock_guard lock(mu_);
  std::vector<CallId>& held = outgoing_[r.peer];
  if (held.size() >= kMaxOutgoingPerPeer) return;
  held.push_back({r.trace_id, r.span_id, r.start_unix_nano});
  outgoing_count_[r.peer].store(static_cast<uint32_t>(held.size()), std::memory_order_relaxed);
}

bool TailSampler::TakeToken(double now) {
  tokens_ = std::min<double>(options_.max_kept_per_second,
                             tokens_ + (now - tokens_at_) * options_.max_kept_per_second);
  tokens_at_ = now;
  if (tokens_ < 1) return false;
  tokens_ -= 1;
  return true;
}

void TailSampler::Emit(const CallRecord& r, uint32_t reasons) {
  const bool sampled = (r.flags & kRecordSampled) != 0;
  if (reasons != 0 && !sampled && !TakeToken(MonotonicSeconds())) {
    stats_.kept_dropped.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  std::atomic<uint64_t>* counters[] = {&stats_.kept_error, &stats_.kept_deadline, &stats_.kept_slow,
                                       &stats_.kept_slowest, &stats_.kept_requested};
  for (size_t i = 0; i < std::size(counters); ++i) {
    if (reasons & (1u << i)) {
      counters[i]->fetch_add(1, std::memory_order_relaxed);
      break;  // Counted once, under its first reason.
    }
  }
  SpanData span;
  span.context.trace_id = r.trace_id;
  span.context.span_id = r.span_id;
  span.context.sampled = true;
  span.parent_span_id = r.parent_span_id;
  const std::string method = RpcMetrics::MethodName(r.method);
  span.name = method;
  span.kind = r.kind == CallKind::kClient ? SpanKind::kClient : SpanKind::kServer;
  span.start_unix_nano = r.start_unix_nano;
  span.end_unix_nano = r.start_unix_nano + r.duration_nano;
  span.attributes.reserve(10);
  span.attributes.push_back({"rpc.system", std::string("grpc")});
  if (const size_t slash = method.find('/'); slash != std::string::npos) {
    span.attributes.push_back({"rpc.service", method.substr(0, slash)});
    span.attributes.push_back({"rpc.method", method.substr(slash + 1)});
  }
  const bool known_peer = r.peer < names_.peer_tasks.size();
  if (r.kind == CallKind::kClient && known_peer) {
    span.attributes.push_back({"net.peer.name", names_.peer_addresses[r.peer]});
  }
  if (known_peer) span.attributes.push_back({"trainscope.peer_task", names_.peer_tasks[r.peer]});
  span.attributes.push_back({"rpc.request.bytes", static_cast<int64_t>(r.request_bytes)});
  span.attributes.push_back({"rpc.response.bytes", static_cast<int64_t>(r.response_bytes)});
  if (r.deadline_ms > 0) {
    span.attributes.push_back({"rpc.deadline_ms", static_cast<int64_t>(r.deadline_ms)});
  }
  span.attributes.push_back({"rpc.grpc.status_code", static_cast<int64_t>(r.status)});
  if (reasons != 0) span.attributes.push_back({"trainscope.kept", ReasonNames(reasons)});
  uint64_t mark = r.start_unix_nano;
  for (int i = 0; i < 2; ++i) {
    const char* name = FlightRecorder::PhaseName(r.phase_name[i]);
    if (name == nullptr) continue;
    mark += r.phase_nano[i];
    span.events.push_back({name, mark, {{"duration_ns", static_cast<int64_t>(r.phase_nano[i])}}});
  }
  if (r.status != 0) {
    span.status_code = kStatusError;
    span.status_message = recorder_->Error(r.error);
  }
  processor_->OnEnd(std::move(span));
}

}  // namespace trainscope::telemetry
