// A node's load from /proc text (node_load.h): a table of what the kernel writes and of text it
// does not, a sampler over a folder the test writes, the wire form bounded on the way in; and
// starved nodes (starved_nodes.h): a node whose tasks slow together, against busy-for-everyone,
// a lone straggler and no evidence.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "trainscope/sidecar/node_load_watch.h"
#include "trainscope/sidecar/starved_nodes.h"
#include "trainscope/sidecar/v1/sidecar.pb.h"

namespace trainscope::sidecar {
namespace {

constexpr char kStat[] =
    "cpu  100 0 50 800 10 0 5 35 0 0\ncpu0 50 0 25 400 5 0 2 18 0 0\n"
    "cpu1 50 0 25 400 5 0 3 17 0 0\nintr 1 2 3\nctxt 42\n";

TEST(NodeLoad, ParsesWhatTheKernelWritesAndRefusesWhatItDoesNot) {
  auto cpu = ParseProcStatCpu(kStat);
  ASSERT_TRUE(cpu);
  EXPECT_DOUBLE_EQ(cpu->total, 1000);
  EXPECT_DOUBLE_EQ(cpu->steal, 35);
  EXPECT_EQ(ParseProcStatCores(kStat), 2);
  for (const char* bad : {"", "cpu 1 2 3\n", "cpu  a b c d e f g h\n", "cpu  1 2 3 4 5 6 7 -8\n",
                          "cpu0 1 2 3 4 5 6 7 8\n", "\n\n\n"}) {
    EXPECT_FALSE(ParseProcStatCpu(bad)) << bad;
  }
  EXPECT_EQ(ParseLoadAverage("3.50 2.00 1.00 2/300 4242\n"), 3.5);
  for (const char* bad : {"", "x 1 2", "-1 0 0", "nan 1 1"}) EXPECT_FALSE(ParseLoadAverage(bad));
  EXPECT_EQ(ParseVmstatSwapPages("nr_free_pages 1\npswpin 10\npswpout 32\n"), 42);
  EXPECT_FALSE(ParseVmstatSwapPages("pswpin 10\n"));
  EXPECT_FALSE(ParseVmstatSwapPages("pswpin ten\npswpout 3\n"));
}

// A /proc of the test's own: steal and swapping are rates between samples.
TEST(NodeLoad, SamplesRatesOverTheWindowAndSaysWhatStrainsTheNode) {
  char dir[] = "/tmp/trainscope-proc-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::filesystem::path proc(dir);
  std::filesystem::create_directories(proc / "pressure");
  auto write = [&](const char* name, const std::string& text) {
    std::ofstream(proc / name) << text;
  };
  write("stat", kStat);
  write("loadavg", "1.00 1.00 1.00 1/10 1\n");
  write("vmstat", "pswpin 0\npswpout 0\n");
  write("pressure/cpu", "some avg10=5.00 avg60=0 avg300=0 total=0\n");
  write("pressure/memory", "some avg10=0.00 avg60=0 avg300=0 total=0\n");
  NodeLoadWatch watch(dir);
  NodeLoad first = watch.Sample(100);
  EXPECT_TRUE(first.read);
  EXPECT_EQ(first.cores, 2);
  EXPECT_EQ(first.load_per_core, 0.5);
  EXPECT_FALSE(first.cpu_steal_ratio);  // Not until a second sample.
  EXPECT_EQ(NodeStrainWords(first), "");
  write("stat", "cpu  200 0 50 800 10 0 5 435 0 0\ncpu0 1\ncpu1 1\n");  // +100 user, +400 steal.
  write("loadavg", "9.00 1.00 1.00 1/10 1\n");
  write("vmstat", "pswpin 3000\npswpout 2000\n");
  write("pressure/memory", "some avg10=30.00 avg60=0 avg300=0 total=0\n");
  NodeLoad second = watch.Sample(105);
  ASSERT_TRUE(second.cpu_steal_ratio);
  EXPECT_DOUBLE_EQ(*second.cpu_steal_ratio, 0.8);
  EXPECT_DOUBLE_EQ(*second.swap_pages_per_second, 1000);
  EXPECT_EQ(NodeStrainWords(second),
            "CPU steal 80%, load 4.5 per core (2 cores), memory pressure "
            "30%, swapping 1000 pages/s");
  NodeLoad gone = NodeLoadWatch("/nonexistent-proc").Sample(1);
  EXPECT_FALSE(gone.read);
  EXPECT_EQ(NodeStrainWords(gone), "");
  std::filesystem::remove_all(proc);
}

TEST(NodeLoad, TheWireFormIsBoundedOnTheWayIn) {
  NodeLoad l;
  l.cores = 4;
  l.load_per_core = 2;
  l.cpu_steal_ratio = 0.3;
  v1::NodeLoad wire;
  ToProto(l, &wire);
  NodeLoad back = FromProto(wire);
  EXPECT_TRUE(back.read);
  EXPECT_EQ(back.load_per_core, 2);
  EXPECT_EQ(back.cpu_steal_ratio, 0.3);
  EXPECT_FALSE(back.memory_pressure_ratio);
  wire.set_cpu_steal_ratio(7);
  wire.set_memory_pressure_ratio(-1);
  wire.set_swap_pages_per_second(std::nan(""));
  wire.set_cores(-5);
  back = FromProto(wire);
  EXPECT_EQ(back.cpu_steal_ratio, 1.0);
  EXPECT_FALSE(back.memory_pressure_ratio);
  EXPECT_FALSE(back.swap_pages_per_second);
  EXPECT_EQ(back.cores, 0);
}

// Workers by node: {node, recent step, usual step, throttled by its quota}.
struct W {
  std::string node;
  double step;
  double usual = 0.01;
  bool quota = false;
  double raised = 0;
};
std::map<TaskRef, TaskView> Workers(const std::vector<W>& ws) {
  std::map<TaskRef, TaskView> tasks;
  for (size_t i = 0; i < ws.size(); ++i) {
    TaskView& v = tasks[TaskRef{"worker", static_cast<int>(i)}];
    v.task = {"worker", static_cast<int>(i)};
    v.state = TaskState::kUp;
    v.expects_progress = true;
    v.node = ws[i].node;
    v.recent_step_seconds = ws[i].step;
    v.usual_step_seconds = ws[i].usual;
    v.step_raised_seconds = ws[i].raised;
    if (ws[i].quota) v.cgroup.cpu_throttled_ratio = 0.9;
  }
  return tasks;
}

NodeLoad Strained() {
  NodeLoad l;
  l.read = true;
  l.cores = 2;
  l.cpu_steal_ratio = 0.4;
  return l;
}

TEST(StarvedNodes, ANodesWorkersSlowTogetherWithItsEvidence) {
  auto tasks = Workers({{"n1", 0.01}, {"n2", 0.011}, {"n3", 0.04}, {"n3", 0.05}});
  auto found = FindStarvedNodes(tasks, {{"n3", Strained()}});
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].node, "n3");
  EXPECT_EQ(found[0].slow.size(), 2u);
  EXPECT_EQ(found[0].compared, 2);
  EXPECT_EQ(StarvedNodeWords(found[0], "n3"),
            "throttled or starved node n3: 2 of its 2 workers (worker:2, worker:3) step 4.5x "
            "slower than the workers of other nodes (a step every 50 ms against 11 ms): the "
            "node: CPU steal 40%");
  // A strain every node shares (one busy host under them all) is no node's own.
  NodeLoad calm = Strained();
  calm.cpu_steal_ratio = 0.15;
  EXPECT_TRUE(FindStarvedNodes(tasks, {{"n1", Strained()}, {"n2", Strained()}, {"n3", Strained()}})
                  .empty());
  EXPECT_EQ(FindStarvedNodes(tasks, {{"n1", calm}, {"n2", calm}, {"n3", Strained()}}).size(), 1u);
  EXPECT_EQ(NodeStrainWords(Strained(), {calm, calm}), "CPU steal 40%");
  EXPECT_EQ(NodeStrainWords(Strained(), {calm, Strained(), Strained()}), "");
  // Their shared CPU quota is evidence too, whatever the node's load says.
  tasks = Workers({{"n1", 0.01}, {"n2", 0.01}, {"n3", 0.03, 0.01, true}, {"n3", 0.03, 0.01, true}});
  found = FindStarvedNodes(tasks, {});
  ASSERT_EQ(found.size(), 1u);
  EXPECT_NE(StarvedNodeWords(found[0], "n3").find("2 of them held back by their CPU quota"),
            std::string::npos);
}

