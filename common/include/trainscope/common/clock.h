#pragma once
// Clocks and durations in words, shared by the runtime and the sidecar.

#include <string>

namespace trainscope {

// Seconds on the steady clock, for durations.
double MonotonicSeconds();
// Seconds since the epoch, for timestamps shown to people.
double UnixSeconds();

// "0.3 ms", "350 ms", "1.5 s", "42 s", "3 min 5 s", "2.1 h". Negative or not finite: "0.0 ms".
std::string HumanDuration(double seconds);
// "512 B", "4.0 KiB", "1.5 MiB", "2.0 GiB".
std::string HumanBytes(int64_t bytes);

}  // namespace trainscope
