// Jittered exponential backoff; see backoff.h.
#include "trainscope/common/backoff.h"

#include <algorithm>
#include <cmath>

namespace trainscope {

Backoff::Backoff(BackoffOptions options, uint64_t seed)
    : options_(options),
      current_s_(options.initial_s),
      rng_(seed != 0 ? seed : std::random_device{}()) {}

double Backoff::NextDelay() {
  double delay = current_s_;
  if (options_.jitter > 0) {
    std::uniform_real_distribution<double> spread(1 - options_.jitter, 1 + options_.jitter);
    delay *= spread(rng_);
  }
  current_s_ = std::min(current_s_ * options_.multiplier, options_.max_s);
  return std::clamp(delay, 0.0, options_.max_s);
}

int64_t Backoff::NextDelayMs() { return std::max<int64_t>(1, std::llround(NextDelay() * 1000)); }

}  // namespace trainscope
