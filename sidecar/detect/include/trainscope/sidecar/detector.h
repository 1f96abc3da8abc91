#pragma once
// The phi-accrual failure detector (Hayashibara et al., 2004) over the gaps between a task's
// heartbeat answers: phi = -log10(P(a gap at least this long)), with the gap distribution
// learned from the task's own recent history. Time is injected (seconds on any monotonic clock).

#include <cstddef>
#include <deque>
#include <optional>

namespace trainscope::sidecar {

struct PhiAccrualOptions {
  // Number of recent gaps remembered.
  size_t window = 200;
  // Floor on the learned standard deviation: a perfectly regular task must not become suspect
  // a few milliseconds after a missed beat.
  double min_stddev_s = 0.05;
  // The expected gap before any history exists (the poll interval).
  double first_gap_s = 0.1;
};

// Not thread-safe: one owner (the poll loop).
class PhiAccrualDetector {
 public:
  explicit PhiAccrualDetector(PhiAccrualOptions options = {});

  // Records an answer received at `now_s`. `skipped_s`: how much of the gap since the previous
  // answer the watcher chose not to ask (polls skipped on purpose); it is not counted.
  void Heartbeat(double now_s, double skipped_s = 0);
  // Suspicion at `now_s`: 0 when the last answer is recent, growing without bound with silence.
  // 0 before the first answer. `skipped_s` as for Heartbeat: polls skipped since the last answer.
  double Phi(double now_s, double skipped_s = 0) const;
  // Forgets the learned gaps and treats `now_s` as the last answer (after the watcher itself
  // paused, its history says nothing about the task).
  void Reset(double now_s);

  double MeanGap() const;
  double StddevGap() const;
  std::optional<double> last_heartbeat() const { return last_; }
  size_t samples() const { return gaps_.size(); }

 private:
  PhiAccrualOptions options_;
  std::deque<double> gaps_;
  double sum_ = 0;
  double sum_sq_ = 0;
  std::optional<double> last_;
};

}  // namespace trainscope::sidecar
