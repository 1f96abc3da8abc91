#pragma once
// The sidecar's own reading of a TensorFlow-style cluster spec (TF_CONFIG JSON), the task
// names in it ("ps:1"), and which of its hosts are this machine. The runtime has its own parser;
// the sidecar keeps a separate one so that it can watch tasks of any build.

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace trainscope::sidecar {

// A task's name: role ("ps", "worker", ...) and index. Value type.
struct TaskRef {
  std::string role;
  int index = 0;

  // "ps:1".
  std::string Name() const { return role + ":" + std::to_string(index); }
  friend bool operator==(const TaskRef&, const TaskRef&) = default;
  friend auto operator<=>(const TaskRef&, const TaskRef&) = default;
};

// Parses "ps:1" into a TaskRef; InvalidArgument quoting the text otherwise.
absl::StatusOr<TaskRef> ParseTaskRef(std::string_view text);

// A cluster spec: jobs and their addresses, and optionally the task this process is. Value type.
struct ClusterSpec {
  std::map<std::string, std::vector<std::string>> jobs;
  std::optional<TaskRef> task;

  // Every task of every job, in (role, index) order.
  std::vector<TaskRef> Tasks() const;
  // The address of `task`, or nullopt when the spec has no such task.
  std::optional<std::string> Address(const TaskRef& task) const;
};

// Parses TF_CONFIG JSON. `task` may be absent. Errors are one line and quote the offending part,
// e.g. `cluster spec: cluster.ps[1] = "localhost" is not host:port`.
absl::StatusOr<ClusterSpec> ParseClusterSpec(std::string_view json);

// Parses a comma-separated task list ("ps:0,worker:1"); every task must exist in `spec`.
absl::StatusOr<std::vector<TaskRef>> ParseTaskList(std::string_view list, const ClusterSpec& spec);

// Splits "host:port" or "[v6]:port". InvalidArgument when there is no valid port.
absl::StatusOr<std::pair<std::string, int>> SplitHostPort(std::string_view address);

// Tells whether a host names this machine: loopback addresses, "localhost", this hostname, or an
// address of a local interface (names are resolved once, at construction and on first use).
// Not thread-safe; build it once at start-up.
class LocalHosts {
 public:
  // Reads the hostname and the addresses of the local interfaces.
  LocalHosts();
  // For tests: a fixed hostname and interface address list.
  LocalHosts(std::string hostname, std::vector<std::string> addresses);

  bool IsLocal(const std::string& host) const;
  const std::string& hostname() const { return hostname_; }

 private:
  bool IsLocalAddress(const std::string& literal) const;

  std::string hostname_;
  std::vector<std::string> addresses_;
};

}  // namespace trainscope::sidecar
