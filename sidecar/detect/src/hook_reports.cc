// Heartbeats pushed by hooked programs; see hook_reports.h.
#include "trainscope/sidecar/hook_reports.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "grpcpp/grpcpp.h"
#include "trainscope/common/clock.h"
#include "trainscope/common/resolve.h"

namespace trainscope::sidecar {

absl::Status HookReports::Put(const ::trainscope::v1::HeartbeatResponse& report, double now_s) {
  const TaskRef task{report.identity().task().role(), report.identity().task().index()};
  if (!tasks_.count(task)) {
    return absl::InvalidArgumentError(
        absl::StrCat("this sidecar watches no task ", task.role.substr(0, 64), ":", task.index,
                     " on this node (the hook's TF_CONFIG names the task)"));
  }
  if (report.identity().pid() <= 0) {
    return absl::InvalidArgumentError("a report must name the pid of the task's process");
  }
  absl::MutexLock lock(&mu_);
  std::vector<Latest>& kept = latest_[task];
  for (Latest& l : kept) {
    if (l.report.identity().pid() == report.identity().pid()) {
      l.report = report;
      l.received_s = now_s;
      return absl::OkStatus();
    }
  }
  if (kept.size() >= kPidsPerTask) {
    auto oldest = kept.end();
    for (auto it = kept.begin(); it != kept.end(); ++it) {
      if (!it->matched && (oldest == kept.end() || it->received_s < oldest->received_s)) {
        oldest = it;
      }
    }
    if (oldest == kept.end()) oldest = kept.begin();
    kept.erase(oldest);
  }
  kept.push_back({report, now_s, false});
  return absl::OkStatus();
}

std::optional<HookReports::Latest> HookReports::Find(const TaskRef& task, int64_t pid,
                                                     int64_t ns_pid) const {
  absl::MutexLock lock(&mu_);
  auto it = latest_.find(task);
  if (it == latest_.end()) return std::nullopt;
  std::optional<Latest> found;
  for (Latest& l : it->second) {
    const int64_t reported = l.report.identity().pid();
    l.matched = reported == pid || (ns_pid > 0 && reported == ns_pid);
    if (l.matched) found = l;
  }
  return found;
}

grpc::Status HookReportService::Report(grpc::ServerContext* context,
                                       const ::trainscope::v1::HeartbeatResponse* request,
                                       ::trainscope::v1::ReportAck* response) {
  if (!IsNodeLocalPeer(context->peer(), node_addresses_)) {
    const auto auth = context->auth_context();
    if (auth == nullptr || !auth->IsPeerAuthenticated()) {
      refused_.fetch_add(1, std::memory_order_relaxed);
      return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                          "this trainscope sidecar takes reports only from its own node's tasks");
    }
  }
  if (absl::Status s = reports_->Put(*request, MonotonicSeconds()); !s.ok()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, std::string(s.message()));
  }
  response->set_interval_seconds(HookReports::kIntervalS);
  return grpc::Status::OK;
}

}  // namespace trainscope::sidecar
