// Patience: one outage across rounds, its log lines (begin, every 10 s, end), and when it runs out.
#include "patience.h"

#include <gtest/gtest.h>

namespace trainscope {
namespace {

const std::vector<Patience::Failure> kPs0 = {{"ps:0", "10.0.0.1:2222", "connection refused"}};

TEST(Patience, AnOutageIsLoggedWhenItBeginsEveryTenSecondsAndWhenItEnds) {
  Patience p("worker:0", 600);
  auto begin = p.Failed(100, "Pull", kPs0);
  ASSERT_TRUE(begin);
  EXPECT_EQ(*begin,
            "worker:0 waits on ps:0 at 10.0.0.1:2222 (connection refused): Pull failed; retrying "
            "for up to 10 min 0 s (--ps_patience_s)");
  EXPECT_FALSE(p.Failed(105, "Pull", kPs0));
  auto note = p.Failed(110.5, "Push", kPs0);
  ASSERT_TRUE(note);
  EXPECT_NE(note->find("still waits on ps:0 at 10.0.0.1:2222 (connection refused) in Push: 10 s "
                       "so far"),
            std::string::npos)
      << *note;
  EXPECT_FALSE(p.Failed(115, "Pull", kPs0));
  EXPECT_TRUE(p.Failed(120.6, "Pull", kPs0));
  EXPECT_DOUBLE_EQ(p.Waited(121), 21);
  auto end = p.Succeeded(141.25);
  ASSERT_TRUE(end);
  EXPECT_NE(end->find("worker:0 reached ps:0 again after waiting 41 s"), std::string::npos) << *end;
  EXPECT_FALSE(p.Succeeded(142));
  EXPECT_DOUBLE_EQ(p.Waited(142), 0);
}

TEST(Patience, SpansCallsAndRunsOutAfterThePatienceNotAnAttemptCount) {
  Patience p("worker:1", 30);
  double now = 0;
  for (; now < 29.9; now += 0.25) {
    p.Failed(now, "Pull", kPs0);
    EXPECT_FALSE(p.Exhausted(now)) << now;
  }
  p.Failed(30, "Push", kPs0);
  EXPECT_TRUE(p.Exhausted(30));
  // A round that gets through ends the outage: the next one has its whole patience again.
  p.Succeeded(30.1);
  EXPECT_FALSE(p.Exhausted(31));
  p.Failed(40, "Pull", kPs0);
  EXPECT_FALSE(p.Exhausted(69));
  EXPECT_TRUE(p.Exhausted(70));
}

TEST(Patience, NamesEveryPeerItWaitsOn) {
  Patience p("worker:0", 60);
  auto line = p.Failed(0, "Pull",
                       {{"ps:0", "a:1", "no route to host"}, {"ps:1", "b:2", "deadline exceeded"}});
  ASSERT_TRUE(line);
  EXPECT_NE(line->find("ps:0 at a:1 (no route to host), ps:1 at b:2 (deadline exceeded)"),
            std::string::npos)
      << *line;
  EXPECT_NE(p.Succeeded(3)->find("reached ps:0, ps:1 again"), std::string::npos);
}

}  // namespace
}  // namespace trainscope
