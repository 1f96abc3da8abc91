// Cgroup v1 and v2 readers; see cgroup.h.
#include "trainscope/common/cgroup.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace trainscope {
namespace {

// Every cgroup file read is cut here: the largest (memory.stat) holds about 2 KiB.
constexpr size_t kMaxFileBytes = 64 << 10;
// v1 writes PAGE_COUNTER_MAX pages (about 2^63 bytes) for "no limit"; no machine has 2^60.
constexpr int64_t kNoLimitFrom = int64_t{1} << 60;

// The whole file (at most kMaxFileBytes), or nullopt when it cannot be opened or read.
std::optional<std::string> ReadSmallFile(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::string out;
  char buf[4096];
  bool ok = true;
  while (out.size() < kMaxFileBytes) {
    const ssize_t got = read(fd, buf, sizeof(buf));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) ok = false;
    if (got <= 0) break;
    out.append(buf, std::min(static_cast<size_t>(got), kMaxFileBytes - out.size()));
  }
  close(fd);
  if (!ok) return std::nullopt;
  return out;
}

bool IsDirectory(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// An absolute path that stays under its root: no "..", ".", empty name in the middle, or NUL.
bool IsSafeCgroupPath(absl::string_view path) {
  if (path.empty() || path[0] != '/' || path.find('\0') != absl::string_view::npos) return false;
  if (path == "/") return true;
  for (absl::string_view part : absl::StrSplit(path.substr(1), '/')) {
    if (part.empty() || part == "." || part == "..") return false;
  }
  return true;
}

// The directory of a v1 hierarchy holding `controller` ("memory", "cpu"): named as the line
// lists its controllers, else as the controller alone; "" when neither exists.
std::string V1Directory(absl::string_view root, const std::string& dir, const std::string& path,
                        absl::string_view controller) {
  if (dir.empty()) return "";
  for (absl::string_view name : {absl::string_view(dir), controller}) {
    std::string full = absl::StrCat(root, "/", name, path == "/" ? "" : path);
    if (IsDirectory(full)) return full;
  }
  return "";
}

std::optional<std::string> ReadIn(const std::string& dir, absl::string_view file) {
  if (dir.empty()) return std::nullopt;
  return ReadSmallFile(absl::StrCat(dir, "/", file));
}

template <typename T, typename Parse>
std::optional<T> ReadWith(const std::string& dir, absl::string_view file, Parse parse) {
  std::optional<std::string> text = ReadIn(dir, file);
  if (!text) return std::nullopt;
  return parse(*text);
}

void ReadV1Memory(const std::string& dir, CgroupFacts* f) {
  f->memory_limit_bytes = ReadWith<int64_t>(dir, "memory.limit_in_bytes", ParseCgroupLimit);
  f->memory_usage_bytes = ReadWith<int64_t>(dir, "memory.usage_in_bytes", ParseCgroupCount);
  f->memory_peak_bytes = ReadWith<int64_t>(dir, "memory.max_usage_in_bytes", ParseCgroupCount);
  f->memory_failcnt = ReadWith<int64_t>(dir, "memory.failcnt", ParseCgroupCount);
  f->oom_kills = ReadWith<int64_t>(dir, "memory.oom_control", [](absl::string_view t) {
    return ParseKeyedCount(t, "oom_kill");
  });
  f->memory_inactive_file_bytes = ReadWith<int64_t>(dir, "memory.stat", [](absl::string_view t) {
    return ParseKeyedCount(t, "total_inactive_file");
  });
}

void ReadV2Memory(const std::string& dir, CgroupFacts* f) {
  f->memory_limit_bytes = ReadWith<int64_t>(dir, "memory.max", ParseCgroupLimit);
  f->memory_usage_bytes = ReadWith<int64_t>(dir, "memory.current", ParseCgroupCount);
  f->memory_peak_bytes = ReadWith<int64_t>(dir, "memory.peak", ParseCgroupCount);
  f->oom_kills = ReadWith<int64_t>(
      dir, "memory.events", [](absl::string_view t) { return ParseKeyedCount(t, "oom_kill"); });
  f->memory_inactive_file_bytes = ReadWith<int64_t>(
      dir, "memory.stat", [](absl::string_view t) { return ParseKeyedCount(t, "inactive_file"); });
}

// cpu.stat, whose names are the same in v1 and v2 but for the throttled time's unit.
void ReadCpuStat(const std::string& dir, int version, CgroupFacts* f) {
  std::optional<std::string> stat = ReadIn(dir, "cpu.stat");
  if (!stat) return;
  f->cpu_periods = ParseKeyedCount(*stat, "nr_periods");
  f->cpu_throttled_periods = ParseKeyedCount(*stat, "nr_throttled");
  if (version == 1) {
    if (auto ns = ParseKeyedCount(*stat, "throttled_time")) f->cpu_throttled_seconds = *ns / 1e9;
  } else if (auto us = ParseKeyedCount(*stat, "throttled_usec")) {
    f->cpu_throttled_seconds = *us / 1e6;
  }
}

void ReadV1Cpu(const std::string& dir, CgroupFacts* f) {
  std::optional<std::string> quota = ReadIn(dir, "cpu.cfs_quota_us");
  std::optional<int64_t> period = ReadWith<int64_t>(dir, "cpu.cfs_period_us", ParseCgroupCount);
  if (period && *period > 0) {
    f->cpu_period_seconds = *period / 1e6;
    int64_t q = 0;
    if (quota && absl::SimpleAtoi(absl::StripAsciiWhitespace(*quota), &q)) {
      f->cpu_quota_cores = q <= 0 ? 0.0 : static_cast<double>(q) / static_cast<double>(*period);
    }
  }
  ReadCpuStat(dir, 1, f);
}

void ReadV2Cpu(const std::string& dir, CgroupFacts* f) {
  if (auto max = ReadWith<CpuMax>(dir, "cpu.max", ParseCpuMax)) {
    f->cpu_quota_cores = max->quota_cores;
    f->cpu_period_seconds = max->period_seconds;
  }
  ReadCpuStat(dir, 2, f);
}

bool AnyFact(const CgroupFacts& f) {
  return f.memory_limit_bytes || f.memory_usage_bytes || f.oom_kills || f.cpu_quota_cores ||
         f.cpu_periods || f.memory_pressure_some_avg10;
}

}  // namespace

