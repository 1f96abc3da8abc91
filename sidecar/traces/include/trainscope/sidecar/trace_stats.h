#pragma once
// The traces part's counters, apart from its gRPC transport (trace_receiver.h), so that what
// reads them (trace_metrics, the sidecar's stats) does not include the transport.

#include <cstdint>

namespace trainscope::sidecar {

// TraceReceiver's: Export calls, spans in them, spans skipped as invalid.
struct ReceiverStats {
  int64_t requests = 0;
  int64_t spans_received = 0;
  int64_t spans_invalid = 0;
  int64_t refused = 0;  // Export requests from elsewhere than this node, without mutual TLS.
};

// OtlpForwarder's: spans sent upstream, spans dropped (queue full, or the upstream refused them),
// failed Export calls.
struct ForwarderStats {
  int64_t forwarded_spans = 0;
  int64_t dropped_spans = 0;
  int64_t failures = 0;
};

}  // namespace trainscope::sidecar
