// RaisedWatch and EdgeWatch (edge_watch.h): values against their own past.
#include "trainscope/sidecar/edge_watch.h"

#include <algorithm>

namespace trainscope::sidecar {
namespace {

constexpr size_t kMaxSamples = 256;  // Heartbeats are at most a few a second.

double MedianOf(const std::deque<std::pair<double, double>>& samples) {
  std::vector<double> v;
  v.reserve(samples.size());
  for (const auto& [t, value] : samples) v.push_back(value);
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

}  // namespace

RaisedWatch::Reading RaisedWatch::Observe(double now_s, double value) {
  const double dt = samples_.empty() ? 0 : std::max(0.0, now_s - last_s_);
  if (first_s_ < 0) first_s_ = now_s;
  last_s_ = now_s;
  samples_.emplace_back(now_s, value);
  while (samples_.size() > kMaxSamples ||
         (samples_.size() > 1 && samples_.front().first < now_s - kWindowS)) {
    samples_.pop_front();
  }
  Reading r;
  r.recent = MedianOf(samples_);
  if (now_s - first_s_ < kWindowS) return r;  // Warming up: no usual yet.
  if (usual_ <= 0) usual_ = r.recent;
  if (r.recent > std::max(kRaisedFactor * usual_, usual_ + floor_s_)) {
    if (raised_since_ < 0) raised_since_ = now_s;
  } else {
    raised_since_ = -1;
    usual_ += (r.recent - usual_) * std::min(1.0, dt / kUsualTauS);
  }
  r.usual = usual_;
  r.raised_seconds = raised_since_ < 0 ? 0 : now_s - raised_since_;
  return r;
}

std::optional<double> StepPace::Observe(double now_s, int64_t steps) {
  if (!samples_.empty() && steps < samples_.back().second) samples_.clear();
  samples_.emplace_back(now_s, steps);
  while (samples_.size() > kMaxSamples ||
         (samples_.size() > 2 && samples_[1].first <= now_s - kWindowS)) {
    samples_.pop_front();
  }
  const double span = now_s - samples_.front().first;
  const int64_t made = steps - samples_.front().second;
  if (span < kMinSpanS || made <= 0) return std::nullopt;
  return span / static_cast<double>(made);
}

void EdgeWatch::Observe(double now_s, std::vector<PeerInfo>& peers) {
  for (PeerInfo& p : peers) {
    if (p.latency_seconds <= 0) continue;  // No call succeeded yet.
    auto it = edges_.try_emplace(p.peer, kRaisedMinS).first;
    const RaisedWatch::Reading r = it->second.Observe(now_s, p.latency_seconds);
    p.recent_latency_seconds = r.recent;
    p.usual_latency_seconds = r.usual;
    p.raised_seconds = r.raised_seconds;
  }
  // A peer the task no longer reports is forgotten (the spec is bounded, so is this).
  if (edges_.size() > peers.size()) {
    std::erase_if(edges_, [&](const auto& e) {
      return std::none_of(peers.begin(), peers.end(),
                          [&](const PeerInfo& p) { return p.peer == e.first; });
    });
  }
}

}  // namespace trainscope::sidecar
