// libFuzzer target: the cgroup readers' parsers (common/cgroup.cc), over text a process cannot
// choose but a kernel, a container runtime or a broken mount might write. The input is read as
// /proc/PID/cgroup and as every cgroup file the sidecar parses; what parses must hold the
// readers' invariants (paths absolute and under the root, counts non-negative, ratios bounded).
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/string_view.h"
#include "trainscope/common/cgroup.h"

namespace {

// A broken invariant must crash loudly, not pass unnoticed.
void Check(bool ok) {
  if (!ok) __builtin_trap();
}

void CheckPath(const std::string& path) {
  if (path.empty()) return;
  Check(path[0] == '/');
  Check(!absl::StrContains(path, "/../") && !absl::EndsWith(path, "/.."));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  const trainscope::CgroupPaths paths = trainscope::ParseProcCgroup(text);
  Check(paths.version >= 0 && paths.version <= 2);
  for (const std::string* p : {&paths.memory_path, &paths.cpu_path, &paths.unified_path}) {
    CheckPath(*p);
  }
  if (auto v = trainscope::ParseCgroupLimit(text)) Check(*v >= 0);
  if (auto v = trainscope::ParseCgroupCount(text)) Check(*v >= 0);
  for (absl::string_view key : {"oom_kill", "nr_throttled", "total_inactive_file"}) {
    if (auto v = trainscope::ParseKeyedCount(text, key)) Check(*v >= 0);
  }
  if (auto max = trainscope::ParseCpuMax(text)) {
    Check(max->quota_cores >= 0 && max->period_seconds > 0);
  }
  if (auto psi = trainscope::ParsePsiSomeAvg10(text)) Check(*psi >= 0 && *psi <= 100);
  return 0;
}
