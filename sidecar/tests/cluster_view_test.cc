// Merging views of several sidecars, blocked-reason annotations and partitions.
#include "trainscope/sidecar/cluster_view.h"

#include <gtest/gtest.h>

namespace trainscope::sidecar {
namespace {

ClusterSpec Spec() {
  return ParseTfConfig(
             R"({"cluster": {"ps": ["127.0.0.1:2223"], "worker": ["127.0.0.1:2224", "10.0.0.2:2224"]}})",
             false)
      ->cluster;
}

TaskView View(TaskRef t, TaskState s, std::string address = "") {
  TaskView v;
  v.cluster = "c";
  v.task = std::move(t);
  v.state = s;
  v.address = address;
  v.observed_at = 10;
  return v;
}

TEST(MergeViews, LocalWinsPeersFillTheRestUnknownIsUnreachable) {
  std::vector<TaskView> local = {View({"ps", 0}, TaskState::kUp)};
  PeerReport good{"10.0.0.2:9400",
                  true,
                  "",
                  {View({"worker", 1}, TaskState::kUp), View({"ps", 0}, TaskState::kDead)}};
  TaskView other_cluster = View({"worker", 0}, TaskState::kUp);
  other_cluster.cluster = "other";
  good.views.push_back(other_cluster);
  PeerReport bad{"10.0.0.3:9400", false, "sent nonsense: not JSON", {}};
  auto merged = MergeViews("c", Spec(), local, {good, bad}, 100);
  ASSERT_EQ(merged.size(), 3u);
  EXPECT_EQ(merged[0].task.ShortName(), "ps:0");
  EXPECT_EQ(merged[0].state, TaskState::kUp);
  EXPECT_EQ(merged[1].task.ShortName(), "worker:0");
  EXPECT_EQ(merged[1].state, TaskState::kUnreachable);
  EXPECT_NE(merged[1].reason.find("10.0.0.3:9400 (sent nonsense: not JSON)"), std::string::npos);
  EXPECT_EQ(merged[2].state, TaskState::kUp);
  EXPECT_EQ(merged[2].source, "10.0.0.2:9400");
  EXPECT_EQ(merged[2].address, "10.0.0.2:2224");
}

TEST(AnnotateBlocked, SaysWhereThePeerReallyListens) {
  TaskView worker = View({"worker", 0}, TaskState::kBlocked);
  worker.reason = "waiting 12 s in CreateSession for ps:0 at 127.0.0.1:2222 (connection refused)";
  worker.blocked_on.push_back({{"ps", 0}, "127.0.0.1:2222", 12, "connection refused"});
  TaskView ps = View({"ps", 0}, TaskState::kUp);
  ps.listen_address = "127.0.0.1:2223";
  std::vector<TaskView> views = {worker, ps};
  AnnotateBlocked(views, Spec());
  EXPECT_EQ(views[0].reason,
            "waiting 12 s in CreateSession for ps:0 at 127.0.0.1:2222 (connection refused); "
            "ps:0 is listening on 127.0.0.1:2223, not 127.0.0.1:2222: fix the cluster spec");
}

TEST(AnnotateBlocked, SaysThePeerIsDeadOrMissing) {
  TaskView worker = View({"worker", 0}, TaskState::kBlocked);
  worker.reason = "waiting";
  worker.blocked_on.push_back({{"ps", 0}, "127.0.0.1:2223", 12, "connection refused"});
  TaskView ps = View({"ps", 0}, TaskState::kMissing);
  ps.reason = "never answered";
  std::vector<TaskView> views = {worker, ps};
  AnnotateBlocked(views, Spec());
  EXPECT_EQ(views[0].reason,
            "waiting; ps:0 is missing: it has not answered this sidecar either; is it started?");
  views[0].reason = "waiting";
  views[1].state = TaskState::kDead;
  views[1].reason = "process 7 exited";
  AnnotateBlocked(views, Spec());
  EXPECT_EQ(views[0].reason, "waiting; ps:0 is dead (process 7 exited)");
}

TEST(MarkPartitions, UpTaskThatPeersCannotReach) {
  TaskView ps = View({"ps", 0}, TaskState::kUp, "127.0.0.1:2223");
  TaskView worker = View({"worker", 0}, TaskState::kUp);
  worker.peers.push_back(
      {{"ps", 0}, "127.0.0.1:2223", false, 5, "connection timed out", 10, 0, ""});
  std::vector<TaskView> views = {ps, worker};
  MarkPartitions(views, 100);
  EXPECT_EQ(views[0].state, TaskState::kUnreachable);
  EXPECT_NE(views[0].reason.find("partition"), std::string::npos);
  EXPECT_NE(views[0].reason.find("worker:0 cannot reach it at 127.0.0.1:2223"), std::string::npos);
  EXPECT_EQ(views[1].state, TaskState::kUp);
  // A short hiccup is not a partition.
  views = {ps, worker};
  views[1].peers[0].seconds_since_success = 1;
  MarkPartitions(views, 100);
  EXPECT_EQ(views[0].state, TaskState::kUp);
  // A ps that answers too slowly is reached: slow, not partitioned.
  views = {ps, worker};
  views[1].peers[0].last_error = "no answer within 1000 ms";
  MarkPartitions(views, 100);
  EXPECT_EQ(views[0].state, TaskState::kUp);
  views[1].peers[0].last_error = "DEADLINE_EXCEEDED: Deadline Exceeded";
  MarkPartitions(views, 100);
  EXPECT_EQ(views[0].state, TaskState::kUp);
}

TEST(SameAddress, WildcardAndLoopbackCompareByPort) {
  EXPECT_TRUE(SameAddress("0.0.0.0:1", "10.0.0.1:1"));
  EXPECT_TRUE(SameAddress("localhost:1", "127.0.0.1:1"));
  EXPECT_FALSE(SameAddress("127.0.0.1:1", "127.0.0.1:2"));
  EXPECT_FALSE(SameAddress("10.0.0.1:1", "10.0.0.2:1"));
}

}  // namespace
}  // namespace trainscope::sidecar
