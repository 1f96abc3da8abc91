// The worker x ps map and its slow links (worker_ps_map.h), and the first half of a slow-link
// verdict, each edge against its own past (EdgeWatch): a table of rows, columns and single edges.
#include "serve/worker_ps_map.h"

#include <gtest/gtest.h>

#include "trainscope/sidecar/edge_watch.h"

namespace trainscope::sidecar {
namespace {

// `lat[w][p]`: recent latency from worker:w to ps:p; every edge raised for `raised` s against a
// usual of 1 ms.
std::map<TaskRef, TaskView> Grid(const std::vector<std::vector<double>>& lat, double raised = 10) {
  std::map<TaskRef, TaskView> tasks;
  for (size_t w = 0; w < lat.size(); ++w) {
    TaskView& v = tasks[TaskRef{"worker", static_cast<int>(w)}];
    v.task = {"worker", static_cast<int>(w)};
    v.state = TaskState::kUp;
    for (size_t p = 0; p < lat[w].size(); ++p) {
      PeerInfo e;
      e.peer = {"ps", static_cast<int>(p)};
      e.connected = true;
      e.latency_seconds = lat[w][p];
      e.recent_latency_seconds = lat[w][p];
      e.usual_latency_seconds = 0.001;
      e.raised_seconds = lat[w][p] > 0.01 ? raised : 0;
      v.peers.push_back(e);
    }
  }
  for (size_t p = 0; p < (lat.empty() ? 0 : lat[0].size()); ++p) {
    TaskView& v = tasks[TaskRef{"ps", static_cast<int>(p)}];
    v.task = {"ps", static_cast<int>(p)};
    v.state = TaskState::kUp;
  }
  return tasks;
}

std::vector<std::string> Links(const WorkerPsMap& map) {
  std::vector<std::string> out;
  for (const SlowLink& l : map.slow_links)
    out.push_back(l.from.ShortName() + "->" + l.to.ShortName());
  return out;
}

TEST(WorkerPsMap, OneEdgeFarAboveItsRowAndColumnIsASlowLink) {
  auto map = BuildWorkerPsMap(Grid({{0.001, 0.081}, {0.001, 0.001}, {0.002, 0.001}}));
  EXPECT_EQ(map.edges.size(), 6u);
  EXPECT_EQ(Links(map), std::vector<std::string>{"worker:0->ps:1"});
  ASSERT_EQ(map.slow_links.size(), 1u);
  EXPECT_DOUBLE_EQ(map.slow_links[0].row_median_seconds, 0.001);
  EXPECT_DOUBLE_EQ(map.slow_links[0].column_median_seconds, 0.001);
  EXPECT_NE(SlowLinkWords(map.slow_links[0])
                .find("slow link worker:0 -> ps:1: its calls to ps:1 take 81 ms"),
            std::string::npos)
      << SlowLinkWords(map.slow_links[0]);
}

TEST(WorkerPsMap, WholeColumnOrRowIsNoLink) {
  // A slow ps: every worker's calls to ps:1 are slow.
  EXPECT_TRUE(Links(BuildWorkerPsMap(Grid({{0.001, 0.08}, {0.001, 0.09}, {0.001, 0.07}}))).empty());
  // A slow worker: all of worker:0's calls are slow.
  EXPECT_TRUE(
      Links(BuildWorkerPsMap(Grid({{0.08, 0.09}, {0.001, 0.001}, {0.001, 0.001}}))).empty());
}

TEST(WorkerPsMap, NeedsItsOwnPastAPeerGapAndAHold) {
  const std::vector<std::vector<double>> one = {{0.001, 0.081}, {0.001, 0.001}};
  EXPECT_TRUE(Links(BuildWorkerPsMap(Grid(one, /*raised=*/2))).empty());  // Not held 5 s yet.
  auto tasks = Grid(one);
  tasks[TaskRef{"worker", 0}].peers[1].usual_latency_seconds = 0;  // Still learning.
  EXPECT_TRUE(Links(BuildWorkerPsMap(tasks)).empty());
  // Above, but not by 20 ms: noise of a busy machine, not a slow link.
  EXPECT_TRUE(Links(BuildWorkerPsMap(Grid({{0.001, 0.015}, {0.001, 0.001}}))).empty());
  // One ps only: no row to compare with.
  EXPECT_TRUE(Links(BuildWorkerPsMap(Grid({{0.081}, {0.001}}))).empty());
  // A dead or blocked caller is no evidence.
  tasks = Grid(one);
  tasks[TaskRef{"worker", 1}].state = TaskState::kDead;
  EXPECT_TRUE(Links(BuildWorkerPsMap(tasks)).empty());
}

PeerInfo Peer(double latency) {
  PeerInfo p;
  p.peer = {"ps", 0};
  p.connected = true;
  p.latency_seconds = latency;
  return p;
}

// Feeds `watch` heartbeats 0.25 s apart from `t` for `seconds`; the last peer seen.
PeerInfo Feed(EdgeWatch& watch, double& t, double seconds, double latency) {
  PeerInfo last;
  for (double end = t + seconds; t < end; t += 0.25) {
    std::vector<PeerInfo> peers = {Peer(latency)};
    watch.Observe(t, peers);
    last = peers[0];
  }
  return last;
}

TEST(EdgeWatch, LearnsTheUsualThenCountsHowLongItIsRaised) {
  EdgeWatch watch;
  double t = 100;
  PeerInfo p = Feed(watch, t, 5, 0.001);
  EXPECT_DOUBLE_EQ(p.recent_latency_seconds, 0.001);
  EXPECT_EQ(p.usual_latency_seconds, 0);  // Warming up.
  p = Feed(watch, t, 10, 0.001);
  EXPECT_DOUBLE_EQ(p.usual_latency_seconds, 0.001);
  EXPECT_EQ(p.raised_seconds, 0);
  // A burst of slow calls shorter than half the window does not move the median.
  p = Feed(watch, t, 3, 0.2);
  EXPECT_DOUBLE_EQ(p.recent_latency_seconds, 0.001);
  EXPECT_EQ(p.raised_seconds, 0);
  p = Feed(watch, t, 10, 0.001);
  // A lasting one does, and the usual is not learned from it.
  p = Feed(watch, t, 20, 0.08);
  EXPECT_DOUBLE_EQ(p.recent_latency_seconds, 0.08);
  EXPECT_NEAR(p.usual_latency_seconds, 0.001, 1e-9);
  EXPECT_GT(p.raised_seconds, 10);
  p = Feed(watch, t, 10, 0.001);
  EXPECT_EQ(p.raised_seconds, 0);
}

TEST(EdgeWatch, ForgetsPeersNoLongerReportedAndSkipsUnusedOnes) {
  EdgeWatch watch;
  double t = 0;
  Feed(watch, t, 15, 0.001);
  std::vector<PeerInfo> none = {Peer(0)};  // No call succeeded: nothing to say.
  watch.Observe(t, none);
  EXPECT_EQ(none[0].recent_latency_seconds, 0);
  std::vector<PeerInfo> other = {Peer(0.001)};
  other[0].peer = {"ps", 1};
  watch.Observe(t, other);  // ps:0 is gone from the list: forgotten, ps:1 starts warming up.
  EXPECT_EQ(other[0].usual_latency_seconds, 0);
}

}  // namespace
}  // namespace trainscope::sidecar
