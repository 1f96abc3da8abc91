#pragma once
// The span a thread is working in, so that the calls it makes become that span's children and
// its log lines carry the trace id. Thread-local; no locks.

#include <string>

#include "trainscope/telemetry/tracing.h"

namespace trainscope::telemetry {

// The calling thread's current span, or null.
const SpanContext* CurrentSpanContext();

// Makes `context` the thread's current span until destroyed (then restores the previous one).
class ScopedSpanContext {
 public:
  explicit ScopedSpanContext(const SpanContext& context);
  ~ScopedSpanContext();
  ScopedSpanContext(const ScopedSpanContext&) = delete;
  ScopedSpanContext& operator=(const ScopedSpanContext&) = delete;

 private:
  SpanContext context_;
  const SpanContext* previous_;
};

// Hex trace id of the current span, or "" — for log lines.
std::string CurrentTraceId();

// Hex trace id of the last sampled client call this thread made, or "" — for error messages.
std::string LastClientTraceId();
// Records `context` as the thread's last sampled client call (the client instrumentation does).
void SetLastClientSpanContext(const SpanContext& context);

}  // namespace trainscope::telemetry
