#pragma once
// The one reader of a TensorFlow-style cluster spec, shared by the runtime and the sidecar so
// that both accept and reject exactly the same specs. TF_CONFIG as TensorFlow reads it:
//   {"cluster": {"ps": ["host:port", ...], "worker": [...]}, "task": {"type": "ps", "index": 0}}
// Task names ("ps:1", "/job:ps/replica:0/task:1") and host:port addresses live here too.
// Parsing never throws: a bad spec is a one-line error that quotes the offending part.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace trainscope {

// A task's place in the cluster: its job ("ps", "worker", "chief", ...) and index. Value type.
struct TaskRef {
  std::string role;
  int index = 0;

  // "ps:1".
  std::string ShortName() const;
  // "/job:ps/replica:0/task:1", as TensorFlow names tasks in its logs.
  std::string FullName() const;
  friend bool operator==(const TaskRef&, const TaskRef&) = default;
  friend auto operator<=>(const TaskRef&, const TaskRef&) = default;
};

// Parses a short name ("ps:1", surrounding blanks allowed); errors quote the text.
absl::StatusOr<TaskRef> ParseTaskRef(absl::string_view text);

// True for a job name TensorFlow accepts: a letter, then letters, digits or '_'.
bool IsValidJobName(absl::string_view name);

struct HostPort {
  std::string host;  // Without brackets for IPv6.
  int port = 0;
};
// Splits "host:port" or "[v6]:port"; an unbracketed IPv6 address, an empty host, a host with
// characters no host name has, or a port outside 1-65535 is an error that quotes the text.
absl::StatusOr<HostPort> ParseHostPort(absl::string_view address);
// The inverse: "host:port", or "[v6]:port" for a host with a ':' (an IPv6 address).
std::string JoinHostPort(absl::string_view host, int port);

// The jobs of a cluster and their task addresses. Immutable once built; thread-compatible.
class ClusterSpec {
 public:
  ClusterSpec() = default;
  // Validates: at least one job, valid job names, no empty job, well-formed host:port, no
  // address listed twice.
  static absl::StatusOr<ClusterSpec> FromJobs(std::map<std::string, std::vector<std::string>> jobs);

  const std::map<std::string, std::vector<std::string>>& jobs() const { return jobs_; }
  int NumTasks(absl::string_view role) const;
  // The address of `task`, or null when the spec has no such task.
  const std::string* FindAddress(const TaskRef& task) const;
  // The address of `task`, or an error naming it when the spec has no such task.
  absl::StatusOr<std::string> AddressOf(const TaskRef& task) const;
  // Every task, job by job in name order.
  std::vector<TaskRef> AllTasks() const;
  // Hex digest of jobs and addresses; equal specs have equal fingerprints.
  std::string Fingerprint() const;

 private:
  std::map<std::string, std::vector<std::string>> jobs_;
};

// How two specs differ, in words: "job 'worker' lists 3 tasks [a, b, c] in <a_name>'s spec
// but 2 [a, b] in <b_name>'s". Empty when they are equal.
std::string DescribeSpecDifference(const ClusterSpec& a, absl::string_view a_name,
                                   const ClusterSpec& b, absl::string_view b_name);

// TF_CONFIG's content: the cluster and, when given, this process's task.
struct TfConfig {
  ClusterSpec cluster;
  std::optional<TaskRef> task;
};

// Parses TF_CONFIG JSON. With `require_task`, a missing "task" is an error; a "task" that is
// given is always checked against the cluster, except TensorFlow's evaluator, which is outside
// the cluster on purpose: a task {"type": "evaluator"} of a cluster with no evaluator job is
// accepted (with `task` left empty) when !require_task, and refused, saying so, otherwise.
absl::StatusOr<TfConfig> ParseTfConfig(absl::string_view json, bool require_task);

// Parses a comma-separated task list ("ps:0, worker:1"); every task must be in `spec`.
// Duplicates are dropped.
absl::StatusOr<std::vector<TaskRef>> ParseTaskList(absl::string_view list, const ClusterSpec& spec);

}  // namespace trainscope
