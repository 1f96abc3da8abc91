// Tests of W3C trace context parsing and formatting, the sampler (ratio, parent-based, from the
// environment), the Tracer's counters and its hand-off to the processor.
#include "trainscope/telemetry/tracing.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <mutex>
#include <random>
#include <set>
#include <thread>

namespace trainscope::telemetry {
namespace {

constexpr char kTraceId[] = "4bf92f3577b34da6a3ce929d0e0e4736";
constexpr char kSpanId[] = "00f067aa0ba902b7";
const std::string kValid = std::string("00-") + kTraceId + "-" + kSpanId + "-01";

TEST(TraceparentTest, ParsesTheSpecExample) {
  std::optional<SpanContext> context = ParseTraceparent(kValid);
  ASSERT_TRUE(context.has_value());
  EXPECT_EQ(context->TraceIdHex(), kTraceId);
  EXPECT_EQ(context->SpanIdHex(), kSpanId);
  EXPECT_TRUE(context->sampled);
  EXPECT_TRUE(context->valid());
  EXPECT_EQ(context->trace_id[0], 0x4b);
  EXPECT_EQ(context->span_id[7], 0xb7);
  EXPECT_EQ(FormatTraceparent(*context), kValid);
}

TEST(TraceparentTest, NotSampledRoundTrips) {
  const std::string header = std::string("00-") + kTraceId + "-" + kSpanId + "-00";
  std::optional<SpanContext> context = ParseTraceparent(header);
  ASSERT_TRUE(context.has_value());
  EXPECT_FALSE(context->sampled);
  EXPECT_EQ(FormatTraceparent(*context), header);
}

struct Case {
  const char* name;
  std::string header;
  bool ok;
  bool sampled = false;
};

TEST(TraceparentTest, Table) {
  const std::string t = kTraceId;
  const std::string s = kSpanId;
  const std::vector<Case> cases = {
      {"valid", "00-" + t + "-" + s + "-01", true, true},
      {"other flag bits ignored", "00-" + t + "-" + s + "-fe", true, false},
      {"flag bit 0 with others", "00-" + t + "-" + s + "-03", true, true},
      {"surrounding whitespace", "  00-" + t + "-" + s + "-01\t", true, true},
      {"empty", "", false},
      {"garbage", "hello", false},
      {"uppercase trace id", "00-4BF92F3577B34DA6A3CE929D0E0E4736-" + s + "-01", false},
      {"uppercase span id", "00-" + t + "-00F067AA0BA902B7-01", false},
      {"uppercase flags", "00-" + t + "-" + s + "-0A", false},
      {"uppercase version", "0A-" + t + "-" + s + "-01", false},
      {"zero trace id", "00-00000000000000000000000000000000-" + s + "-01", false},
      {"zero span id", "00-" + t + "-0000000000000000-01", false},
      {"short trace id", "00-" + t.substr(1) + "-" + s + "-01", false},
      {"long trace id", "00-" + t + "0-" + s + "-01", false},
      {"short span id", "00-" + t + "-" + s.substr(1) + "-01", false},
      {"long span id", "00-" + t + "-" + s + "0-01", false},
      {"short flags", "00-" + t + "-" + s + "-1", false},
      {"version 00 with more", "00-" + t + "-" + s + "-01-extra", false},
      {"version 00 with trailing char", "00-" + t + "-" + s + "-010", false},
      {"version ff", "ff-" + t + "-" + s + "-01", false},
      {"non-hex version", "0g-" + t + "-" + s + "-01", false},
      {"non-hex in trace id", "00-4bf92f3577b34da6a3ce929d0e0e473z-" + s + "-01", false},
      {"wrong separator", "00_" + t + "-" + s + "-01", false},
      {"missing separator", "00" + t + "-" + s + "-01", false},
      {"future version", "01-" + t + "-" + s + "-01", true, true},
      {"future version with more fields", "cc-" + t + "-" + s + "-01-what-ever", true, true},
      {"future version bad continuation", "cc-" + t + "-" + s + "-01what", false},
      {"future version short", "cc-" + t + "-" + s + "-0", false},
  };
  for (const Case& c : cases) {
    std::optional<SpanContext> context = ParseTraceparent(c.header);
    EXPECT_EQ(context.has_value(), c.ok) << c.name << ": " << c.header;
    if (context && c.ok) {
      EXPECT_EQ(context->sampled, c.sampled) << c.name;
      EXPECT_EQ(context->TraceIdHex(), t) << c.name;
      EXPECT_EQ(context->SpanIdHex(), s) << c.name;
    }
  }
}

// Random mutations of a valid header never crash, and whatever parses formats back to a header
// that parses to the same context.
TEST(TraceparentTest, RandomMutationsNeverCrash) {
  std::mt19937_64 rng(12345);
  const std::string alphabet = std::string("0123456789abcdefABCDEF-xz \t") + '\0' + '\xff';
  int parsed = 0;
  for (int i = 0; i < 200000; ++i) {
    std::string header = kValid;
    const int mutations = 1 + static_cast<int>(rng() % 4);
    for (int m = 0; m < mutations; ++m) {
      switch (rng() % 4) {
        case 0:  // Replace a character.
          if (!header.empty()) header[rng() % header.size()] = alphabet[rng() % alphabet.size()];
          break;
        case 1:  // Insert one.
          header.insert(header.begin() + static_cast<long>(rng() % (header.size() + 1)),
                        alphabet[rng() % alphabet.size()]);
          break;
        case 2:  // Erase one.
          if (!header.empty()) header.erase(rng() % header.size(), 1);
          break;
        default:  // Truncate.
          header.resize(rng() % (header.size() + 1));
      }
    }
    std::optional<SpanContext> context = ParseTraceparent(header);
    if (context) {
      ++parsed;
      ASSERT_TRUE(context->valid()) << header;
      std::optional<SpanContext> again = ParseTraceparent(FormatTraceparent(*context));
      ASSERT_TRUE(again.has_value()) << header;
      EXPECT_EQ(again->trace_id, context->trace_id);
      EXPECT_EQ(again->span_id, context->span_id);
      EXPECT_EQ(again->sampled, context->sampled);
    }
  }
  EXPECT_GT(parsed, 0);  // Some mutations (e.g. a hex digit for another) stay valid.
  // Fully random bytes too.
  for (int i = 0; i < 20000; ++i) {
    std::string header(rng() % 80, '\0');
    for (char& c : header) c = static_cast<char>(rng());
    (void)ParseTraceparent(header);
  }
}

TEST(SpanContextTest, DefaultIsInvalid) {
  SpanContext context;
  EXPECT_FALSE(context.valid());
  EXPECT_EQ(context.TraceIdHex(), std::string(32, '0'));
  EXPECT_EQ(context.SpanIdHex(), std::string(16, '0'));
}

class RecordingProcessor : public SpanProcessor {
 public:
  void OnEnd(SpanData&& span) override {
    std::lock_guard<std::mutex> lock(mu);
    spans.push_back(std::move(span));
  }
  std::mutex mu;
  std::vector<SpanData> spans;
};

TEST(TracerTest, RootAndChildContexts) {
  RecordingProcessor processor;
  Tracer tracer({}, &processor);
  EXPECT_TRUE(tracer.enabled());
  SpanContext root = tracer.NewContext(nullptr);
  EXPECT_TRUE(root.valid());
  EXPECT_TRUE(root.sampled);
  SpanContext child = tracer.NewContext(&root);
  EXPECT_EQ(child.trace_id, root.trace_id);
  EXPECT_NE(child.span_id, root.span_id);
  SpanContext other = tracer.NewContext(nullptr);
  EXPECT_NE(other.trace_id, root.trace_id);
  SpanContext invalid;
  SpanContext from_invalid = tracer.NewContext(&invalid);
  EXPECT_TRUE(from_invalid.valid());
  EXPECT_NE(from_invalid.trace_id, invalid.trace_id);
  EXPECT_EQ(tracer.stats().spans_started.load(), 4u);
  EXPECT_EQ(tracer.stats().spans_sampled.load(), 4u);
}

TEST(TracerTest, IdsAreUniqueAcrossThreads) {
  Tracer tracer({}, nullptr);
  std::mutex mu;
  std::set<std::string> ids;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      std::vector<std::string> mine;
      for (int i = 0; i < 5000; ++i) {
        SpanContext c = tracer.NewContext(nullptr);
        mine.push_back(c.TraceIdHex() + c.SpanIdHex());
      }
      std::lock_guard<std::mutex> lock(mu);
      ids.insert(mine.begin(), mine.end());
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(ids.size(), 20000u);
}

// gRPC's servers start and end threads all the time; each new thread's generator is seeded
// from the process's seed and its own number, never from another thread's sequence.
TEST(TracerTest, IdsAreUniqueAcrossShortLivedThreads) {
  Tracer tracer({}, nullptr);
  std::set<std::string> trace_ids;
  std::set<std::string> span_ids;
  for (int t = 0; t < 300; ++t) {
    std::vector<SpanContext> mine;
    std::thread([&] {
      for (int i = 0; i < 4; ++i) mine.push_back(tracer.NewContext(nullptr));
    }).join();
    for (const SpanContext& c : mine) {
      trace_ids.insert(c.TraceIdHex());
      span_ids.insert(c.SpanIdHex());
    }
  }
  EXPECT_EQ(trace_ids.size(), 1200u);
  EXPECT_EQ(span_ids.size(), 1200u);
}

TEST(TracerTest, EndForwardsOnlySampledSpans) {
  RecordingProcessor processor;
  TracingStats stats;
  Tracer tracer({.ratio = 0.0, .parent_based = true}, &processor, &stats);
  SpanContext unsampled = tracer.NewContext(nullptr);
  EXPECT_FALSE(unsampled.sampled);
  SpanData span;
  span.context = unsampled;
  span.name = "dropped";
  tracer.End(std::move(span));

  SpanContext parent = *ParseTraceparent(kValid);
  SpanContext child = tracer.NewContext(&parent);
  EXPECT_TRUE(child.sampled);  // Parent-based: follows the parent although the ratio is 0.
  SpanData kept;
  kept.context = child;
  kept.parent_span_id = parent.span_id;
  kept.name = "kept";
  tracer.End(std::move(kept));

  ASSERT_EQ(processor.spans.size(), 1u);
  EXPECT_EQ(processor.spans[0].name, "kept");
  EXPECT_EQ(stats.spans_started.load(), 2u);
  EXPECT_EQ(stats.spans_sampled.load(), 1u);
  EXPECT_EQ(stats.spans_ended.load(), 2u);
  EXPECT_EQ(&tracer.stats(), &stats);
}

TEST(TracerTest, NoProcessorMeansOff) {
  Tracer tracer({}, nullptr);
  EXPECT_FALSE(tracer.enabled());
  SpanData span;
  span.context = tracer.NewContext(nullptr);
  EXPECT_TRUE(span.context.valid());  // Contexts still propagate.
  tracer.End(std::move(span));        // And nothing happens.
  EXPECT_EQ(tracer.stats().spans_ended.load(), 1u);
}

TEST(TracerTest, NotParentBasedIgnoresParent) {
  Tracer never({.ratio = 0.0, .parent_based = false}, nullptr);
  SpanContext parent = *ParseTraceparent(kValid);
  EXPECT_FALSE(never.NewContext(&parent).sampled);
  Tracer always({.ratio = 1.0, .parent_based = false}, nullptr);
  parent.sampled = false;
  EXPECT_TRUE(always.NewContext(&parent).sampled);
  Tracer follow({.ratio = 1.0, .parent_based = true}, nullptr);
  EXPECT_FALSE(follow.NewContext(&parent).sampled);
}

TEST(SamplerTest, RatioIsDeterministicOnTheTraceId) {
  std::array<uint8_t, 16> id{};
  id[0] = 0xff;                                   // The high bytes do not count.
  EXPECT_FALSE(Tracer::SampledByRatio(id, 0.5));  // Lowest 56 bits are 0: below the threshold.
  EXPECT_TRUE(Tracer::SampledByRatio(id, 1.0));
  for (size_t i = 9; i < 16; ++i) id[i] = 0xff;
  EXPECT_TRUE(Tracer::SampledByRatio(id, 0.5));
  EXPECT_TRUE(Tracer::SampledByRatio(id, 1e-9));
  EXPECT_FALSE(Tracer::SampledByRatio(id, 0.0));
  id[9] = 0x7f;  // Just below the middle.
  EXPECT_FALSE(Tracer::SampledByRatio(id, 0.5));
  id[9] = 0x80;  // The middle.
  EXPECT_TRUE(Tracer::SampledByRatio(id, 0.5));
  EXPECT_EQ(Tracer::SampledByRatio(id, 0.3), Tracer::SampledByRatio(id, 0.3));
}

TEST(SamplerTest, RatioKeepsAboutThatShare) {
  Tracer tracer({.ratio = 0.25, .parent_based = true}, nullptr);
  int sampled = 0;
  constexpr int kN = 40000;
  for (int i = 0; i < kN; ++i) sampled += tracer.NewContext(nullptr).sampled ? 1 : 0;
  EXPECT_NEAR(static_cast<double>(sampled) / kN, 0.25, 0.02);
  // Children of an unsampled root stay unsampled, and of a sampled one sampled.
  for (int i = 0; i < 100; ++i) {
    SpanContext root = tracer.NewContext(nullptr);
    EXPECT_EQ(tracer.NewContext(&root).sampled, root.sampled);
  }
}

class SamplerEnvTest : public ::testing::Test {
 protected:
  void SetUp() override { Clear(); }
  void TearDown() override { Clear(); }
  static void Clear() {
    unsetenv("OTEL_TRACES_SAMPLER");
    unsetenv("OTEL_TRACES_SAMPLER_ARG");
  }
  static SamplerOptions Read(const char* sampler, const char* arg, std::string* warning) {
    if (sampler) setenv("OTEL_TRACES_SAMPLER", sampler, 1);
    if (arg) setenv("OTEL_TRACES_SAMPLER_ARG", arg, 1);
    return Tracer::SamplerFromEnv(warning);
  }
};

TEST_F(SamplerEnvTest, Values) {
  struct EnvCase {
    const char* sampler;
    const char* arg;
    double ratio;
    bool parent_based;
    bool warns;
  };
  const std::vector<EnvCase> cases = {
      {nullptr, nullptr, 1.0, true, false},
      {"always_on", nullptr, 1.0, false, false},
      {"always_off", nullptr, 0.0, false, false},
      {"traceidratio", "0.1", 0.1, false, false},
      {"traceidratio", nullptr, 1.0, false, false},
      {"parentbased_always_on", nullptr, 1.0, true, false},
      {"parentbased_always_off", nullptr, 0.0, true, false},
      {"parentbased_traceidratio", "0.25", 0.25, true, false},
      {"ParentBased_TraceIdRatio", " 0.5 ", 0.5, true, false},
      {"traceidratio", "1.5", 1.0, false, true},
      {"traceidratio", "-0.1", 1.0, false, true},
      {"traceidratio", "half", 1.0, false, true},
      {"traceidratio", "nan", 1.0, false, true},
      {"jaeger_remote", nullptr, 1.0, true, true},
      {"", nullptr, 1.0, true, false},
  };
  for (const EnvCase& c : cases) {
    Clear();
    std::string warning = "stale";
    SamplerOptions options = Read(c.sampler, c.arg, &warning);
    const std::string label =
        std::string(c.sampler ? c.sampler : "(unset)") + " / " + (c.arg ? c.arg : "(unset)");
    EXPECT_DOUBLE_EQ(options.ratio, c.ratio) << label;
    EXPECT_EQ(options.parent_based, c.parent_based) << label;
    EXPECT_EQ(!warning.empty(), c.warns) << label << ": " << warning;
  }
  Clear();
  std::string warning;
  Read("nonsense", nullptr, &warning);
  EXPECT_NE(warning.find("OTEL_TRACES_SAMPLER=\"nonsense\""), std::string::npos) << warning;
  Read(nullptr, nullptr, nullptr);  // A null warning pointer is fine.
}

TEST(ClockTest, NowIsWallClockAndNeverGoesBack) {
  const uint64_t system_now =
      static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                std::chrono::system_clock::now().time_since_epoch())
                                .count());
  uint64_t previous = NowUnixNanos();
  EXPECT_NEAR(static_cast<double>(previous), static_cast<double>(system_now), 1e9);
  for (int i = 0; i < 100000; ++i) {
    uint64_t now = NowUnixNanos();
    ASSERT_GE(now, previous);
    previous = now;
  }
}

}  // namespace
}  // namespace trainscope::telemetry
