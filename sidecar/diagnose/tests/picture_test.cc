// One tick, one picture (picture.h): every reader between two ticks shares the same value, a
// poke draws a new one without waiting for the period, and the incidents are drawn with the view
// they come from.
#include "trainscope/sidecar/picture.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>

#include "wait.h"

namespace trainscope::sidecar {
namespace {

using std::chrono::milliseconds;

// ps:0 on this node; the view's inputs as the wiring would hand them, ps:0 in `state`.
class Inputs {
 public:
  Inputs() : spec_(ParseTfConfig(R"({"cluster": {"ps": ["127.0.0.1:2222"]}})", false)->cluster) {}
  ClusterViewInputs operator()() {
    ++calls_;
    ClusterViewInputs in;
    in.cluster = "c";
    in.spec = &spec_;
    in.now_unix = 100 + calls_;
    TaskView v;
    v.cluster = "c";
    v.task = {"ps", 0};
    v.state = state_.load();
    v.reason = std::string(StateName(v.state));
    v.observed_at = in.now_unix;
    v.since = 90;
    in.local = {v};
    return in;
  }
  std::atomic<int> calls_{0};
  std::atomic<TaskState> state_{TaskState::kUp};

 private:
  ClusterSpec spec_;
};

PictureTickerOptions Options(Inputs* inputs, double period_s) {
  PictureTickerOptions o;
  o.cluster = "c";
  o.period_s = period_s;
  o.inputs = [inputs] { return (*inputs)(); };
  return o;
}

TEST(PictureTicker, EveryReaderBetweenTwoTicksSharesOnePicture) {
  Inputs inputs;
  PictureTicker ticker(Options(&inputs, 60));
  EXPECT_EQ(ticker.Now(), nullptr);
  ticker.Tick();
  const std::shared_ptr<const Picture> first = ticker.Now();
  ASSERT_NE(first, nullptr);
  ASSERT_NE(first->incidents, nullptr);
  EXPECT_EQ(ticker.Now(), first);  // Read again: the same value, not built again.
  EXPECT_EQ(inputs.calls_, 1);
  ASSERT_EQ(first->view.tasks.size(), 1u);
  EXPECT_EQ(first->view.tasks[0].state, TaskState::kUp);

  inputs.state_ = TaskState::kDead;
  ticker.Tick();
  const std::shared_ptr<const Picture> second = ticker.Now();
  EXPECT_NE(second, first);
  EXPECT_EQ(second->view.tasks[0].state, TaskState::kDead);
  EXPECT_EQ(first->view.tasks[0].state, TaskState::kUp);  // A reader's picture never changes.
  EXPECT_EQ(second->incidents->open, 1);                  // Drawn from the same view.
}

TEST(PictureTicker, APokeDrawsANewPictureAtOnceAndTellsWhoActsOnNews) {
  Inputs inputs;
  std::atomic<int> news{0};
  PictureTickerOptions o = Options(&inputs, 3600);  // The period alone would never tick again.
  o.on_news = [&news] { ++news; };
  PictureTicker ticker(std::move(o));
  ticker.Start();
  ASSERT_TRUE(testing::WaitUntil([&] { return ticker.Now() != nullptr; }, milliseconds(10000)));
  const int told = news;
  inputs.state_ = TaskState::kDead;
  ticker.Poke();
  EXPECT_TRUE(testing::WaitUntil(
      [&] { return ticker.Now()->view.tasks[0].state == TaskState::kDead; }, milliseconds(10000)));
  EXPECT_TRUE(testing::WaitUntil([&] { return news > told; }, milliseconds(10000)));
  ticker.Stop();
}

}  // namespace
}  // namespace trainscope::sidecar
