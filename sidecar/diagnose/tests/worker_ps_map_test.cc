// The worker x ps map and its slow links (worker_ps_map.h), and the first half of a slow-link
// verdict, each edge against its own past (EdgeWatch): a table of rows, columns and single edges.
#include "trainscope/sidecar/worker_ps_map.h"

#include <gtest/gtest.h>

#include "trainscope/sidecar/cluster_view.h"
#include "trainscope/sidecar/edge_watch.h"
#include "trainscope/sidecar/stragglers.h"

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

// The cluster view names a slow link in its caller's reason with the map on (the default), and
// with --worker_ps_map=false builds no map and names no link.
TEST(WorkerPsMap, TheClusterViewUsesItUnlessSwitchedOff) {
  ClusterSpec spec =
      ParseTfConfig(R"({"cluster": {"ps": ["h:1", "h:2"], "worker": ["h:3", "h:4"]}})", false)
          ->cluster;
  ClusterViewInputs in;
  in.cluster = "c";
  in.spec = &spec;
  for (auto& [ref, v] : Grid({{0.001, 0.081}, {0.001, 0.001}})) {
    v.cluster = "c";
    v.reason = "up";
    in.local.push_back(v);
  }
  in.now_unix = 100;
  auto worker0 = [](const ClusterView& view) {
    for (const TaskView& v : view.tasks) {
      if (v.task == TaskRef{"worker", 0}) return v;
    }
    return TaskView{};
  };
  ClusterView on = BuildClusterView(in);
  EXPECT_EQ(on.worker_ps.edges.size(), 4u);
  EXPECT_EQ(worker0(on).state, TaskState::kSlow);
  EXPECT_NE(worker0(on).reason.find("slow link worker:0 -> ps:1"), std::string::npos)
      << worker0(on).reason;
  in.worker_ps_map = false;
  ClusterView off = BuildClusterView(in);
  EXPECT_TRUE(off.worker_ps.edges.empty());
  EXPECT_EQ(worker0(off).state, TaskState::kUp) << worker0(off).reason;
}

TEST(WorkerPsMap, BigMapsAreSampledToTheSlowestRowsAndColumns) {
  std::vector<std::vector<double>> lat(40, std::vector<double>(20, 0.001));
  lat[7][3] = 0.09;
  lat[30][12] = 0.05;
  auto map = BuildWorkerPsMap(Grid(lat));
  EXPECT_EQ(map.edges.size(), 800u);
  auto sample = SampleMap(map.edges, 2, 2);
  ASSERT_EQ(sample.size(), 4u);
  for (const MapEdge& e : sample) {
    EXPECT_TRUE(e.from.index == 7 || e.from.index == 30) << e.from.ShortName();
    EXPECT_TRUE(e.to.index == 3 || e.to.index == 12) << e.to.ShortName();
  }
  EXPECT_EQ(SampleMap(map.edges, 100, 100).size(), 800u);
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

// Workers with the given recent step times; every one raised for `raised` s over a usual of 10 ms
// when its steps are above 50 ms.
std::map<TaskRef, TaskView> Steps(const std::vector<double>& steps, double raised = 10) {
  std::map<TaskRef, TaskView> tasks;
  for (size_t w = 0; w < steps.size(); ++w) {
    TaskView& v = tasks[TaskRef{"worker", static_cast<int>(w)}];
    v.task = {"worker", static_cast<int>(w)};
    v.state = TaskState::kUp;
    v.expects_progress = true;
    v.recent_step_seconds = steps[w];
    v.usual_step_seconds = 0.01;
    v.step_raised_seconds = steps[w] > 0.05 ? raised : 0;
  }
  return tasks;
}

std::vector<std::string> Names(const std::vector<Straggler>& s) {
  std::vector<std::string> out;
  for (const Straggler& x : s) out.push_back(x.task.ShortName());
  return out;
}

TEST(Stragglers, OneWorkerFarAboveItsPeersAndItsOwnPast) {
  auto found = FindStragglers(Steps({0.01, 0.012, 0.2}), {});
  EXPECT_EQ(Names(found), std::vector<std::string>{"worker:2"});
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(StragglerWords(found[0]),
            "straggler: a step every 200 ms, 16.7x the median of the other workers (12 ms), for "
            "10 s (usually 10 ms): nothing on its node says why (not its CPU quota, nor memory, "
            "nor a link of its own)");
}

TEST(Stragglers, NoneWhenAllAreSlowNotHeldOrTooFewPeers) {
  // A busy machine: every worker slow together.
  EXPECT_TRUE(FindStragglers(Steps({0.2, 0.25, 0.22}), {}).empty());
  // Not yet held 5 s against its own past, and no cause seen.
  EXPECT_TRUE(FindStragglers(Steps({0.01, 0.012, 0.2}, /*raised=*/2), {}).empty());
  // Within 50 ms of its peers: noise.
  EXPECT_TRUE(FindStragglers(Steps({0.01, 0.012, 0.04}), {}).empty());
  // One peer only.
  EXPECT_TRUE(FindStragglers(Steps({0.01, 0.2}), {}).empty());
}

TEST(Stragglers, ACauseItsNodeSeesIsNamedAndNeedsNoHistory) {
  auto tasks = Steps({0.01, 0.012, 0.2}, /*raised=*/0);
  TaskView& slow = tasks[TaskRef{"worker", 2}];
  slow.usual_step_seconds = 0;  // Throttled from its start: no usual pace to compare with.
  slow.cgroup.version = 1;
  slow.cgroup.cpu_throttled_ratio = 0.92;
  slow.cgroup.cpu_quota_cores = 0.1;
  auto found = FindStragglers(tasks, {});
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(
      StragglerWords(found[0]),
      "straggler: a step every 200 ms, 16.7x the median of the other workers (12 ms): held back "
      "by its own CPU quota");
  slow.cgroup = {};
  slow.cgroup.memory_pressure_ratio = 0.4;
  found = FindStragglers(tasks, {});
  ASSERT_EQ(found.size(), 1u);
  EXPECT_NE(found[0].cause.find("memory 40% of the time"), std::string::npos) << found[0].cause;
  // With a cause, 1.3x its peers is enough; without, it is not.
  tasks[TaskRef{"worker", 2}].recent_step_seconds = 0.02;
  found = FindStragglers(tasks, {});
  ASSERT_EQ(found.size(), 1u);
  EXPECT_NE(StragglerWords(found[0]).find("1.7x the median"), std::string::npos);
  slow.cgroup = {};
  EXPECT_TRUE(FindStragglers(tasks, {}).empty());
  slow.recent_step_seconds = 0.2;
  WorkerPsMap map;
  map.slow_links.push_back({{"worker", 2}, {"ps", 1}});
  found = FindStragglers(tasks, map);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].cause, "its link to ps:1 is slow");
}

}  // namespace
}  // namespace trainscope::sidecar
