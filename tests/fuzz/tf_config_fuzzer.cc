// libFuzzer target: TF_CONFIG and cluster-spec parsing (common/cluster_spec.cc), the one reader
// the runtime and the sidecar share. The input is the TF_CONFIG text; what parses is then used
// the way the binaries use it (task names, addresses, fingerprints, task lists, differences).
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "trainscope/common/cluster_spec.h"

namespace {

using trainscope::ClusterSpec;
using trainscope::TaskRef;

// A broken invariant must crash loudly, not pass unnoticed.
void Check(bool ok) {
  if (!ok) __builtin_trap();
}

void UseSpec(const ClusterSpec& spec, absl::string_view text) {
  for (const TaskRef& task : spec.AllTasks()) {
    Check(spec.FindAddress(task) != nullptr);
    Check(trainscope::ParseHostPort(*spec.FindAddress(task)).ok());
    auto parsed = trainscope::ParseTaskRef(task.ShortName());
    Check(parsed.ok() && *parsed == task);
    (void)task.FullName();
  }
  Check(spec.Fingerprint() == spec.Fingerprint());
  Check(trainscope::DescribeSpecDifference(spec, "a", spec, "b").empty());
  // The same bytes as a task list ("--tasks ps:0,worker:1") against this spec.
  (void)trainscope::ParseTaskList(text, spec);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  for (bool require_task : {false, true}) {
    auto config = trainscope::ParseTfConfig(text, require_task);
    if (!config.ok()) continue;
    UseSpec(config->cluster, text);
    if (config->task) Check(config->cluster.AddressOf(*config->task).ok());
  }
  // The smaller parsers, on the raw text too (flags and spec entries reach them directly).
  (void)trainscope::ParseTaskRef(text);
  if (auto hp = trainscope::ParseHostPort(text); hp.ok()) Check(hp->port >= 1 && hp->port <= 65535);
  (void)trainscope::IsValidJobName(text);
  return 0;
}
