#pragma once
// How a task's calls to each of its peers compare with their own past: the first half of a
// slow-link verdict (the diagnosis adds the second, the gap against the other edges of the same
// worker and the same ps; docs/sidecar.md, "Slow, not dead").
//
// Each heartbeat gives, per peer, the task's recent mean call latency. EdgeWatch keeps
// - the recent: the median of what the heartbeats said over the last 10 s, so that a single slow
//   call, or a burst of them shorter than 5 s, does not move it;
// - the usual: a slow mean (1 minute) of the recent, learned after a 10 s warm-up and only while
//   the edge is not raised, so that a slow link is not learned as the norm;
// - since when the recent has been raised: above max(3x usual, usual + 20 ms).
// Not thread-safe (one per tracker).

#include <deque>
#include <map>
#include <utility>
#include <vector>

#include "trainscope/common/cluster_spec.h"
#include "trainscope/sidecar/task_view.h"

namespace trainscope::sidecar {

class EdgeWatch {
 public:
  static constexpr double kWindowS = 10;    // Of the recent median, and the warm-up.
  static constexpr double kUsualTauS = 60;  // Of the slow mean.
  static constexpr double kRaisedFactor = 3;
  static constexpr double kRaisedMinS = 0.02;

  // Takes one heartbeat's peers, at monotonic `now_s`, and fills each one's
  // recent_latency_seconds, usual_latency_seconds and raised_seconds.
  void Observe(double now_s, std::vector<PeerInfo>& peers);

 private:
  struct Edge {
    std::deque<std::pair<double, double>> samples;  // (time, latency), the last kWindowS.
    double first_s = 0;                             // First sample.
    double last_s = 0;                              // Last sample.
    double usual = 0;                               // 0 while warming up.
    double raised_since = 0;                        // 0 when not raised.
  };
  void Update(double now_s, Edge& e, PeerInfo& p);

  std::map<TaskRef, Edge> edges_;
};

}  // namespace trainscope::sidecar
