// A node's own load (node_load.h).
#include "trainscope/sidecar/node_load.h"

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
// Above these a node is short of CPU or memory (NodeStrainWords).
constexpr double kStealShare = 0.10;
constexpr double kLoadPerCore = 1.5;
constexpr double kCpuPressureShare = 0.25;
constexpr double kMemoryPressureShare = 0.10;
constexpr double kSwapPagesPerSecond = 256;
// And, when other nodes are known, above this many times the median of theirs.
constexpr double kAboveOthers = 2;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

int Percent(double share) { return static_cast<int>(std::lround(share * 100)); }

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

void ToProto(const NodeLoad& l, v1::NodeLoad* out) {
  out->set_cores(l.cores);
  if (l.load_per_core) out->set_load_per_core(*l.load_per_core);
  if (l.cpu_steal_ratio) out->set_cpu_steal_ratio(*l.cpu_steal_ratio);
  if (l.cpu_pressure_ratio) out->set_cpu_pressure_ratio(*l.cpu_pressure_ratio);
  if (l.memory_pressure_ratio) out->set_memory_pressure_ratio(*l.memory_pressure_ratio);
  if (l.swap_pages_per_second) out->set_swap_pages_per_second(*l.swap_pages_per_second);
}

// Bounded on the way in: a record comes from another node.
NodeLoad FromProto(const v1::NodeLoad& in) {
  auto share = [](double x) -> std::optional<double> {
    if (!std::isfinite(x) || x < 0) return std::nullopt;
    return std::min(x, 1.0);
  };
  auto positive = [](double x) -> std::optional<double> {
    if (!std::isfinite(x) || x < 0) return std::nullopt;
    return std::min(x, 1e9);
  };
  NodeLoad l;
  l.cores = std::clamp(in.cores(), 0, 1 << 20);
  if (in.has_load_per_core()) l.load_per_core = positive(in.load_per_core());
  if (in.has_cpu_steal_ratio()) l.cpu_steal_ratio = share(in.cpu_steal_ratio());
  if (in.has_cpu_pressure_ratio()) l.cpu_pressure_ratio = share(in.cpu_pressure_ratio());
  if (in.has_memory_pressure_ratio()) l.memory_pressure_ratio = share(in.memory_pressure_ratio());
  if (in.has_swap_pages_per_second())
    l.swap_pages_per_second = positive(in.swap_pages_per_second());
  l.read = l.cores > 0 || l.load_per_core.has_value();
  return l;
}

NodeLoad SharedNodeLoad::Get(double now_s) {
  std::lock_guard lock(mu_);
  if (at_ < 0 || now_s - at_ >= 1.0) {
    last_ = watch_.Sample(now_s);
    at_ = now_s;
  }
  return last_;
}

namespace {

// One fact of a node's load: where it is, above what it strains the node, and its words.
struct Fact {
  std::optional<double> NodeLoad::*field;
  double threshold;
  std::string (*words)(const NodeLoad& l, double x);
};

const Fact kFacts[] = {
    {&NodeLoad::cpu_steal_ratio, kStealShare,
     [](const NodeLoad&, double x) { return absl::StrCat("CPU steal ", Percent(x), "%"); }},
    {&NodeLoad::cpu_pressure_ratio, kCpuPressureShare,
     [](const NodeLoad&, double x) { return absl::StrCat("CPU pressure ", Percent(x), "%"); }},
    {&NodeLoad::load_per_core, kLoadPerCore,
     [](const NodeLoad& l, double x) {
       return absl::StrCat("load ", absl::StrFormat("%.1f", x), " per core (", l.cores, " cores)");
     }},
    {&NodeLoad::memory_pressure_ratio, kMemoryPressureShare,
     [](const NodeLoad&, double x) { return absl::StrCat("memory pressure ", Percent(x), "%"); }},
    {&NodeLoad::swap_pages_per_second, kSwapPagesPerSecond,
     [](const NodeLoad&, double x) {
       return absl::StrCat("swapping ", std::lround(x), " pages/s");
     }},
};

// The median of a fact over `others`; nullopt when none of them has it.
std::optional<double> OthersMedian(const Fact& f, const std::vector<NodeLoad>& others) {
  std::vector<double> v;
  for (const NodeLoad& o : others) {
    if (o.*f.field) v.push_back(*(o.*f.field));
  }
  if (v.empty()) return std::nullopt;
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

}  // namespace

std::string NodeStrainWords(const NodeLoad& l, const std::vector<NodeLoad>& others) {
  std::vector<std::string> words;
  for (const Fact& f : kFacts) {
    const std::optional<double>& x = l.*f.field;
    if (!x || *x < f.threshold) continue;
    const std::optional<double> theirs = OthersMedian(f, others);
    if (theirs && *x < kAboveOthers * *theirs) continue;  // The whole machine room's, not its.
    words.push_back(f.words(l, *x));
  }
  return absl::StrJoin(words, ", ");
}

}  // namespace trainscope::sidecar
