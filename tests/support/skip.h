#pragma once
// What a gtest does when this host cannot run it (not root, a tool missing): on a developer's
// machine it is skipped, saying why; in CI (CI=true in the environment) it fails instead, since
// a skipped suite there would hide that it never ran. The Python tests' twin is
// trainscope_testing.skips (tests/py).

#include <gtest/gtest.h>

#include <cstdlib>
#include <string_view>

namespace trainscope::testing {

// True when the environment says this is a CI run (CI=true, as CI services set it).
inline bool InCi() {
  const char* ci = std::getenv("CI");
  return ci != nullptr && (std::string_view(ci) == "true" || std::string_view(ci) == "TRUE");
}

}  // namespace trainscope::testing

// Unless `condition` holds, ends the current test (a test body or a fixture's SetUp) as skipped
// with the message `why`, or as failed in CI.
#define TRAINSCOPE_SKIP_UNLESS(condition, why)                                       \
  do {                                                                               \
    if (!(condition)) {                                                              \
      if (::trainscope::testing::InCi()) {                                           \
        GTEST_FAIL() << (why) << " (CI=true: a test that cannot run fails the run)"; \
      }                                                                              \
      GTEST_SKIP() << (why);                                                         \
    }                                                                                \
  } while (false)
