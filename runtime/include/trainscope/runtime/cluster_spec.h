#pragma once
// The cluster spec, read from TF_CONFIG exactly as TensorFlow reads it:
//   {"cluster": {"ps": ["host:port", ...], "worker": [...]}, "task": {"type": "ps", "index": 0}}
// Parsing never throws: a bad spec is a one-line error that quotes the offending part.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace trainscope {

// A task's place in the cluster: its job ("ps", "worker", "chief", ...) and index.
struct TaskRef {
  std::string role;
  int index = 0;

  // "ps:1".
  std::string ShortName() const;
  // "/job:ps/replica:0/task:1", as TensorFlow names tasks in its logs.
  std::string FullName() const;
  auto operator<=>(const TaskRef&) const = default;
};

// Splits "host:port" (or "[v6]:port"); errors quote the text.
absl::Status ParseHostPort(absl::string_view address, std::string* host, int* port);

// The jobs of a cluster and their task addresses. Immutable once parsed; thread-compatible.
class ClusterSpec {
 public:
  ClusterSpec() = default;
  // Validates: non-empty jobs, well-formed host:port, no address listed twice.
  static absl::StatusOr<ClusterSpec> FromJobs(std::map<std::string, std::vector<std::string>> jobs);

  const std::map<std::string, std::vector<std::string>>& jobs() const { return jobs_; }
  int NumTasks(absl::string_view role) const;
  // The address of `task`, or an error naming it when the spec has no such task.
  absl::StatusOr<std::string> AddressOf(const TaskRef& task) const;
  // Every task, job by job in name order.
  std::vector<TaskRef> AllTasks() const;
  // Hex digest of jobs and addresses; equal specs have equal fingerprints.
  std::string Fingerprint() const;

 private:
  std::map<std::string, std::vector<std::string>> jobs_;
};

// How two specs differ, in words: "job 'worker' has 3 tasks in <a_name>'s spec
// [a, b, c] but 2 in <b_name>'s [a, b]". Empty when they are equal.
std::string DescribeSpecDifference(const ClusterSpec& a, absl::string_view a_name,
                                   const ClusterSpec& b, absl::string_view b_name);

// TF_CONFIG's content: the cluster and, when given, this process's task.
struct TfConfig {
  ClusterSpec cluster;
  std::optional<TaskRef> task;
};

// Parses TF_CONFIG JSON. With `require_task`, a missing or out-of-range "task" is an error.
absl::StatusOr<TfConfig> ParseTfConfig(absl::string_view json, bool require_task);

}  // namespace trainscope
