#pragma once
// What a process's cgroup says about its limits and their effects: memory limit, usage and OOM
// kills, CPU quota and throttling, memory pressure (PSI), for cgroup v1 and v2. Pure readers
// over a /proc root and a cgroup root passed in (the real ones are /proc and /sys/fs/cgroup), so
// tests point them at a tree of their own. A file that is missing, unreadable or not understood
// leaves its fact absent; nothing here throws or crashes on bad input. Thread-safe (no state).

#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"

namespace trainscope {

inline constexpr char kProcRoot[] = "/proc";
inline constexpr char kCgroupRoot[] = "/sys/fs/cgroup";

// Where a process's memory and CPU controllers place it, from /proc/<pid>/cgroup.
struct CgroupPaths {
  // 1: the memory or cpu controller is on a v1 hierarchy (they win on a hybrid host); 2: only
  // the unified hierarchy (the `0::` line); 0: neither was found.
  int version = 0;
  // v1: the directory of the hierarchy under the cgroup root, named as the line's controllers
  // ("memory", "cpu,cpuacct"), and the cgroup's path in it ("/kubepods/pod1/c1"); "" when that
  // controller has no line. v2: both dirs are "" and both paths are the `0::` path.
  std::string memory_dir, memory_path;
  std::string cpu_dir, cpu_path;
  // The `0::` path, "" when none: the v2 cgroup, and on a v1 host with the unified hierarchy
  // mounted (cgroup root/unified) where per-cgroup PSI lives.
  std::string unified_path;
};

// Parses the text of /proc/<pid>/cgroup ("ID:CONTROLLERS:PATH" lines). Lines that are not of
// that form, and paths that are not absolute or that climb out of the root ("..", as a cgroup
// namespace shows a cgroup outside it), are ignored. A v2 path's " (deleted)" suffix is dropped.
CgroupPaths ParseProcCgroup(absl::string_view text);

// Reads and parses /proc/<pid>/cgroup under `proc_root`; nullopt when it cannot be read or names
// neither a memory nor a cpu cgroup.
std::optional<CgroupPaths> ReadProcessCgroups(int64_t pid, absl::string_view proc_root = kProcRoot);

// The facts of one moment. Each is absent when it could not be read or understood. A limit or
// quota of 0 means none ("max", -1, or v1's page-counter maximum).
struct CgroupFacts {
  int version = 0;  // As CgroupPaths::version; 0 when no fact could be read at all.
  // Memory: v1 memory.limit_in_bytes, usage_in_bytes, max_usage_in_bytes; v2 memory.max,
  // memory.current, memory.peak (kernels from 5.19).
  std::optional<int64_t> memory_limit_bytes;
  std::optional<int64_t> memory_usage_bytes;
  std::optional<int64_t> memory_peak_bytes;
  // inactive_file of memory.stat (v1 total_inactive_file): page cache the kernel reclaims before
  // it kills. Usage minus it is the working set, what nears the limit for real.
  std::optional<int64_t> memory_inactive_file_bytes;
  // v1 memory.failcnt: times usage hit the limit.
  std::optional<int64_t> memory_failcnt;
  // Processes the kernel's OOM killer killed in this cgroup: v1 memory.oom_control `oom_kill`
  // (kernels from 4.13), v2 memory.events `oom_kill`.
  std::optional<int64_t> oom_kills;
  // CPU: v1 cpu.cfs_quota_us / cpu.cfs_period_us, v2 cpu.max; cpu.stat.
  std::optional<double> cpu_quota_cores;
  std::optional<double> cpu_period_seconds;
  std::optional<int64_t> cpu_periods;            // nr_periods
  std::optional<int64_t> cpu_throttled_periods;  // nr_throttled
  std::optional<double> cpu_throttled_seconds;   // v1 throttled_time (ns), v2 throttled_usec
  // memory.pressure `some avg10`: the percentage (0-100) of the last 10 s in which some of the
  // cgroup's tasks stalled waiting for memory.
  std::optional<double> memory_pressure_some_avg10;

  // Usage minus inactive page cache (usage when the cache is not known); absent without usage.
  std::optional<int64_t> WorkingSetBytes() const;
};

// Reads the facts of the cgroups `paths` names under `cgroup_root`. A v1 hierarchy is looked
// for under its dir as named ("cpu,cpuacct"), then under the controller's own name ("cpu").
CgroupFacts ReadCgroupFacts(const CgroupPaths& paths, absl::string_view cgroup_root = kCgroupRoot);

// The parsers of single files, exposed for tests and fuzzing. Each returns nullopt unless the
// whole text is what the kernel writes (surrounding whitespace allowed).
// A byte count or "max" (0: no limit; so are -1 and values of 2^60 bytes or more).
std::optional<int64_t> ParseCgroupLimit(absl::string_view text);
// One non-negative integer.
std::optional<int64_t> ParseCgroupCount(absl::string_view text);
// The value of `key` in a flat keyed file ("key value" lines: cpu.stat, memory.events,
// memory.oom_control, memory.stat).
std::optional<int64_t> ParseKeyedCount(absl::string_view text, absl::string_view key);
// v2 cpu.max ("max 100000", "50000 100000"): the quota in cores (0: none) and the period.
struct CpuMax {
  double quota_cores = 0;
  double period_seconds = 0;
};
std::optional<CpuMax> ParseCpuMax(absl::string_view text);
// PSI (memory.pressure, /proc/pressure/memory): `avg10` of the `some` line.
std::optional<double> ParsePsiSomeAvg10(absl::string_view text);

}  // namespace trainscope
