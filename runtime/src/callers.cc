// Callers: the caller's peer index and the mutual-TLS identity check; see callers.h.
#include "callers.h"

#include "absl/strings/str_cat.h"
#include "internal.h"
#include "spdlog/spdlog.h"
#include "task_metrics.h"
#include "trainscope/common/grpc_tls.h"
#include "trainscope/telemetry/telemetry.h"

namespace trainscope {

Callers::Callers(ClusterSpec cluster, TaskRef self, bool mutual_tls,
                 telemetry::Telemetry* telemetry, TaskMetrics* metrics)
    : cluster_(std::move(cluster)),
      self_(std::move(self)),
      mutual_tls_(mutual_tls),
      telemetry_(telemetry),
      metrics_(metrics) {}

int Callers::Index(const v1::TaskId& from) const {
  return telemetry_ ? telemetry_->rpc().PeerIndex(from.role(), from.index()) : -1;
}

absl::Status Callers::Check(const grpc::ServerContext& context, const v1::TaskId& from,
                            absl::string_view method) const {
  if (!mutual_tls_) return absl::OkStatus();
  const TaskRef caller = TaskIdFromProto(from);
  const std::string* address = cluster_.FindAddress(caller);
  if (address == nullptr) return absl::OkStatus();  // The call's own checks refuse it.
  auto host = ParseHostPort(*address);
  if (!host.ok()) return absl::OkStatus();
  absl::Status st = CheckCertificateNamesHost(PeerCertificateNames(context), host->host);
  if (st.ok()) return st;
  metrics_->RecordIdentityRefused();
  std::string message =
      absl::StrCat(self_.ShortName(), " refused ", method, " from ", caller.ShortName(), " at ",
                   context.peer(), ": ", st.message());
  spdlog::warn("{}", message);
  return absl::PermissionDeniedError(message);
}

}  // namespace trainscope
