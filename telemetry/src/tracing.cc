// W3C trace context, the sampler and the Tracer. See tracing.h.
#include "trainscope/telemetry/tracing.h"

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace trainscope::telemetry {
namespace {

constexpr char kHex[] = "0123456789abcdef";

// Lowercase hex only, as W3C Trace Context requires; -1 otherwise.
int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

template <size_t N>
bool ParseHexBytes(absl::string_view text, std::array<uint8_t, N>* out) {
  if (text.size() != 2 * N) return false;
  for (size_t i = 0; i < N; ++i) {
    int hi = HexValue(text[2 * i]);
    int lo = HexValue(text[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    (*out)[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  return true;
}

template <size_t N>
std::string ToHex(const std::array<uint8_t, N>& bytes) {
  std::string out(2 * N, '0');
  for (size_t i = 0; i < N; ++i) {
    out[2 * i] = kHex[bytes[i] >> 4];
    out[2 * i + 1] = kHex[bytes[i] & 0xf];
  }
  return out;
}

template <size_t N>
bool AllZero(const std::array<uint8_t, N>& bytes) {
  for (uint8_t b : bytes) {
    if (b != 0) return false;
  }
  return true;
}

// The process's random seed: std::random_device once (constructing one and reading it costs
// ~30 us here, and a gRPC server may start and end threads hundreds of times a second).
uint64_t ProcessSeed() {
  static const uint64_t seed = [] {
    std::random_device rd;
    return (static_cast<uint64_t>(rd()) << 32) ^ rd() ^
           static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  }();
  return seed;
}

// xoshiro256** seeded by splitmix64, one per thread: each thread's seed is the process's seed
// plus a distinct multiple of splitmix64's increment, so no two threads share a sequence.
class Random {
 public:
  Random() {
    static std::atomic<uint64_t> threads{0};
    uint64_t seed = ProcessSeed() + threads.fetch_add(1, std::memory_order_relaxed) *
                                        (uint64_t{4} * 0x9e3779b97f4a7c15ULL);
    for (uint64_t& s : s_) s = SplitMix64(&seed);
  }

  uint64_t Next() {
    const uint64_t result = Rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = Rotl(s_[3], 45);
    return result;
  }

  // Fills `bytes` with random bytes, never all zeros.
  template <size_t N>
  void Fill(std::array<uint8_t, N>* bytes) {
    static_assert(N % 8 == 0);
    uint64_t any = 0;
    do {
      for (size_t i = 0; i < N; i += 8) {
        const uint64_t v = Next();
        std::memcpy(bytes->data() + i, &v, sizeof(v));
        any |= v;
      }
    } while (any == 0);
  }

 private:
  static uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  static uint64_t SplitMix64(uint64_t* state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }

  uint64_t s_[4];
};

Random& ThreadRandom() {
  thread_local Random random;
  return random;
}

// Parses a ratio in [0, 1]; nullopt otherwise.
std::optional<double> ParseRatio(absl::string_view text) {
  double value = 0;
  if (!absl::SimpleAtod(absl::StripAsciiWhitespace(text), &value)) return std::nullopt;
  if (!(value >= 0.0 && value <= 1.0)) return std::nullopt;  // Also rejects NaN.
  return value;
}

}  // namespace

bool SpanContext::valid() const { return !AllZero(trace_id) && !AllZero(span_id); }

std::string SpanContext::TraceIdHex() const { return ToHex(trace_id); }

std::string SpanContext::SpanIdHex() const { return ToHex(span_id); }

std::optional<SpanContext> ParseTraceparent(absl::string_view header) {
  // version "-" trace-id "-" parent-id "-" trace-flags: 2 + 1 + 32 + 1 + 16 + 1 + 2.
  constexpr size_t kLength = 55;
  header = absl::StripAsciiWhitespace(header);  // OWS around a header value is allowed.
  if (header.size() < kLength) return std::nullopt;
  std::array<uint8_t, 1> version;
  if (!ParseHexBytes(header.substr(0, 2), &version) || version[0] == 0xff) return std::nullopt;
  if (version[0] == 0x00) {
    if (header.size() != kLength) return std::nullopt;
  } else if (header.size() > kLength && header[kLength] != '-') {
    // A later version may append fields, each after a '-'.
    return std::nullopt;
  }
  if (header[2] != '-' || header[35] != '-' || header[52] != '-') return std::nullopt;
  SpanContext context;
  std::array<uint8_t, 1> flags;
  if (!ParseHexBytes(header.substr(3, 32), &context.trace_id) ||
      !ParseHexBytes(header.substr(36, 16), &context.span_id) ||
      !ParseHexBytes(header.substr(53, 2), &flags)) {
    return std::nullopt;
  }
  if (!context.valid()) return std::nullopt;
  context.sampled = (flags[0] & 0x01) != 0;
  return context;
}

std::string FormatTraceparent(const SpanContext& context) {
  std::string out;
  out.reserve(55);
  out.append("00-");
  out.append(context.TraceIdHex());
  out.push_back('-');
  out.append(context.SpanIdHex());
  out.append(context.sampled ? "-01" : "-00");
  return out;
}

SpanProcessor::~SpanProcessor() = default;

uint64_t UnixNanosAt(std::chrono::steady_clock::time_point when) {
  using std::chrono::duration_cast;
  using std::chrono::nanoseconds;
  static const auto [system_base, steady_base] = [] {
    return std::pair{
        duration_cast<nanoseconds>(std::chrono::system_clock::now().time_since_epoch()).count(),
        std::chrono::steady_clock::now()};
  }();
  const int64_t since = duration_cast<nanoseconds>(when - steady_base).count();
  return static_cast<uint64_t>(system_base + since);
}

uint64_t NowUnixNanos() { return UnixNanosAt(std::chrono::steady_clock::now()); }

Tracer::Tracer(SamplerOptions sampler, SpanProcessor* processor, TracingStats* stats)
    : sampler_(sampler), processor_(processor), stats_(stats != nullptr ? stats : &own_stats_) {}

bool Tracer::SampledByRatio(const std::array<uint8_t, 16>& trace_id, double ratio) {
  if (ratio >= 1.0) return true;
  if (!(ratio > 0.0)) return false;
  constexpr double kTwo56 = 72057594037927936.0;  // 2^56
  uint64_t randomness = 0;
  for (size_t i = 9; i < 16; ++i) randomness = randomness << 8 | trace_id[i];
  const uint64_t threshold = static_cast<uint64_t>(std::llround((1.0 - ratio) * kTwo56));
  return randomness >= threshold;
}

SpanContext Tracer::NewContext(const SpanContext* parent) {
  Random& random = ThreadRandom();
  SpanContext context;
  const bool has_parent = parent != nullptr && parent->valid();
  if (has_parent) {
    context.trace_id = parent->trace_id;
  } else {
    random.Fill(&context.trace_id);
  }
  random.Fill(&context.span_id);
  if (has_parent && sampler_.parent_based) {
    context.sampled = parent->sampled;
  } else {
    context.sampled = SampledByRatio(context.trace_id, sampler_.ratio);
  }
  stats_->spans_started.fetch_add(1, std::memory_order_relaxed);
  if (context.sampled) stats_->spans_sampled.fetch_add(1, std::memory_order_relaxed);
  return context;
}

void Tracer::End(SpanData&& span) {
  stats_->spans_ended.fetch_add(1, std::memory_order_relaxed);
  if (processor_ == nullptr || !span.context.sampled) return;
  processor_->OnEnd(std::move(span));
}

SamplerOptions Tracer::SamplerFromEnv(std::string* warning) {
  if (warning != nullptr) warning->clear();
  const char* name_env = std::getenv("OTEL_TRACES_SAMPLER");
  const char* arg_env = std::getenv("OTEL_TRACES_SAMPLER_ARG");
  const std::string name =
      absl::AsciiStrToLower(absl::StripAsciiWhitespace(name_env != nullptr ? name_env : ""));
  std::string problem;

  SamplerOptions options;  // parentbased_always_on.
  if (name.empty() || name == "parentbased_always_on") {
  } else if (name == "always_on") {
    options.parent_based = false;
  } else if (name == "always_off") {
    options = {0.0, false};
  } else if (name == "parentbased_always_off") {
    options = {0.0, true};
  } else if (name == "traceidratio" || name == "parentbased_traceidratio") {
    options.parent_based = name != "traceidratio";
    if (arg_env != nullptr && *arg_env != '\0') {
      std::optional<double> ratio = ParseRatio(arg_env);
      if (ratio) {
        options.ratio = *ratio;
      } else {
        problem = absl::StrCat("OTEL_TRACES_SAMPLER_ARG=\"", arg_env,
                               "\" is not a ratio in [0, 1]; sampling with ratio 1");
      }
    }
  } else {
    problem = absl::StrCat("OTEL_TRACES_SAMPLER=\"", name_env,
                           "\" is not one of always_on, always_off, traceidratio, "
                           "parentbased_always_on, parentbased_always_off, "
                           "parentbased_traceidratio; using parentbased_always_on");
  }
  if (warning != nullptr) *warning = std::move(problem);
  return options;
}

}  // namespace trainscope::telemetry
