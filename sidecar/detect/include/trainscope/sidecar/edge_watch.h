#pragma once
// A value against its own past: the first half of every fail-slow verdict (the diagnosis adds
// the second, the gap against peers; docs/sidecar.md, "Slow, not dead").
//
// RaisedWatch takes one sample per heartbeat (a call latency, a step time) and keeps
// - the recent: the median of the samples of the last 10 s, so that a single slow sample, or a
//   burst shorter than 5 s, does not move it;
// - the usual: a slow mean (1 minute) of the recent, learned after a 10 s warm-up and only while
//   not raised, so that a lasting slowness is not learned as the norm;
// - since when the recent has been raised: above max(3x usual, usual + a floor).
// EdgeWatch keeps one per peer of a task, for its call latency to that peer.
// Not thread-safe (one per tracker).

#include <deque>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "trainscope/common/cluster_spec.h"
#include "trainscope/sidecar/task_view.h"

namespace trainscope::sidecar {

class RaisedWatch {
 public:
  static constexpr double kWindowS = 10;    // Of the recent median, and the warm-up.
  static constexpr double kUsualTauS = 60;  // Of the slow mean.
  static constexpr double kRaisedFactor = 3;

  // `floor_s`: how far above the usual the recent must also be to count as raised.
  explicit RaisedWatch(double floor_s) : floor_s_(floor_s) {}

  struct Reading {
    double recent = 0;
    double usual = 0;           // 0 while warming up.
    double raised_seconds = 0;  // 0 when not raised.
  };
  // One sample at monotonic `now_s`.
  Reading Observe(double now_s, double value);

 private:
  double floor_s_;
  std::deque<std::pair<double, double>> samples_;  // (time, value), the last kWindowS.
  double first_s_ = -1;
  double last_s_ = 0;
  double usual_ = 0;
  double raised_since_ = -1;
};

// A task's pace: the seconds per step over the last 10 s, from its step counter. The time of a
// step as the task measures it leaves out what happens between steps (a task throttled by its
// CPU quota waits there), so the pace is what is compared with peers.
class StepPace {
 public:
  static constexpr double kWindowS = 10;
  static constexpr double kMinSpanS = 2;
  // The pace at monotonic `now_s`, once the window spans kMinSpanS with steps made; nullopt
  // otherwise (starting, stalled). A counter that goes back (a restart) starts over.
  std::optional<double> Observe(double now_s, int64_t steps);

 private:
  std::deque<std::pair<double, int64_t>> samples_;
};

// A step time counts as raised once also this much above its usual.
inline constexpr double kStepRaisedMinS = 0.05;

class EdgeWatch {
 public:
  static constexpr double kRaisedMinS = 0.02;

  // Takes one heartbeat's peers, at monotonic `now_s`, and fills each one's
  // recent_latency_seconds, usual_latency_seconds and raised_seconds.
  void Observe(double now_s, std::vector<PeerInfo>& peers);

 private:
  std::map<TaskRef, RaisedWatch> edges_;
};

}  // namespace trainscope::sidecar
