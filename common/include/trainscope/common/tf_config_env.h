#pragma once
// TF_CONFIG found in another process's environment. In a Kubeflow TFJob the operator sets
// TF_CONFIG only in the `tensorflow` container; a sidecar container of the same pod (with
// shareProcessNamespace: true) reads it from that container's processes, as /proc shows them.

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace trainscope {

struct FoundTfConfig {
  std::string text;     // The variable's value.
  int pid = 0;          // The process it was read from (as `proc_root` numbers it).
  std::string command;  // Its /proc/PID/comm.
};

// The TF_CONFIG of the processes under `proc_root` (other than this one) whose environment this
// process can read: the one whose cluster spec all of them share. NotFound when none has one,
// saying how many processes were read; InvalidArgument when two hold different cluster specs,
// naming both pids. Each environment is read up to 1 MiB; unreadable ones are skipped.
absl::StatusOr<FoundTfConfig> FindTfConfigInProcesses(const std::string& proc_root = "/proc");

// The value of TF_CONFIG in a process's environment as /proc/PID/environ gives it (NUL-separated
// NAME=VALUE entries); "" when absent.
std::string TfConfigInEnviron(const std::string& environ);

}  // namespace trainscope
