#pragma once
// The gossip part's metric families, built at scrape time with telemetry's builders: the other
// sidecars by status, and the exchange's messages, bytes and records. Always exported (zeros
// without peers), so a rule on them need not test presence.

#include <vector>

#include "trainscope/sidecar/exchange_core.h"
#include "trainscope/sidecar/membership.h"

namespace prometheus {
struct MetricFamily;
}

namespace trainscope::sidecar {

void AddExchangeFamilies(const ExchangeStats& exchange, const std::vector<Member>& members,
                         std::vector<prometheus::MetricFamily>* out);

}  // namespace trainscope::sidecar
