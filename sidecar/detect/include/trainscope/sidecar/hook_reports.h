#pragma once
// Heartbeats pushed by programs that do not link the runtime: a TensorFlow task with trainscope's
// Python hook (python/trainscope) sends TaskReports/Report to its node's sidecar, since the
// sidecar cannot reach the hook (the task's port is TensorFlow's). HookReportService takes them
// on the sidecar's gRPC port, from this node only; HookReports keeps each watched task's latest;
// the poller merges it into what it sees of the task from outside, once it has verified that
// the reporting pid holds the task's port (poller.cc). Thread-safe.

#include <atomic>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "trainscope/common/cluster_spec.h"
#include "trainscope/v1/runtime.grpc.pb.h"

namespace trainscope::sidecar {

class HookReports {
 public:
  static constexpr double kIntervalS = 0.5;  // How often a hook reports (told in the ack).
  static constexpr double kStaleS = 5;       // Older than this, the reporter is silent.
  static constexpr size_t kPidsPerTask = 4;  // Reports kept per task, one per pid, newest.

  explicit HookReports(std::vector<TaskRef> tasks) : tasks_(tasks.begin(), tasks.end()) {}

  // Keeps `report`, received at monotonic `now_s`, as the latest of its task from its pid. A
  // task keeps kPidsPerTask pids' reports; when full, the oldest goes, never the one Find last
  // matched to the port's holder (so reports from other pids, a forger's, cannot push it out).
  // InvalidArgument, in words, when its identity names no task this node watches, or no pid.
  absl::Status Put(const ::trainscope::v1::HeartbeatResponse& report, double now_s);

  struct Latest {
    ::trainscope::v1::HeartbeatResponse report;
    double received_s = 0;
    bool matched = false;  // Find matched it to the verified process.
  };
  // The latest report of `task` whose pid is `pid` or `ns_pid` (the hook sees its pid in its own
  // PID namespace); nullopt when none.
  std::optional<Latest> Find(const TaskRef& task, int64_t pid, int64_t ns_pid) const;

 private:
  const std::set<TaskRef> tasks_;
  mutable absl::Mutex mu_;
  mutable std::map<TaskRef, std::vector<Latest>> latest_ ABSL_GUARDED_BY(mu_);
};

// TaskReports on the sidecar's gRPC port: a report from a peer that is not this node (loopback,
// a unix socket, one of `node_addresses`) and has no verified client certificate is refused
// with PERMISSION_DENIED and counted.
class HookReportService final : public ::trainscope::v1::TaskReports::Service {
 public:
  HookReportService(HookReports* reports, std::vector<std::string> node_addresses)
      : reports_(reports), node_addresses_(std::move(node_addresses)) {}

  grpc::Status Report(grpc::ServerContext* context,
                      const ::trainscope::v1::HeartbeatResponse* request,
                      ::trainscope::v1::ReportAck* response) override;
  int64_t refused() const { return refused_.load(std::memory_order_relaxed); }

 private:
  HookReports* reports_;
  const std::vector<std::string> node_addresses_;
  std::atomic<int64_t> refused_{0};
};

}  // namespace trainscope::sidecar
