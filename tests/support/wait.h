#pragma once
// Waiting in tests for a condition rather than sleeping a fixed time: a test that waits for what
// it asserts is as fast as the machine allows and does not fail when the machine is slow.

#include <chrono>
#include <thread>

namespace trainscope::testing {

// Calls `done` every `every` until it returns true (true) or `timeout` has passed (false).
template <typename Predicate>
bool WaitUntil(Predicate done, std::chrono::milliseconds timeout,
               std::chrono::milliseconds every = std::chrono::milliseconds(20)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(every);
  }
  return true;
}

// Whether `holds` stays true through the whole `window`, checked every `every`: "nothing
// changed" sampled throughout, not looked at once after a sleep.
template <typename Predicate>
bool HoldsFor(Predicate holds, std::chrono::milliseconds window,
              std::chrono::milliseconds every = std::chrono::milliseconds(20)) {
  const auto end = std::chrono::steady_clock::now() + window;
  do {
    if (!holds()) return false;
    std::this_thread::sleep_for(every);
  } while (std::chrono::steady_clock::now() < end);
  return holds();
}

}  // namespace trainscope::testing
