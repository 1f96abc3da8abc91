// The thread's current span and last client span; see context.h.
#include "trainscope/telemetry/context.h"

namespace trainscope::telemetry {
namespace {

thread_local const SpanContext* current_span = nullptr;
thread_local SpanContext last_client_span;

}  // namespace

const SpanContext* CurrentSpanContext() { return current_span; }

ScopedSpanContext::ScopedSpanContext(const SpanContext& context)
    : context_(context), previous_(current_span) {
  current_span = &context_;
}

ScopedSpanContext::~ScopedSpanContext() { current_span = previous_; }

void SetLastClientSpanContext(const SpanContext& context) { last_client_span = context; }

std::string LastClientTraceId() {
  return last_client_span.valid() ? last_client_span.TraceIdHex() : "";
}

std::string CurrentTraceId() {
  return current_span != nullptr && current_span->valid() ? current_span->TraceIdHex() : "";
}

}  // namespace trainscope::telemetry
