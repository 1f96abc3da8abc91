// The node record's load as a value: its wire form and the words of a strained node.
#include "trainscope/sidecar/node_load.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "trainscope/sidecar/v1/sidecar.pb.h"

namespace trainscope::sidecar {
namespace {

// Above these a node is short of CPU or memory (NodeStrainWords).
constexpr double kStealShare = 0.10;
constexpr double kLoadPerCore = 1.5;
constexpr double kCpuPressureShare = 0.25;
constexpr double kMemoryPressureShare = 0.10;
constexpr double kSwapPagesPerSecond = 256;
// And, when other nodes are known, above this many times the median of theirs.
constexpr double kAboveOthers = 2;

int Percent(double share) { return static_cast<int>(std::lround(share * 100)); }

}  // namespace

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
