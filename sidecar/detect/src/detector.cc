// Phi-accrual failure detector; see detector.h.
#include "trainscope/sidecar/detector.h"

#include <algorithm>
#include <cmath>

namespace trainscope::sidecar {

PhiAccrualDetector::PhiAccrualDetector(PhiAccrualOptions options) : options_(options) {}

void PhiAccrualDetector::Heartbeat(double now_s, double skipped_s) {
  if (last_) {
    double gap = std::max(0.0, now_s - *last_ - skipped_s);
    gaps_.push_back(gap);
    sum_ += gap;
    sum_sq_ += gap * gap;
    if (gaps_.size() > options_.window) {
      double old = gaps_.front();
      gaps_.pop_front();
      sum_ -= old;
      sum_sq_ -= old * old;
    }
  }
  last_ = now_s;
}

void PhiAccrualDetector::Reset(double now_s) {
  gaps_.clear();
  sum_ = sum_sq_ = 0;
  if (last_) last_ = now_s;
}

double PhiAccrualDetector::MeanGap() const {
  if (gaps_.size() < 2) return options_.first_gap_s;
  return sum_ / gaps_.size();
}

double PhiAccrualDetector::StddevGap() const {
  double sd = 0;
  if (gaps_.size() >= 2) {
    double mean = sum_ / gaps_.size();
    sd = std::sqrt(std::max(0.0, sum_sq_ / gaps_.size() - mean * mean));
  } else {
    sd = options_.first_gap_s / 4;
  }
  return std::max(sd, options_.min_stddev_s);
}

double PhiAccrualDetector::Phi(double now_s, double skipped_s) const {
  if (!last_) return 0;
  double elapsed = std::max(0.0, now_s - *last_ - skipped_s);
  double y = (elapsed - MeanGap()) / StddevGap();
  // Logistic approximation of the normal CDF (as in Akka's detector); stable for large y.
  double e = std::exp(-y * (1.5976 + 0.070566 * y * y));
  double phi;
  if (elapsed > MeanGap()) {
    phi = -std::log10(e / (1.0 + e));
  } else {
    phi = -std::log10(1.0 - 1.0 / (1.0 + e));
  }
  if (!std::isfinite(phi)) phi = 1000;  // e overflowed to 0: certain.
  return std::clamp(phi, 0.0, 1000.0);
}

}  // namespace trainscope::sidecar
