// The cluster view across two sidecars, each owning part of the tasks: either one shows the
// whole cluster, and a task that answers its own sidecar while its peers cannot reach it is
// flagged as a partition.
#include <gtest/gtest.h>
#include <signal.h>

#include <thread>

#include "sidecar_harness.h"

namespace trainscope::testing {
namespace {

using sidecar::TaskState;
using std::chrono::seconds;

TEST(SidecarClusterView, TwoSidecarsEachShowTheWholeCluster) {
  Cluster cluster = {{"ps", {FreeAddress()}}, {"worker", {FreeAddress(), FreeAddress()}}};
  auto ps = StartTask(cluster, "ps", 0);
  auto w0 = StartTask(cluster, "worker", 0, {"--steps", "100000000", "--step_delay_ms", "5"});
  int port_a = FreePort();
  int port_b = FreePort();
  std::string a_addr = "127.0.0.1:" + std::to_string(port_a);
  std::string b_addr = "127.0.0.1:" + std::to_string(port_b);
  Sidecar a(cluster, {"--http_port", std::to_string(port_a), "--local_tasks", "ps:0",
                      "--peer_sidecars", b_addr, "--peer_poll_ms", "200"});
  Sidecar b(cluster, {"--http_port", std::to_string(port_b), "--local_tasks", "worker:0,worker:1",
                      "--peer_sidecars", a_addr, "--peer_poll_ms", "200"});
  auto w0_at_a = a.WaitForState("worker:0", TaskState::kUp, seconds(20));
  ASSERT_TRUE(w0_at_a) << a.Describe();
  EXPECT_EQ(w0_at_a->source, b_addr);
  auto ps_at_b = b.WaitForState("ps:0", TaskState::kUp, seconds(20));
  ASSERT_TRUE(ps_at_b) << b.Describe();
  EXPECT_EQ(ps_at_b->source, a_addr);
  // worker:1 never started: missing per its own sidecar, and so in the other's view too.
  auto w1_at_a = a.WaitForState("worker:1", TaskState::kMissing, seconds(10));
  ASSERT_TRUE(w1_at_a) << a.Describe();
  EXPECT_EQ(a.Tasks().size(), 3u);
  EXPECT_EQ(a.Tasks("?local=1").size(), 1u);
  // A dead task on B's side shows on A.
  w0->Signal(SIGKILL);
  ASSERT_TRUE(a.WaitForState("worker:0", TaskState::kDead, seconds(10))) << a.Describe();
}

TEST(SidecarClusterView, PartitionWhenPeersCannotReachAnUpTask) {
  std::string ps_address = FreeAddress();
  std::string worker_address = FreeAddress();
  Cluster cluster = {{"ps", {ps_address}}, {"worker", {worker_address}}};
  auto ps = StartFakeTask(ps_address, "ps", 0, {"--phase", "serving"});
  auto worker =
      StartFakeTask(worker_address, "worker", 0, {"--peer_failing", "ps:0@" + ps_address});
  int port_a = FreePort();
  int port_b = FreePort();
  Sidecar a(cluster,
            {"--http_port", std::to_string(port_a), "--local_tasks", "ps:0", "--peer_sidecars",
             "127.0.0.1:" + std::to_string(port_b), "--peer_poll_ms", "200"});
  Sidecar b(cluster,
            {"--http_port", std::to_string(port_b), "--local_tasks", "worker:0", "--peer_sidecars",
             "127.0.0.1:" + std::to_string(port_a), "--peer_poll_ms", "200"});
  // Up for its own sidecar, first-hand ...
  auto local = a.Tasks("?local=1");
  ASSERT_TRUE(a.WaitForState("worker:0", TaskState::kUp, seconds(20))) << a.Describe();
  // ... but the cluster view says partition.
  auto ps_view = a.WaitForState("ps:0", TaskState::kUnreachable, seconds(20));
  ASSERT_TRUE(ps_view) << a.Describe();
  EXPECT_NE(ps_view->reason.find("partition"), std::string::npos) << ps_view->reason;
  EXPECT_NE(ps_view->reason.find("worker:0 cannot reach it"), std::string::npos) << ps_view->reason;
  ASSERT_TRUE(b.WaitForState("ps:0", TaskState::kUnreachable, seconds(10))) << b.Describe();
  const std::string metrics = a.Get("/metrics");
  EXPECT_NE(metrics.find("trainscope_task_up{cluster=\"default\",role=\"ps\",task=\"0\"} 1"),
            std::string::npos);
  // What the TrainscopeTaskPartitioned alert keys on.
  EXPECT_NE(
      metrics.find("trainscope_task_partitioned{cluster=\"default\",role=\"ps\",task=\"0\"} 1"),
      std::string::npos)
      << metrics;
  EXPECT_NE(
      metrics.find("trainscope_task_partitioned{cluster=\"default\",role=\"worker\",task=\"0\"} 0"),
      std::string::npos);
}

TEST(SidecarClusterView, ServiceDiscoveryListsMetricsEndpoints) {
  std::string ps_address = FreeAddress();
  std::string worker_address = FreeAddress();
  auto ps = StartFakeTask(ps_address, "ps", 0,
                          {"--phase", "serving", "--metrics_address", "127.0.0.1:19999"});
  auto worker = StartFakeTask(worker_address, "worker", 0);
  Sidecar sidecar({{"ps", {ps_address}}, {"worker", {worker_address}}}, {});
  ASSERT_TRUE(sidecar.WaitForState("ps:0", TaskState::kUp, seconds(10))) << sidecar.Describe();
  EXPECT_EQ(sidecar.Get("/api/v1/sd"),
            "[{\"labels\":{\"cluster\":\"default\",\"role\":\"ps\",\"task\":\"0\"},"
            "\"targets\":[\"127.0.0.1:19999\"]}]");
}

}  // namespace
}  // namespace trainscope::testing
