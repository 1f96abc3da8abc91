// A task's cgroup over time; see cgroup_watch.h.
#include "trainscope/sidecar/cgroup_watch.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "trainscope/common/clock.h"

namespace trainscope::sidecar {
namespace {

// "256 MiB", "1.5 GiB": whole units from 10 up, as people write limits.
std::string Bytes(int64_t bytes) {
  constexpr double kMiB = 1024.0 * 1024;
  const double mib = static_cast<double>(bytes) / kMiB;
  if (mib >= 10 && mib < 10240) return absl::StrFormat("%.0f MiB", mib);
  return HumanBytes(bytes);
}

// "0.5 core", "2 cores".
std::string Cores(double cores) {
  return absl::StrCat(absl::StrFormat("%.3g", cores), cores > 1 ? " cores" : " core");
}

TaskCgroup ToView(const CgroupFacts& f) {
  TaskCgroup v;
  v.version = f.version;
  v.memory_limit_bytes = f.memory_limit_bytes;
  v.memory_usage_bytes = f.memory_usage_bytes;
  v.memory_working_set_bytes = f.WorkingSetBytes();
  v.oom_kills = f.oom_kills;
  v.cpu_quota_cores = f.cpu_quota_cores;
  v.cpu_periods = f.cpu_periods;
  v.cpu_throttled_periods = f.cpu_throttled_periods;
  v.cpu_throttled_seconds = f.cpu_throttled_seconds;
  if (f.memory_pressure_some_avg10) v.memory_pressure_ratio = *f.memory_pressure_some_avg10 / 100;
  return v;
}

}  // namespace

CgroupReader RealCgroupReader() {
  return {[](int64_t pid) { return ReadProcessCgroups(pid); },
          [](const CgroupPaths& paths) { return ReadCgroupFacts(paths); }};
}

void CgroupWatch::Observe(double now_s, int64_t pid, bool gone, const CgroupReader& reader) {
  if (!reader || pid <= 0) return;
  if (pid != pid_) *this = CgroupWatch(options_);
  pid_ = pid;
  if (gone) {
    if (!gone_read_) Read(now_s, /*alive=*/false, reader);
    gone_read_ = true;
    return;
  }
  gone_read_ = false;  // Dead was a passing verdict (its server refused, then answered again).
  view_.oom_killed = false;
  if (last_read_s_ < 0 || now_s - last_read_s_ >= options_.sample_every_s) {
    Read(now_s, /*alive=*/true, reader);
  }
}

void CgroupWatch::Read(double now_s, bool alive, const CgroupReader& reader) {
  last_read_s_ = now_s;
  if (alive) {
    // Read again each time: a process may be moved to another cgroup.
    if (std::optional<CgroupPaths> p = reader.paths(pid_)) paths_ = std::move(p);
  }
  if (!paths_) return;
  CgroupFacts f = reader.facts(*paths_);
  if (f.version == 0) return;  // The cgroup is gone too: keep what was last read.
  if (alive) {
    alive_oom_kills_[0] = alive_oom_kills_[1];
    alive_oom_kills_[1] = f.oom_kills;
    if (f.cpu_throttled_periods) {
      // A counter that went back is another cgroup: its history says nothing of this one.
      if (!samples_.empty() && *f.cpu_throttled_periods < samples_.back().throttled_periods) {
        samples_.clear();
      }
      samples_.push_back({now_s, *f.cpu_throttled_periods});
    }
    while (samples_.size() > 1 &&
           samples_.front().t < now_s - options_.throttle_window_s - options_.sample_every_s / 2) {
      samples_.pop_front();
    }
  }
  // The usage at death: its peak where the kernel keeps one, else its last usage alive.
  if (!alive && !f.memory_peak_bytes && last_) f.memory_usage_bytes = last_->memory_usage_bytes;
  last_ = f;
  const std::optional<int64_t> before =
      alive_oom_kills_[0] ? alive_oom_kills_[0] : alive_oom_kills_[1];
  const bool oom_killed = !alive && f.oom_kills && before && *f.oom_kills > *before;
  view_ = ToView(f);
  view_.cpu_throttled_ratio = ThrottledShare();
  view_.oom_killed = oom_killed;
}

std::optional<double> CgroupWatch::ThrottledShare() const {
  if (samples_.size() < 2 || !last_ || !last_->cpu_period_seconds) return std::nullopt;
  const Sample& first = samples_.front();
  const Sample& last = samples_.back();
  const double span = last.t - first.t;
  if (span < 0.8 * options_.throttle_window_s || *last_->cpu_period_seconds <= 0) {
    return std::nullopt;
  }
  const double periods = span / *last_->cpu_period_seconds;
  const double throttled = static_cast<double>(last.throttled_periods - first.throttled_periods);
  return std::clamp(throttled / periods, 0.0, 1.0);
}

std::optional<std::string> CgroupWatch::OomKilledWords() const {
  if (!view_.oom_killed || !last_) return std::nullopt;
  const std::optional<int64_t> usage =
      last_->memory_peak_bytes ? last_->memory_peak_bytes : last_->memory_usage_bytes;
  const std::string usage_words = usage ? absl::StrCat("usage was ", Bytes(*usage)) : "";
  const int64_t limit = last_->memory_limit_bytes.value_or(0);
  if (limit > 0) {
    return absl::StrCat("OOM-killed by its container's memory limit (", Bytes(limit),
                        usage ? "; " : "", usage_words, ")");
  }
  return absl::StrCat(
      "OOM-killed by the kernel in its memory cgroup (no limit of its own: one above it, or the "
      "machine's memory, ran out",
      usage ? "; " : "", usage_words, ")");
}

std::optional<std::string> CgroupWatch::ThrottledWords() const {
  const std::optional<double> share = view_.cpu_throttled_ratio;
  if (!share || *share < options_.throttle_slow_share || !last_ || !last_->cpu_quota_cores ||
      *last_->cpu_quota_cores <= 0) {
    return std::nullopt;
  }
  return absl::StrCat("CPU-throttled ", static_cast<int>(std::lround(*share * 100)),
                      "% of the last ", HumanDuration(options_.throttle_window_s),
                      " by its quota (", Cores(*last_->cpu_quota_cores), ")");
}

std::optional<std::string> CgroupWatch::MemoryWarning() const {
  const std::optional<int64_t> limit = view_.memory_limit_bytes;
  const std::optional<int64_t> used = view_.memory_working_set_bytes;
  if (!limit || *limit <= 0 || !used) return std::nullopt;
  const double share = static_cast<double>(*used) / static_cast<double>(*limit);
  if (share < options_.memory_warn_share) return std::nullopt;
  return absl::StrCat("near its memory limit: ", static_cast<int>(share * 100), "% of ",
                      Bytes(*limit));
}

}  // namespace trainscope::sidecar
