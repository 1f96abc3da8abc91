// The gate a gRPC callback service's handlers pass (call_gate.h): Close() refuses new handlers
// and returns only once every handler inside has left, so that the service can then go.
#include "trainscope/common/call_gate.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <utility>

#include "wait.h"

namespace trainscope {
namespace {

using std::chrono::milliseconds;

TEST(CallGate, ClosedWithNobodyInsideItReturnsAndRefusesEveryoneAfter) {
  CallGate gate;
  { EXPECT_TRUE(gate.Enter()); }  // In and out.
  gate.Close();
  EXPECT_FALSE(gate.Enter());
  gate.Close();  // Again: nothing to wait for.
}

TEST(CallGate, CloseWaitsForTheHandlerInsideAndNewOnesAreRefusedMeanwhile) {
  CallGate gate;
  std::atomic<bool> release{false};
  std::atomic<bool> inside{false};
  std::thread handler([&] {
    CallGate::Pass pass = gate.Enter();
    ASSERT_TRUE(pass);
    inside = true;
    while (!release) std::this_thread::sleep_for(milliseconds(5));
  });
  ASSERT_TRUE(testing::WaitUntil([&] { return inside.load(); }, milliseconds(10000)));
  std::atomic<bool> closed{false};
  std::thread closer([&] {
    gate.Close();
    closed = true;
  });
  // While the handler is inside, Close() does not return, and the gate already refuses.
  EXPECT_TRUE(testing::WaitUntil([&] { return !gate.Enter(); }, milliseconds(10000)));
  EXPECT_TRUE(testing::HoldsFor([&] { return !closed; }, milliseconds(200)));
  release = true;
  EXPECT_TRUE(testing::WaitUntil([&] { return closed.load(); }, milliseconds(10000)));
  handler.join();
  closer.join();
}

TEST(CallGate, AMovedPassLeavesOnce) {
  CallGate gate;
  {
    CallGate::Pass first = gate.Enter();
    CallGate::Pass second = std::move(first);
    EXPECT_FALSE(first);  // NOLINT(bugprone-use-after-move): what a move leaves is the point.
    EXPECT_TRUE(second);
  }
  gate.Close();  // Would wait forever had the move left the count at 1 (or gone below 0).
  EXPECT_FALSE(gate.Enter());
}

}  // namespace
}  // namespace trainscope
