// Incidents for real (issue 34): a loopback cluster of 2 ps and 2 workers, one real sidecar, a ps
// killed with kill -9 and started again 6 s later. One incident names it, holds both workers and
// says what it cost; the ledger's series are on /metrics.
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <string>
#include <thread>

#include "nlohmann/json.hpp"
#include "sidecar_harness.h"
#include "trainscope/sidecar/api.h"

namespace trainscope::testing {
namespace {

using sidecar::TaskState;
using std::chrono::seconds;

// The incidents of /api/v1/incidents; an empty array on any error.
nlohmann::json Incidents(Sidecar& sidecar) {
  auto body = nlohmann::json::parse(sidecar.Get("/api/v1/incidents"), nullptr, false);
  if (body.is_discarded() || !body.contains("incidents")) return nlohmann::json::array();
  return body["incidents"];
}

TEST(SidecarIncidents, APsKilledFor6sIsOneIncidentHoldingBothWorkersWithItsCost) {
  Cluster cluster = {{"ps", {FreeAddress(), FreeAddress()}},
                     {"worker", {FreeAddress(), FreeAddress()}}};
  char dir_template[] = "/tmp/incidents-ckpt.XXXXXX";
  ASSERT_NE(mkdtemp(dir_template), nullptr);
  const std::vector<std::string> ckpt = {"--checkpoint_dir", dir_template, "--checkpoint_every_s",
                                         "1"};
  char state_template[] = "/tmp/incidents-state.XXXXXX";
  ASSERT_NE(mkdtemp(state_template), nullptr);
  const std::string state_dir = state_template;
  auto ps0 = StartTask(cluster, "ps", 0, ckpt);
  auto ps1 = StartTask(cluster, "ps", 1, ckpt);
  auto w0 = StartTask(cluster, "worker", 0, LongTraining(ckpt));
  auto w1 = StartTask(cluster, "worker", 1, LongTraining(ckpt));
  auto first =
      std::make_unique<Sidecar>(cluster, std::vector<std::string>{"--state_dir", state_dir});
  Sidecar& sidecar = *first;
  for (const char* w : {"worker:0", "worker:1"}) {
    ASSERT_TRUE(sidecar.WaitForState(w, TaskState::kUp, seconds(30), "training"))
        << sidecar.Describe();
  }
  ASSERT_TRUE(w0->WaitForOutput("checkpoint of step", seconds(20))) << w0->Output();
  EXPECT_EQ(Incidents(sidecar).size(), 0u) << sidecar.Get("/api/v1/incidents");

  ps1->Signal(SIGKILL);
  ps1->Wait(seconds(10));
  ASSERT_TRUE(sidecar.WaitForState("ps:1", TaskState::kDead, seconds(10))) << sidecar.Describe();
  std::this_thread::sleep_for(seconds(6));
  ps1 = StartTask(cluster, "ps", 1, ckpt);
  for (const char* w : {"worker:0", "worker:1"}) {
    ASSERT_TRUE(sidecar.WaitForState(w, TaskState::kUp, seconds(40), "training"))
        << sidecar.Describe() << "\n--- incidents ---\n"
        << sidecar.Get("/api/v1/incidents") << "\n--- worker:0 ---\n"
        << w0->Output();
  }

  // Closed once both workers train again (a tick or two later).
  nlohmann::json list;
  const auto until = std::chrono::steady_clock::now() + seconds(10);
  do {
    list = Incidents(sidecar);
    if (list.size() == 1 && !list[0].value("open", true)) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  } while (std::chrono::steady_clock::now() < until);
  ASSERT_EQ(list.size(), 1u) << list.dump(1);
  const nlohmann::json& in = list[0];
  EXPECT_FALSE(in.value("open", true)) << in.dump(1);
  EXPECT_EQ(in["cause"]["kind"], "task") << in.dump(1);
  EXPECT_EQ(in["cause"]["task"], "ps:1") << in.dump(1);
  EXPECT_EQ(in["kind"], "dead") << in.dump(1);
  std::set<std::string> held;
  for (const auto& a : in["affected"]) {
    if (a["task"] != "ps:1") held.insert(a["task"].get<std::string>());
  }
  EXPECT_EQ(held, (std::set<std::string>{"worker:0", "worker:1"})) << in.dump(1);
  // Both workers waited at least the 6 s the ps was down.
  EXPECT_GE(in["lost_seconds"].get<double>(), 2 * 5.0) << in.dump(1);
  EXPECT_GE(in["ended"].get<double>() - in["started"].get<double>(), 6.0) << in.dump(1);
  EXPECT_NE(in["summary"].get<std::string>().find("ps:1 dead"), std::string::npos) << in.dump(1);
  EXPECT_NE(in["summary"].get<std::string>().find("holding worker:0 and worker:1"),
            std::string::npos)
      << in.dump(1);

  std::printf("[figure] %s; lost %.1f s\n", in["summary"].get<std::string>().c_str(),
              in["lost_seconds"].get<double>());
  const std::string id = in["id"];
  auto one = nlohmann::json::parse(sidecar.Get("/api/v1/incidents/" + id), nullptr, false);
  ASSERT_FALSE(one.is_discarded());
  EXPECT_EQ(one["id"], id);
  EXPECT_GE(one["timeline"].size(), 3u) << one.dump(1);
  EXPECT_EQ(sidecar.Get("/api/v1/incidents/inc-000000000000"), "");  // 404

  auto body = nlohmann::json::parse(sidecar.Get("/api/v1/incidents"), nullptr, false);
  const double goodput = body["goodput"]["goodput"].get<double>();
  EXPECT_GT(goodput, 0.0) << body["goodput"].dump(1);
  EXPECT_LT(goodput, 1.0) << body["goodput"].dump(1);
  EXPECT_GE(body["goodput"]["lost_by_kind"]["dead"].get<double>(), 10.0) << body.dump(1);

  const std::string metrics = sidecar.Get("/metrics");
  EXPECT_NE(metrics.find("trainscope_training_seconds_total{cluster=\"default\",role=\"worker\","
                         "task=\"0\",outcome=\"waiting\"}"),
            std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("trainscope_incident_lost_seconds_total{cluster=\"default\","
                         "kind=\"dead\"}"),
            std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("trainscope_incidents_open{cluster=\"default\"} 0"), std::string::npos)
      << metrics;

  // A sidecar stopped as systemd stops it (SIGTERM) and started again on the same --state_dir
  // still holds it, and its cost to the last tick.
  first->process().Signal(SIGTERM);
  EXPECT_EQ(first->process().Wait(seconds(10)), 0) << first->process().Output();
  first.reset();
  Sidecar again(cluster, {"--state_dir", state_dir});
  nlohmann::json kept;
  const auto until_kept = std::chrono::steady_clock::now() + seconds(10);
  do {
    kept = Incidents(again);
    if (!kept.empty()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  } while (std::chrono::steady_clock::now() < until_kept);
  ASSERT_GE(kept.size(), 1u) << again.Get("/api/v1/incidents");
  EXPECT_EQ(kept[kept.size() - 1]["id"], id) << kept.dump(1);
  EXPECT_EQ(kept[kept.size() - 1]["lost_seconds"], in["lost_seconds"]) << kept.dump(1);
  auto after = nlohmann::json::parse(again.Get("/api/v1/incidents"), nullptr, false);
  EXPECT_GE(after["goodput"]["lost_by_kind"]["dead"].get<double>(),
            body["goodput"]["lost_by_kind"]["dead"].get<double>() - 1.5)
      << after.dump(1);
  (void)system(("rm -rf " + std::string(dir_template) + " " + state_dir).c_str());
}

// A store file that is not ours is set aside with a sentence that says where, and the sidecar
// serves with a fresh one; a --state_dir it cannot use stops it with a clear error.
TEST(SidecarIncidents, AForeignStateFileIsSetAsideAndABadStateDirIsAClearError) {
  char state_template[] = "/tmp/incidents-state.XXXXXX";
  ASSERT_NE(mkdtemp(state_template), nullptr);
  const std::string dir = state_template;
  const std::string file = dir + "/trainscope-state.db";
  {
    std::ofstream out(file);
    out << "not a database, just text a person left here\n";
  }
  Cluster cluster = {{"ps", {FreeAddress()}}};
  {
    Sidecar sidecar(cluster, {"--state_dir", dir});
    ASSERT_TRUE(
        sidecar.process().WaitForOutput("was moved to " + file + ".set-aside-", seconds(10)))
        << sidecar.process().Output();
    auto body = nlohmann::json::parse(sidecar.Get("/api/v1/incidents"), nullptr, false);
    ASSERT_FALSE(body.is_discarded());
    EXPECT_EQ(body["incidents"].size(), 0u);
  }
  int aside = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    aside += e.path().filename().string().rfind("trainscope-state.db.set-aside-", 0) == 0;
  }
  EXPECT_EQ(aside, 1);

  // A path under a regular file cannot be a directory.
  const std::string spec = WriteSpecFile(cluster);
  Process bad(BinPath("trainscope-sidecar"), {"--cluster_spec", spec, "--http_port", "0",
                                              "--grpc_port", "-1", "--state_dir", file + "/sub"});
  EXPECT_NE(bad.Wait(seconds(10)), 0) << bad.Output();
  EXPECT_NE(bad.Output().find("--state_dir: "), std::string::npos) << bad.Output();
  std::filesystem::remove(spec);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace trainscope::testing
