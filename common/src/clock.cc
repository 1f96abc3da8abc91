// Clocks and human-readable durations and sizes; see clock.h.
#include "trainscope/common/clock.h"

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>

namespace trainscope {

double MonotonicSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double UnixSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string HumanDuration(double s) {
  if (!std::isfinite(s) || s < 0) s = 0;
  char buf[48];
  if (s > 0 && s < 0.0001) return "under 0.1 ms";
  if (s < 0.01) {
    std::snprintf(buf, sizeof(buf), "%.1f ms", s * 1000);
  } else if (s < 1) {
    std::snprintf(buf, sizeof(buf), "%.0f ms", s * 1000);
  } else if (s < 10) {
    std::snprintf(buf, sizeof(buf), "%.1f s", s);
  } else if (s < 120) {
    std::snprintf(buf, sizeof(buf), "%.0f s", s);
  } else if (s < 7200) {
    std::snprintf(buf, sizeof(buf), "%d min %d s", static_cast<int>(s) / 60,
                  static_cast<int>(s) % 60);
  } else {
    std::snprintf(buf, sizeof(buf), "%.1f h", s / 3600);
  }
  return buf;
}

std::string HumanBytes(int64_t bytes) {
  if (bytes < 1024) return std::to_string(bytes) + " B";
  const char* units[] = {"KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = -1;
  while (value >= 1024 && unit < 3) {
    value /= 1024;
    ++unit;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f %s", value, units[unit]);
  return buf;
}

}  // namespace trainscope
