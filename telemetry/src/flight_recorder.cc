// The flight recorder's sharded rings; see flight_recorder.h.
//
// A slot is a sequence number and the record as ten 64-bit words, all atomics (relaxed loads
// and stores compile to plain moves), so a reader racing a writer sees a torn record only as a
// sequence number that does not match, never as undefined behaviour. The writer of index i sets
// the sequence to 2i+1, writes the words, then publishes 2i+2; a reader of index i accepts the
// words only if the sequence read 2i+2 before and after. (Two writers can meet on one slot only
// if one of them stalls mid-write for a whole turn of the ring: then a record may be mixed.)
#include "trainscope/telemetry/flight_recorder.h"

#include <algorithm>
#include <cstring>

namespace trainscope::telemetry {
namespace {

constexpr size_t kShards = 8;
constexpr size_t kWords = sizeof(CallRecord) / sizeof(uint64_t);
constexpr size_t kErrors = 1024;
constexpr size_t kPhaseNames = 16;

std::atomic<uint32_t> next_thread_shard{0};
thread_local int thread_shard = -1;

std::atomic<const char*> phase_names[kPhaseNames];

size_t NextPowerOfTwo(size_t n) {
  size_t p = 1;
  while (p < n) p <<= 1;
  return p;
}

}  // namespace

struct Slot {
  std::atomic<uint64_t> seq{0};
  std::atomic<uint64_t> words[kWords];
};

struct FlightRecorder::Shard {
  explicit Shard(size_t slots) : ring(new Slot[slots]) {
    for (size_t i = 0; i < slots; ++i) {
      for (auto& w : ring[i].words) w.store(0, std::memory_order_relaxed);
    }
  }
  alignas(64) std::atomic<uint64_t> head{0};
  std::unique_ptr<Slot[]> ring;
};

FlightRecorder::FlightRecorder(size_t capacity) {
  const size_t per_shard = NextPowerOfTwo(std::max<size_t>(16, (capacity + kShards - 1) / kShards));
  shard_mask_ = per_shard - 1;
  for (size_t i = 0; i < kShards; ++i) shards_.push_back(std::make_unique<Shard>(per_shard));
  errors_.resize(kErrors);
}

FlightRecorder::~FlightRecorder() = default;

size_t FlightRecorder::capacity() const { return shards_.size() * (shard_mask_ + 1); }

size_t FlightRecorder::bytes() const { return capacity() * sizeof(Slot); }

void FlightRecorder::Record(const CallRecord& record) {
  if (thread_shard < 0) {
    thread_shard = static_cast<int>(next_thread_shard.fetch_add(1) % kShards);
  }
  Shard& shard = *shards_[thread_shard];
  const uint64_t i = shard.head.fetch_add(1, std::memory_order_relaxed);
  Slot& slot = shard.ring[i & shard_mask_];
  uint64_t words[kWords];
  std::memcpy(words, &record, sizeof(words));
  slot.seq.store(2 * i + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  for (size_t k = 0; k < kWords; ++k) slot.words[k].store(words[k], std::memory_order_relaxed);
  slot.seq.store(2 * i + 2, std::memory_order_release);
}

bool FlightRecorder::Read(const Shard& shard, uint64_t index, CallRecord* out) const {
  const Slot& slot = shard.ring[index & shard_mask_];
  const uint64_t before = slot.seq.load(std::memory_order_acquire);
  if (before != 2 * index + 2) return false;
  uint64_t words[kWords];
  for (size_t k = 0; k < kWords; ++k) words[k] = slot.words[k].load(std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_acquire);
  if (slot.seq.load(std::memory_order_relaxed) != before) return false;
  std::memcpy(out, words, sizeof(words));
  return true;
}

FlightRecorder::Cursor FlightRecorder::Start() const {
  Cursor c;
  for (const auto& shard : shards_) c.next.push_back(shard->head.load(std::memory_order_acquire));
  return c;
}

uint64_t FlightRecorder::ReadNew(Cursor* cursor,
                                 const std::function<void(const CallRecord&)>& fn) const {
  const uint64_t slots = shard_mask_ + 1;
  uint64_t lost = 0;
  cursor->next.resize(shards_.size(), 0);
  CallRecord record;
  for (size_t k = 0; k < shards_.size(); ++k) {
    const Shard& shard = *shards_[k];
    const uint64_t head = shard.head.load(std::memory_order_acquire);
    uint64_t i = cursor->next[k];
    if (head - i > slots) {
      lost += head - i - slots;
      i = head - slots;
    }
    for (; i < head; ++i) {
      if (Read(shard, i, &record)) {
        fn(record);
        continue;
      }
      const uint64_t seq = shard.ring[i & shard_mask_].seq.load(std::memory_order_acquire);
      // Reserved but not written yet: come back to it, unless the ring is about to pass it.
      if (seq < 2 * i + 2 && head - i < slots / 2) break;
      ++lost;
    }
    cursor->next[k] = i;
  }
  return lost;
}

void FlightRecorder::ScanBack(const Cursor& cursor,
                              const std::function<Scan(const CallRecord&)>& fn) const {
  constexpr uint64_t kChunk = 32;
  const uint64_t slots = shard_mask_ + 1;
  const size_t n = std::min(shards_.size(), cursor.next.size());
  std::vector<uint64_t> at(cursor.next.begin(), cursor.next.begin() + n);  // Next to read + 1.
  std::vector<uint64_t> stop(n);
  for (size_t k = 0; k < n; ++k) stop[k] = at[k] > slots ? at[k] - slots : 0;
  CallRecord record;
  bool any = true;
  while (any) {
    any = false;
    for (size_t k = 0; k < n; ++k) {
      for (uint64_t c = 0; c < kChunk && at[k] > stop[k]; ++c) {
        --at[k];
        if (!Read(*shards_[k], at[k], &record)) continue;
        const Scan next = fn(record);
        if (next == Scan::kStop) return;
        if (next == Scan::kStopShard) stop[k] = at[k];
      }
      any = any || at[k] > stop[k];
    }
  }
}

uint32_t FlightRecorder::AddError(absl::string_view message) {
  if (message.empty()) return 0;
  std::lock_guard lock(errors_mu_);
  const uint32_t id = next_error_++;
  if (next_error_ == 0) next_error_ = 1;
  errors_[(id - 1) % kErrors] = {id, std::string(message.substr(0, 1024))};
  return id;
}

std::string FlightRecorder::Error(uint32_t id) const {
  if (id == 0) return "";
  std::lock_guard lock(errors_mu_);
  const auto& [held, message] = errors_[(id - 1) % kErrors];
  return held == id ? message : "";
}

uint8_t FlightRecorder::PhaseIndex(const char* name) {
  for (size_t i = 1; i < kPhaseNames; ++i) {
    const char* held = phase_names[i].load(std::memory_order_acquire);
    if (held == nullptr) {
      if (phase_names[i].compare_exchange_strong(held, name, std::memory_order_acq_rel)) {
        return static_cast<uint8_t>(i);
      }
    }
    if (held == name || std::strcmp(held, name) == 0) return static_cast<uint8_t>(i);
  }
  return 0;
}

const char* FlightRecorder::PhaseName(uint8_t index) {
  return index > 0 && index < kPhaseNames ? phase_names[index].load(std::memory_order_acquire)
                                          : nullptr;
}

}  // namespace trainscope::telemetry
