#pragma once
// What the benchmark programs share: timing a loop, the median of rounds, and their two flags.

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace trainscope::bench {

// Runs `op` repeatedly for at least `seconds`; returns the mean seconds per call.
template <typename Op>
double SecondsPerOp(double seconds, Op op) {
  using Clock = std::chrono::steady_clock;
  int64_t n = 0;
  const auto start = Clock::now();
  double elapsed = 0;
  do {
    op();
    ++n;
    elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  } while (elapsed < seconds);
  return elapsed / static_cast<double>(n);
}

// The process's CPU seconds (every thread), for costs that a busy machine's wall clock hides.
inline double ProcessCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// Runs `op` repeatedly for at least `seconds`; mean wall and process CPU seconds per call.
struct PerOp {
  double wall = 0;
  double cpu = 0;
};
template <typename Op>
PerOp WallAndCpuPerOp(double seconds, Op op) {
  const double cpu0 = ProcessCpuSeconds();
  int64_t n = 0;
  const double wall = SecondsPerOp(seconds, [&] {
    op();
    ++n;
  });
  return {wall, (ProcessCpuSeconds() - cpu0) / static_cast<double>(n)};
}

inline double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// --rounds N --seconds_per_round S.
struct RoundOptions {
  int rounds = 15;
  double seconds_per_round = 0.3;
};

inline RoundOptions ParseRoundOptions(int argc, char** argv) {
  RoundOptions o;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--rounds") == 0) o.rounds = std::max(1, std::atoi(argv[i + 1]));
    if (std::strcmp(argv[i], "--seconds_per_round") == 0) {
      o.seconds_per_round = std::atof(argv[i + 1]);
    }
  }
  return o;
}

}  // namespace trainscope::bench
