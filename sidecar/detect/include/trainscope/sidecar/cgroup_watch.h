#pragma once
// What the cgroup of one local task's process says over time (common/cgroup.h): sampled at a
// bounded rate while the process lives, its cgroup paths remembered, and read once more when it
// is gone (a v1 cgroup's files outlive its last process for a while) to tell whether the kernel's
// OOM killer killed it. From the samples: sustained CPU throttling by its quota, and how near its
// memory limit it runs. Time is injected, so tests feed synthetic histories.

#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <string>

#include "trainscope/common/cgroup.h"
#include "trainscope/sidecar/task_view.h"

namespace trainscope::sidecar {

// How the cgroup of a process is read. The real one reads /proc and /sys/fs/cgroup
// (RealCgroupReader); an empty one reads nothing (no cgroup facts at all).
struct CgroupReader {
  std::function<std::optional<CgroupPaths>(int64_t pid)> paths;
  std::function<CgroupFacts(const CgroupPaths& paths)> facts;
  explicit operator bool() const { return paths && facts; }
};
CgroupReader RealCgroupReader();

struct CgroupWatchOptions {
  double sample_every_s = 1;  // At most one reading per task per this while it lives.
  // Throttling is a verdict when, over the last `throttle_window_s` (sampled across at least 80%
  // of it), the cgroup was throttled in at least `throttle_slow_share` of all the CFS periods of
  // that time. Half of 10 s: for at least 5 s the task had work and no CPU left in its quota, so
  // its pace is the quota's; a burst of a second or two (start-up, a checkpoint) stays below it.
  // (The Kubernetes mixin's CPUThrottlingHigh warns from 25% of the periods the cgroup ran in,
  // over 5 min; a state that blames the task asks for more.)
  double throttle_window_s = 10;
  double throttle_slow_share = kThrottledSlowShare;
  // The working set (usage without inactive page cache, which the kernel reclaims before it
  // kills) from this share of the limit is worth a warning.
  double memory_warn_share = 0.9;
};

// Not thread-safe: owned by its task's tracker, on the poll thread.
class CgroupWatch {
 public:
  explicit CgroupWatch(CgroupWatchOptions options = {}) : options_(options) {}

  // Reads the cgroup of process `pid` when a reading is due: while it lives (`gone` false), at
  // most every sample_every_s (its paths read again from /proc each time); the first time it is
  // `gone`, once at once, from the paths remembered. Another pid starts afresh.
  void Observe(double now_s, int64_t pid, bool gone, const CgroupReader& reader);

  // "OOM-killed by its container's memory limit (256 MiB; usage was 255 MiB)" when the process
  // is gone and its memory cgroup's OOM kill counter rose since it was last seen alive (since the
  // reading before the last one alive, so that a reading taken between the kill and the exit
  // does not hide it); nullopt otherwise.
  std::optional<std::string> OomKilledWords() const;
  // "CPU-throttled 61% of the last 10 s by its quota (0.5 core)" while throttling is a verdict
  // (CgroupWatchOptions); nullopt otherwise.
  std::optional<std::string> ThrottledWords() const;
  // "near its memory limit: 92% of 256 MiB" from memory_warn_share; nullopt otherwise.
  std::optional<std::string> MemoryWarning() const;
  // The last reading, for the API, the page and the metrics.
  const TaskCgroup& view() const { return view_; }

 private:
  struct Sample {
    double t;
    int64_t throttled_periods;
  };
  void Read(double now_s, bool alive, const CgroupReader& reader);
  // The share of the window's CFS periods throttled, once the window is sampled.
  std::optional<double> ThrottledShare() const;

  CgroupWatchOptions options_;
  int64_t pid_ = 0;
  std::optional<CgroupPaths> paths_;  // Remembered while the process lives.
  std::optional<CgroupFacts> last_;
  double last_read_s_ = -1;
  bool gone_read_ = false;
  // The OOM kill counter at the last two readings while alive (older first).
  std::optional<int64_t> alive_oom_kills_[2];
  std::deque<Sample> samples_;  // While alive, within the throttle window.
  TaskCgroup view_;
};

}  // namespace trainscope::sidecar
