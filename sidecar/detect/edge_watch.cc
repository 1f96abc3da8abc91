// EdgeWatch (edge_watch.h): each peer's recent call latency against its own past.
#include "trainscope/sidecar/edge_watch.h"

#include <algorithm>

namespace trainscope::sidecar {
namespace {

constexpr size_t kMaxSamples = 256;  // Heartbeats are at most a few a second.

double MedianOf(const std::deque<std::pair<double, double>>& samples) {
  std::vector<double> v;
  v.reserve(samples.size());
  for (const auto& [t, latency] : samples) v.push_back(latency);
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

}  // namespace

void EdgeWatch::Observe(double now_s, std::vector<PeerInfo>& peers) {
  for (PeerInfo& p : peers) {
    if (p.latency_seconds <= 0) continue;  // No call succeeded yet.
    auto [it, added] = edges_.try_emplace(p.peer);
    if (added) it->second.first_s = now_s;
    Update(now_s, it->second, p);
  }
  // A peer the task no longer reports is forgotten (the spec is bounded, so is this).
  if (edges_.size() > peers.size()) {
    std::erase_if(edges_, [&](const auto& e) {
      return std::none_of(peers.begin(), peers.end(),
                          [&](const PeerInfo& p) { return p.peer == e.first; });
    });
  }
}

void EdgeWatch::Update(double now_s, Edge& e, PeerInfo& p) {
  const double dt = e.samples.empty() ? 0 : std::max(0.0, now_s - e.last_s);
  e.last_s = now_s;
  e.samples.emplace_back(now_s, p.latency_seconds);
  while (e.samples.size() > kMaxSamples ||
         (e.samples.size() > 1 && e.samples.front().first < now_s - kWindowS)) {
    e.samples.pop_front();
  }
  const double recent = MedianOf(e.samples);
  p.recent_latency_seconds = recent;
  if (now_s - e.first_s < kWindowS) return;  // Warming up: no usual yet.
  if (e.usual <= 0) e.usual = recent;
  const bool raised = recent > std::max(kRaisedFactor * e.usual, e.usual + kRaisedMinS);
  if (raised) {
    if (e.raised_since <= 0) e.raised_since = now_s;
  } else {
    e.raised_since = 0;
    e.usual += (recent - e.usual) * std::min(1.0, dt / kUsualTauS);
  }
  p.usual_latency_seconds = e.usual;
  p.raised_seconds = e.raised_since > 0 ? now_s - e.raised_since : 0;
}

}  // namespace trainscope::sidecar
