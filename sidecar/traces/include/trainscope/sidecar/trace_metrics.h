#pragma once
// The traces part's metric families, built at scrape time with telemetry's builders: spans
// received, kept and dropped (by reason), and forwarded upstream. Always exported (zeros without
// spans or an upstream), so a rule on them need not test presence.

#include <vector>

#include "trainscope/sidecar/trace_stats.h"
#include "trainscope/sidecar/trace_store.h"

namespace prometheus {
struct MetricFamily;
}

namespace trainscope::sidecar {

void AddTraceFamilies(const ReceiverStats& receiver, const TraceStoreStats& store,
                      const ForwarderStats& forwarder, std::vector<prometheus::MetricFamily>* out);

}  // namespace trainscope::sidecar
