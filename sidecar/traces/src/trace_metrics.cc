// The traces part's metric families; see trace_metrics.h.
#include "trainscope/sidecar/trace_metrics.h"

#include <string>
#include <utility>

#include "prometheus/metric_family.h"
#include "trainscope/sidecar/names.h"
#include "trainscope/telemetry/metrics.h"

namespace trainscope::sidecar {

using prometheus::MetricType;
using telemetry::AddMetric;
using telemetry::MakeFamily;

void AddTraceFamilies(const ReceiverStats& receiver, const TraceStoreStats& store,
                      const ForwarderStats& forwarder, std::vector<prometheus::MetricFamily>* out) {
  telemetry::AddCounter(out, names::kTracesSpansReceived,
                        "Spans received over OTLP (TraceService/Export).",
                        static_cast<double>(receiver.spans_received));
  telemetry::AddGauge(out, names::kTracesSpansKept,
                      "Spans held now (pending a join, or of slow or failed requests).",
                      static_cast<double>(store.spans_kept));
  telemetry::AddGauge(out, names::kTracesKeptBytes, "Estimated bytes of the spans held now.",
                      static_cast<double>(store.bytes_kept));
  auto dropped = MakeFamily(names::kTracesSpansDropped,
                            "Spans not kept, or forgotten early, by reason.", MetricType::Counter);
  for (auto [reason, value] : {std::pair{names::kReasonInvalid, receiver.spans_invalid},
                               std::pair{names::kReasonEvicted, store.dropped_evicted},
                               std::pair{names::kReasonTraceFull, store.dropped_trace_full},
                               std::pair{names::kReasonDuplicate, store.dropped_duplicate}}) {
    AddMetric(dropped, {{std::string(names::kLabelReason), std::string(reason)}}).counter.value =
        static_cast<double>(value);
  }
  out->push_back(std::move(dropped));
  // Always exported (0 without --otlp_upstream), so a rule on them need not test presence.
  telemetry::AddCounter(out, names::kTracesForwardedSpans, "Spans forwarded to the OTLP upstream.",
                        static_cast<double>(forwarder.forwarded_spans));
  telemetry::AddCounter(out, names::kTracesForwardDroppedSpans,
                        "Spans not forwarded: the queue was full or the upstream refused them.",
                        static_cast<double>(forwarder.dropped_spans));
  telemetry::AddCounter(out, names::kTracesForwardFailures,
                        "Failed Export calls to the OTLP upstream.",
                        static_cast<double>(forwarder.failures));
}

}  // namespace trainscope::sidecar
