#pragma once
// The one retry pacing of trainscope: jittered exponential backoff, capped. It only says how long
// to wait before the next attempt; the caller sleeps, and decides with its own deadline (a
// patience, a session timeout) when to stop. No clock, no sleep: tested alone.

#include <cstdint>
#include <random>

namespace trainscope {

struct BackoffOptions {
  // The first delay; each next one is `multiplier` times the last, at most `max_s`.
  double initial_s = 0.05;
  double max_s = 0.25;
  double multiplier = 2;
  // Each delay is drawn uniformly from [d * (1 - jitter), d * (1 + jitter)] (then capped), so
  // that many tasks that failed together do not retry together. 0: exact delays.
  double jitter = 0.2;
};

// Thread-compatible: one retry loop owns it.
class Backoff {
 public:
  // `seed` makes the jitter reproducible (tests); 0 draws one.
  explicit Backoff(BackoffOptions options = {}, uint64_t seed = 0);

  // The delay before the next attempt, in seconds; grows until max_s.
  double NextDelay();
  // NextDelay() in whole milliseconds (at least 1).
  int64_t NextDelayMs();
  // Back to initial_s, after an attempt got through.
  void Reset() { current_s_ = options_.initial_s; }

 private:
  BackoffOptions options_;
  double current_s_;
  std::mt19937_64 rng_;
};

}  // namespace trainscope
