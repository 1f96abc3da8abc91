// The gossip part's metric families; see gossip_metrics.h.
#include "trainscope/sidecar/gossip_metrics.h"

#include <algorithm>
#include <string>
#include <tuple>

#include "prometheus/metric_family.h"
#include "trainscope/sidecar/names.h"
#include "trainscope/telemetry/metrics.h"

namespace trainscope::sidecar {

using prometheus::ClientMetric;
using prometheus::MetricType;
using telemetry::AddMetric;
using telemetry::MakeFamily;

void AddExchangeFamilies(const ExchangeStats& x, const std::vector<Member>& members,
                         std::vector<prometheus::MetricFamily>* out) {
  telemetry::AddCounter(out, names::kSidecarPeerErrors,
                        "Failed or nonsensical exchanges with peer sidecars.",
                        static_cast<double>(x.errors));
  telemetry::AddGauge(out, names::kSidecarPeers, "Other sidecars of the cluster this one knows.",
                      static_cast<double>(members.size()));
  auto by_status = MakeFamily(names::kSidecarMembers, "Other sidecars of the cluster, by status.",
                              MetricType::Gauge);
  for (MemberStatus s :
       {MemberStatus::kAlive, MemberStatus::kSuspect, MemberStatus::kSilent, MemberStatus::kLeft}) {
    const auto n = std::count_if(members.begin(), members.end(),
                                 [s](const Member& m) { return m.status == s; });
    AddMetric(by_status, {{std::string(names::kLabelStatus), std::string(MemberStatusName(s))}})
        .gauge.value = static_cast<double>(n);
  }
  out->push_back(std::move(by_status));
  auto messages =
      MakeFamily(names::kSidecarExchangeMessages,
                 "Exchange messages with other sidecars, by direction.", MetricType::Counter);
  auto bytes =
      MakeFamily(names::kSidecarExchangeBytes,
                 "Exchange payload bytes with other sidecars, by direction.", MetricType::Counter);
  for (auto [direction, n, b] :
       {std::tuple{names::kDirectionSent, x.messages_sent, x.bytes_sent},
        std::tuple{names::kDirectionReceived, x.messages_received, x.bytes_received}}) {
    std::vector<ClientMetric::Label> l = {
        {std::string(names::kLabelDirection), std::string(direction)}};
    AddMetric(messages, l).counter.value = static_cast<double>(n);
    AddMetric(bytes, l).counter.value = static_cast<double>(b);
  }
  out->push_back(std::move(messages));
  out->push_back(std::move(bytes));
  telemetry::AddCounter(
      out, names::kSidecarRecordsLearned,
      "Newer node records learned from other sidecars (changes somewhere in the cluster).",
      static_cast<double>(x.records_learned));
  telemetry::AddCounter(out, names::kSidecarRecordsRefused,
                        "Node records from other sidecars that made no sense.",
                        static_cast<double>(x.records_refused));
  telemetry::AddGauge(out, names::kSidecarExchangeAuthenticated,
                      "1: no one without the cluster key (--exchange_key_file) or a verified "
                      "certificate can speak for a node (every exchange message is signed and "
                      "checked, or there is no exchange); 0: anyone who reaches the gRPC port "
                      "can.",
                      x.authenticated ? 1 : 0);
  auto refused = MakeFamily(names::kSidecarExchangeRefused,
                            "Exchange messages refused before they were read, by reason "
                            "(unsigned, unknown_key, bad_signature, stale, replayed, signed, "
                            "header).",
                            MetricType::Counter);
  for (Refusal r : kAllRefusals) {
    AddMetric(refused, {{std::string(names::kLabelReason), std::string(RefusalName(r))}})
        .counter.value = static_cast<double>(x.refused[static_cast<size_t>(r)]);
  }
  out->push_back(std::move(refused));
}

}  // namespace trainscope::sidecar