TEST(StarvedNodes, NoneWhenEveryoneIsSlowOneIsAloneOrNothingHoldsIt) {
  const std::map<std::string, NodeLoad> all = {
      {"n1", Strained()}, {"n2", Strained()}, {"n3", Strained()}};
  // Busy for everyone: no gap against the other nodes.
  EXPECT_TRUE(
      FindStarvedNodes(Workers({{"n1", 0.05}, {"n2", 0.05}, {"n3", 0.05}, {"n3", 0.06}}), all)
          .empty());
  // One slow task of two: a straggler's matter, not the node's.
  EXPECT_TRUE(
      FindStarvedNodes(Workers({{"n1", 0.01}, {"n2", 0.01}, {"n3", 0.05}, {"n3", 0.01}}), all)
          .empty());
  // Slower than the others but not against their own past (they always were): no verdict.
  EXPECT_TRUE(
      FindStarvedNodes(
          Workers({{"n1", 0.01}, {"n2", 0.01}, {"n3", 0.05, 0.05}, {"n3", 0.05, 0.05}}), all)
          .empty());
  // No evidence: 2x is not enough; 5x held for 10 s is, and says nothing explains it.
  auto plain = Workers({{"n1", 0.01}, {"n2", 0.01}, {"n3", 0.02}, {"n3", 0.02}});
  EXPECT_TRUE(FindStarvedNodes(plain, {}).empty());
  auto held = Workers(
      {{"n1", 0.01}, {"n2", 0.01}, {"n3", 0.09, 0.01, false, 10}, {"n3", 0.09, 0.01, false, 10}});
  auto found = FindStarvedNodes(held, {});
  ASSERT_EQ(found.size(), 1u);
  EXPECT_NE(StarvedNodeWords(found[0], "n3").find("nothing on the node says why"),
            std::string::npos);
  // All on one node: nothing to compare with.
  EXPECT_TRUE(
      FindStarvedNodes(Workers({{"n1", 0.05}, {"n1", 0.05}, {"n1", 0.01}}), {{"n1", Strained()}})
          .empty());
}

}  // namespace
}  // namespace trainscope::sidecar
