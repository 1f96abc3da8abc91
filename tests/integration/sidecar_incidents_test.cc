// Incidents for real (issue 34): a loopback cluster of 2 ps and 2 workers, one real sidecar, a ps
// killed with kill -9 and started again 6 s later. One incident names it, holds both workers and
// says what it cost; the ledger's series are on /metrics. Then the store in trouble: a file that
// is not one, a dir that cannot be one, a disk that fills up under a running sidecar.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "browser.h"
#include "nlohmann/json.hpp"
#include "sidecar_harness.h"
#include "skip.h"
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

// The incidents of a sidecar just started, once it has put back what it kept (10 s at most).
nlohmann::json KeptIncidents(Sidecar& sidecar) {
  nlohmann::json kept;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  do {
    kept = Incidents(sidecar);
    if (!kept.empty()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  } while (std::chrono::steady_clock::now() < until);
  return kept;
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
  // Nothing is dead yet. (A loaded machine, a sanitizer's, may delay a heartbeat at the start:
  // a short slow incident that costs no training. It is not the one this test is about.)
  std::set<std::string> before;
  for (const auto& in : Incidents(sidecar)) {
    EXPECT_NE(in["kind"], "dead") << in.dump(1);
    before.insert(in["id"].get<std::string>());
  }
  // The incidents opened since the fault.
  auto since_fault = [&] {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& in : Incidents(sidecar)) {
      if (!before.contains(in["id"].get<std::string>())) out.push_back(in);
    }
    return out;
  };

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
    list = since_fault();
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
  const nlohmann::json kept = KeptIncidents(again);
  ASSERT_GE(kept.size(), 1u) << again.Get("/api/v1/incidents");
  auto it = std::find_if(kept.begin(), kept.end(), [&](const auto& k) { return k["id"] == id; });
  ASSERT_NE(it, kept.end()) << kept.dump(1);
  EXPECT_EQ((*it)["lost_seconds"], in["lost_seconds"]) << kept.dump(1);
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

// A tmpfs of 2 MiB on a fresh dir under /tmp while it lives; mounted() is false where this
// process may not mount (not root: the test is then skipped).
class SmallDisk {
 public:
  SmallDisk() {
    char name[] = "/tmp/incidents-small-disk.XXXXXX";
    if (mkdtemp(name) == nullptr) return;
    path_ = name;
    mounted_ = mount("tmpfs", name, "tmpfs", MS_NOSUID | MS_NODEV, "size=2m,mode=0700") == 0;
    if (!mounted_) why_ = std::strerror(errno);
  }
  ~SmallDisk() {
    if (mounted_) umount2(path_.c_str(), MNT_DETACH);
    if (!path_.empty()) rmdir(path_.c_str());
  }
  SmallDisk(const SmallDisk&) = delete;
  SmallDisk& operator=(const SmallDisk&) = delete;
  bool mounted() const { return mounted_; }
  const std::string& why() const { return why_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  bool mounted_ = false;
  std::string why_ = "no temporary dir";
};

// Writes zeros to `file` until its file system has no room left; false if it never said so.
bool FillUp(const std::string& file) {
  const int fd = open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return false;
  const std::string zeros(64 << 10, '\0');
  bool full = false;
  for (int i = 0; i < (1 << 14) && !full; ++i) {  // 1 GiB at most: a disk that is not small.
    const ssize_t n = write(fd, zeros.data(), zeros.size());
    if (n < 0) {
      full = errno == ENOSPC;
      if (!full) break;
    }
  }
  close(fd);
  return full;
}

// How often `part` occurs in `text`.
int Count(const std::string& text, const std::string& part) {
  int n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

// A disk that fills up under a running sidecar loses it nothing: it goes on calling a killed ps
// dead and keeps its incident in memory, says once (not once a second) that the store takes no
// writes and why, says so on /metrics and in /api/v1/incidents; once there is room again the
// incident is written (a sidecar killed then and started again on the same dir has it).
TEST(SidecarIncidents, AFullDiskIsSaidOnceDetectionGoesOnAndTheStoreCatchesUpWithRoomAgain) {
  SmallDisk disk;
  TRAINSCOPE_SKIP_UNLESS(disk.mounted(), "cannot mount a small tmpfs here: " + disk.why());
  const std::string dir = disk.path();
  const std::string db = dir + "/trainscope-state.db";
  Cluster cluster = {{"ps", {FreeAddress(), FreeAddress()}}, {"worker", {FreeAddress()}}};
  auto ps0 = StartTask(cluster, "ps", 0);
  auto ps1 = StartTask(cluster, "ps", 1);
  auto w0 = StartTask(cluster, "worker", 0, LongTraining());
  auto first = std::make_unique<Sidecar>(cluster, std::vector<std::string>{"--state_dir", dir});
  Sidecar& sidecar = *first;
  ASSERT_TRUE(sidecar.WaitForState("worker:0", TaskState::kUp, seconds(30), "training"))
      << sidecar.Describe();
  ASSERT_TRUE(sidecar.process().WaitForOutput("0 incidents kept in " + db, seconds(5)))
      << sidecar.process().Output();
  EXPECT_NE(sidecar.Get("/metrics").find("trainscope_state_store_ok{cluster=\"default\"} 1"),
            std::string::npos);

  const std::string filler = dir + "/filler";
  ASSERT_TRUE(FillUp(filler));
  ps1->Signal(SIGKILL);
  ps1->Wait(seconds(10));
  ASSERT_TRUE(sidecar.WaitForState("ps:1", TaskState::kDead, seconds(10))) << sidecar.Describe();
  nlohmann::json body;
  const auto until = std::chrono::steady_clock::now() + seconds(10);
  do {
    body = nlohmann::json::parse(sidecar.Get("/api/v1/incidents"), nullptr, false);
    if (!body.is_discarded() && body.value("store_error", "") != "" &&
        body["incidents"].size() == 1) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  } while (std::chrono::steady_clock::now() < until);
  ASSERT_FALSE(body.is_discarded());
  ASSERT_EQ(body["incidents"].size(), 1u) << body.dump(1);
  EXPECT_EQ(body["incidents"][0]["cause"]["task"], "ps:1") << body.dump(1);
  const std::string id = body["incidents"][0]["id"];
  const std::string error = body.value("store_error", "");
  EXPECT_NE(error.find(db), std::string::npos) << error;
  EXPECT_NE(error.find("database or disk is full"), std::string::npos) << error;
  EXPECT_NE(sidecar.Get("/metrics").find("trainscope_state_store_ok{cluster=\"default\"} 0"),
            std::string::npos);

  // The status page says it under the incidents (where Chromium is installed: the page's own
  // test requires it).
  const auto full_since = std::chrono::steady_clock::now();
  if (!ChromiumPath().empty()) {
    absl::StatusOr<std::string> dom =
        RenderInChromium("http://" + sidecar.http() + "/", seconds(30));
    ASSERT_TRUE(dom.ok()) << dom.status();
    const std::string line = Dom(*dom).Text("store-error");
    std::printf("[figure] the page: %s\n", line.c_str());
    EXPECT_EQ(line.rfind("Not written to disk: state store " + db, 0), 0u) << line;
    EXPECT_NE(line.find("database or disk is full"), std::string::npos) << line;
  }

  // At least three more seconds full (three more writes refused), and still one line about it;
  // the sidecar still sees its tasks as they are.
  std::this_thread::sleep_until(full_since + seconds(3));
  const std::string full_log = sidecar.process().Output();
  EXPECT_EQ(Count(full_log, "[warning] state store " + db), 1) << full_log;
  EXPECT_EQ(Count(full_log, "database or disk is full"), 1) << full_log;
  EXPECT_EQ(Count(full_log, "Nothing is lost"), 1) << full_log;
  EXPECT_TRUE(sidecar.WaitForState("ps:0", TaskState::kUp, seconds(1))) << sidecar.Describe();
  EXPECT_TRUE(sidecar.WaitForState("ps:1", TaskState::kDead, seconds(1))) << sidecar.Describe();

  ASSERT_EQ(unlink(filler.c_str()), 0);
  ASSERT_TRUE(
      sidecar.process().WaitForOutput("state store " + db + ": kept again after ", seconds(10)))
      << sidecar.process().Output();
  // The two lines about the store, as a user reads them.
  for (absl::string_view line : absl::StrSplit(sidecar.process().Output(), '\n')) {
    if (absl::StrContains(line, "state store " + db)) {
      std::printf("[figure] %s\n", std::string(line).c_str());
    }
  }
  EXPECT_NE(sidecar.process().Output().find(" caught up"), std::string::npos);
  body = nlohmann::json::parse(sidecar.Get("/api/v1/incidents"), nullptr, false);
  EXPECT_EQ(body.value("store_error", "?"), "") << body.dump(1);
  EXPECT_NE(sidecar.Get("/metrics").find("trainscope_state_store_ok{cluster=\"default\"} 1"),
            std::string::npos);

  // Killed, so that nothing is written on the way out: what the store holds, it took while
  // running.
  first->process().Signal(SIGKILL);
  first->process().Wait(seconds(10));
  first.reset();
  Sidecar again(cluster, {"--state_dir", dir});
  const nlohmann::json kept = KeptIncidents(again);
  std::set<std::string> ids;
  for (const auto& in : kept) ids.insert(in["id"].get<std::string>());
  EXPECT_EQ(ids.count(id), 1u) << kept.dump(1);
}

}  // namespace
}  // namespace trainscope::testing