CgroupPaths ParseProcCgroup(absl::string_view text) {
  CgroupPaths out;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    std::vector<absl::string_view> f = absl::StrSplit(line, absl::MaxSplits(':', 2));
    if (f.size() != 3 || f[0].empty()) continue;
    absl::string_view path = f[2];
    absl::ConsumeSuffix(&path, " (deleted)");
    if (!IsSafeCgroupPath(path)) continue;
    if (f[0] == "0" && f[1].empty()) {
      out.unified_path = std::string(path);
      continue;
    }
    for (absl::string_view c : absl::StrSplit(f[1], ',')) {
      if (c == "memory") {
        out.memory_dir = std::string(f[1]);
        out.memory_path = std::string(path);
      } else if (c == "cpu") {
        out.cpu_dir = std::string(f[1]);
        out.cpu_path = std::string(path);
      }
    }
  }
  if (!out.memory_dir.empty() || !out.cpu_dir.empty()) {
    out.version = 1;
  } else if (!out.unified_path.empty()) {
    out.version = 2;
    out.memory_path = out.cpu_path = out.unified_path;
  }
  return out;
}

std::optional<CgroupPaths> ReadProcessCgroups(int64_t pid, absl::string_view proc_root) {
  if (pid <= 0) return std::nullopt;
  std::optional<std::string> text = ReadSmallFile(absl::StrCat(proc_root, "/", pid, "/cgroup"));
  if (!text) return std::nullopt;
  CgroupPaths paths = ParseProcCgroup(*text);
  if (paths.version == 0) return std::nullopt;
  return paths;
}

std::optional<int64_t> CgroupFacts::WorkingSetBytes() const {
  if (!memory_usage_bytes) return std::nullopt;
  const int64_t cache = memory_inactive_file_bytes.value_or(0);
  return std::max<int64_t>(0, *memory_usage_bytes - std::min(cache, *memory_usage_bytes));
}

CgroupFacts ReadCgroupFacts(const CgroupPaths& paths, absl::string_view cgroup_root) {
  CgroupFacts f;
  const auto in_root = [&](absl::string_view sub, const std::string& path) {
    std::string dir =
        absl::StrCat(cgroup_root, sub.empty() ? "" : "/", sub, path == "/" ? "" : path);
    return IsDirectory(dir) ? dir : "";
  };
  std::string pressure_dir;
  if (paths.version == 1) {
    ReadV1Memory(V1Directory(cgroup_root, paths.memory_dir, paths.memory_path, "memory"), &f);
    ReadV1Cpu(V1Directory(cgroup_root, paths.cpu_dir, paths.cpu_path, "cpu"), &f);
    if (!paths.unified_path.empty()) pressure_dir = in_root("unified", paths.unified_path);
  } else if (paths.version == 2) {
    pressure_dir = in_root("", paths.unified_path);
    ReadV2Memory(pressure_dir, &f);
    ReadV2Cpu(pressure_dir, &f);
  }
  f.memory_pressure_some_avg10 =
      ReadWith<double>(pressure_dir, "memory.pressure", ParsePsiSomeAvg10);
  if (AnyFact(f)) f.version = paths.version;
  return f;
}

std::optional<int64_t> ParseCgroupLimit(absl::string_view text) {
  text = absl::StripAsciiWhitespace(text);
  if (text == "max") return 0;
  int64_t v = 0;
  if (!absl::SimpleAtoi(text, &v) || v < -1) return std::nullopt;
  if (v == -1 || v >= kNoLimitFrom) return 0;
  return v;
}

std::optional<int64_t> ParseCgroupCount(absl::string_view text) {
  int64_t v = 0;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(text), &v) || v < 0) return std::nullopt;
  return v;
}

std::optional<int64_t> ParseKeyedCount(absl::string_view text, absl::string_view key) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    std::vector<absl::string_view> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (f.size() == 2 && f[0] == key) return ParseCgroupCount(f[1]);
  }
  return std::nullopt;
}

std::optional<CpuMax> ParseCpuMax(absl::string_view text) {
  std::vector<absl::string_view> f =
      absl::StrSplit(absl::StripAsciiWhitespace(text), ' ', absl::SkipEmpty());
  int64_t period = 0;
  if (f.size() != 2 || !absl::SimpleAtoi(f[1], &period) || period <= 0) return std::nullopt;
  CpuMax out;
  out.period_seconds = period / 1e6;
  if (f[0] == "max") return out;
  int64_t quota = 0;
  if (!absl::SimpleAtoi(f[0], &quota) || quota <= 0) return std::nullopt;
  out.quota_cores = static_cast<double>(quota) / static_cast<double>(period);
  return out;
}

std::optional<double> ParsePsiSomeAvg10(absl::string_view text) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (!absl::ConsumePrefix(&line, "some ")) continue;
    for (absl::string_view field : absl::StrSplit(line, ' ', absl::SkipEmpty())) {
      double v = 0;
      if (absl::ConsumePrefix(&field, "avg10=") && absl::SimpleAtod(field, &v) && v >= 0 &&
          v <= 100) {
        return v;
      }
    }
    return std::nullopt;
  }
  return std::nullopt;
}

}  // namespace trainscope
