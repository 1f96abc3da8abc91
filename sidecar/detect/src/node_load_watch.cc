// A node's own load (node_load.h).
#include "trainscope/sidecar/node_load_watch.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "trainscope/common/cgroup.h"
#include "trainscope/sidecar/v1/sidecar.pb.h"

namespace trainscope::sidecar {
namespace {

constexpr double kWindowS = 10;
std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// PSI `some avg10` (/proc/pressure/*) as a share, 0-1.
std::optional<double> PressureShare(const std::string& text) {
  auto percent = ParsePsiSomeAvg10(text);
  if (!percent) return std::nullopt;
  return *percent / 100;
}

}  // namespace

std::optional<CpuTicks> ParseProcStatCpu(absl::string_view stat) {
  for (absl::string_view line : absl::StrSplit(stat, '\n')) {
    if (!absl::ConsumePrefix(&line, "cpu ")) continue;
    std::vector<double> fields;
    for (absl::string_view f : absl::StrSplit(line, ' ', absl::SkipEmpty())) {
      double x = 0;
      if (!absl::SimpleAtod(f, &x) || x < 0) return std::nullopt;
      fields.push_back(x);
    }
    if (fields.size() < 8) return std::nullopt;  // user .. steal
    CpuTicks t;
    for (size_t i = 0; i < fields.size() && i < 8; ++i) t.total += fields[i];  // Not guest.
    t.steal = fields[7];
    return t;
  }
  return std::nullopt;
}

int ParseProcStatCores(absl::string_view stat) {
  int cores = 0;
  for (absl::string_view line : absl::StrSplit(stat, '\n')) {
    if (line.size() > 3 && absl::StartsWith(line, "cpu") && line[3] >= '0' && line[3] <= '9') {
      ++cores;
    }
  }
  return cores;
}

std::optional<double> ParseLoadAverage(absl::string_view loadavg) {
  std::vector<absl::string_view> f = absl::StrSplit(loadavg, ' ', absl::SkipEmpty());
  double x = 0;
  if (f.empty() || !absl::SimpleAtod(f[0], &x) || x < 0 || !std::isfinite(x)) return std::nullopt;
  return x;
}

std::optional<double> ParseVmstatSwapPages(absl::string_view vmstat) {
  std::optional<double> in, out;
  for (absl::string_view line : absl::StrSplit(vmstat, '\n')) {
    std::vector<absl::string_view> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
    double x = 0;
    if (f.size() != 2 || !absl::SimpleAtod(f[1], &x) || x < 0) continue;
    if (f[0] == "pswpin") in = x;
    if (f[0] == "pswpout") out = x;
  }
  if (!in || !out) return std::nullopt;
  return *in + *out;
}

NodeLoad NodeLoadWatch::Sample(double now_s) {
  const std::string stat = ReadAll(proc_ + "/stat");
  Counters c{now_s, ParseProcStatCpu(stat), ParseVmstatSwapPages(ReadAll(proc_ + "/vmstat"))};
  NodeLoad load;
  load.cores = ParseProcStatCores(stat);
  if (auto avg = ParseLoadAverage(ReadAll(proc_ + "/loadavg")); avg && load.cores > 0) {
    load.load_per_core = *avg / load.cores;
  }
  load.cpu_pressure_ratio = PressureShare(ReadAll(proc_ + "/pressure/cpu"));
  load.memory_pressure_ratio = PressureShare(ReadAll(proc_ + "/pressure/memory"));
  while (past_.size() > 1 && now_s - past_[1].at >= kWindowS) past_.pop_front();
  if (!past_.empty()) {
    const Counters& old = past_.front();
    if (c.cpu && old.cpu && c.cpu->total > old.cpu->total) {
      load.cpu_steal_ratio =
          std::max(0.0, c.cpu->steal - old.cpu->steal) / (c.cpu->total - old.cpu->total);
    }
    if (c.swap_pages && old.swap_pages && now_s > old.at) {
      load.swap_pages_per_second =
          std::max(0.0, *c.swap_pages - *old.swap_pages) / (now_s - old.at);
    }
  }
  past_.push_back(c);
  load.read = c.cpu.has_value() || load.load_per_core.has_value();
  return load;
}

NodeLoad SharedNodeLoad::Get(double now_s) {
  std::lock_guard lock(mu_);
  if (at_ < 0 || now_s - at_ >= 1.0) {
    last_ = watch_.Sample(now_s);
    at_ = now_s;
  }
  return last_;
}

}  // namespace trainscope::sidecar
