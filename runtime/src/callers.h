#pragma once
// Who calls a task's services: the caller's telemetry peer index (for the call's metrics and
// spans), and under mutual TLS whether the caller's certificate names the task it claims to be.
// Private to the runtime; the TaskService and the ParameterService use it.

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "trainscope/common/cluster_spec.h"
#include "trainscope/v1/runtime.pb.h"

namespace trainscope {

namespace telemetry {
class Telemetry;
}
class TaskMetrics;

// Thread-safe: it reads what it was built with and counts refusals in an atomic of TaskMetrics.
class Callers {
 public:
  // `self` is the task served; `mutual_tls` whether callers present certificates. `telemetry`
  // (null when there is none) and `metrics` must outlive this.
  Callers(ClusterSpec cluster, TaskRef self, bool mutual_tls, telemetry::Telemetry* telemetry,
          TaskMetrics* metrics);

  // The calling task's telemetry peer index (RpcMetrics::PeerIndex), or -1 when it is not in the
  // cluster or there is no telemetry.
  int Index(const v1::TaskId& from) const;

  // Under mutual TLS: OK when the caller's certificate names the host the cluster spec gives
  // `from`, the task it claims to be; else PERMISSION_DENIED naming both, logged and counted
  // (TaskMetrics::RecordIdentityRefused). OK without mutual TLS (nothing to check against), and
  // for a caller the cluster spec does not know (the call's own checks refuse it). For calls that
  // change state; `method` names the call in the refusal.
  absl::Status Check(const grpc::ServerContext& context, const v1::TaskId& from,
                     absl::string_view method) const;

 private:
  const ClusterSpec cluster_;
  const TaskRef self_;
  const bool mutual_tls_;
  telemetry::Telemetry* const telemetry_;
  TaskMetrics* const metrics_;
};

}  // namespace trainscope
