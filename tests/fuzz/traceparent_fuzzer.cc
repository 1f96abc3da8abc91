// libFuzzer target: W3C `traceparent` parsing (telemetry/src/tracing.cc), which reads
// metadata any gRPC peer sends. What parses must format back to a header that parses to the same
// context.
#include <cstddef>
#include <cstdint>
#include <optional>

#include "absl/strings/string_view.h"
#include "trainscope/telemetry/tracing.h"

namespace {

void Check(bool ok) {
  if (!ok) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace tel = trainscope::telemetry;
  const absl::string_view header(reinterpret_cast<const char*>(data), size);
  std::optional<tel::SpanContext> context = tel::ParseTraceparent(header);
  if (!context) return 0;
  Check(context->valid());
  const std::string formatted = tel::FormatTraceparent(*context);
  Check(formatted.size() == 55);
  std::optional<tel::SpanContext> again = tel::ParseTraceparent(formatted);
  Check(again.has_value() && again->trace_id == context->trace_id &&
        again->span_id == context->span_id && again->sampled == context->sampled);
  return 0;
}
