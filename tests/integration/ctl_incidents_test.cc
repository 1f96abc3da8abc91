// trainscopectl's incident commands for real (issue 34): a ps and a worker on loopback, one real
// sidecar, the worker's training thread deadlocked (trainscopectl fault --deadlock_training). The
// table names the incident the API lists and its cause; the bundle is a .tar.gz that Debian's tar
// lists and unpacks; unknown ids, missing folders and existing files are refused, saying why.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>

#include "sidecar_harness.h"
#include "trainscope/common/http_client.h"
#include "trainscope/sidecar/api.h"

namespace trainscope::testing {
namespace {

namespace pb = sidecar::pb;
using sidecar::TaskState;
using std::chrono::seconds;

// trainscopectl with `args`: its output (stdout and stderr) and exit code.
std::pair<std::string, int> Ctl(const std::vector<std::string>& args) {
  Process ctl(BinPath("trainscopectl"), args);
  auto code = ctl.Wait(seconds(60));
  return {ctl.Output(), code.value_or(-1)};
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The first open incident of /api/v1/incidents whose cause is `task`, waited for.
std::optional<pb::Incident> WaitForOpenIncident(Sidecar& s, const std::string& task) {
  const auto deadline = std::chrono::steady_clock::now() + seconds(30);
  while (std::chrono::steady_clock::now() < deadline) {
    auto list = sidecar::ParseIncidentListJson(s.Get("/api/v1/incidents"));
    if (list.ok()) {
      for (const pb::Incident& in : list->incidents()) {
        if (in.open() && in.cause().task() == task) return in;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  return std::nullopt;
}

TEST(CtlIncidents, TheTableAndTheBundleOfADeadlockedWorkersIncident) {
  StalledWorker stalled;
  ASSERT_EQ(stalled.Start(), "");
  Sidecar& sidecar = *stalled.sidecar;
  std::optional<pb::Incident> incident = WaitForOpenIncident(sidecar, "worker:0");
  ASSERT_TRUE(incident) << sidecar.Get("/api/v1/incidents") << "\n" << sidecar.Describe();
  const std::string id = incident->id();
  // As root the sidecar snapshots the stalled worker (ptrace) and keeps it as the incident's
  // evidence: wait for it, so that the bundle's stacks/worker_0.txt has it.
  const bool ptrace = geteuid() == 0;
  for (auto until = std::chrono::steady_clock::now() + seconds(20);
       ptrace && std::chrono::steady_clock::now() < until;
       std::this_thread::sleep_for(std::chrono::milliseconds(200))) {
    auto full = sidecar::ParseIncidentJson(sidecar.Get("/api/v1/incidents/" + id));
    if (full.ok() && std::any_of(full->evidence().begin(), full->evidence().end(),
                                 [](const pb::IncidentEvidence& e) { return e.has_snapshot(); })) {
      break;
    }
  }

  // The table: the incident's id, open, its cause; the goodput under it; exit 1 (one is open).
  auto [table, table_code] = Ctl({"incidents", "--sidecar", sidecar.http()});
  std::printf("[figure] trainscopectl incidents:\n%s", table.c_str());
  EXPECT_EQ(table_code, 1) << table;
  std::string row;
  std::istringstream lines(table);
  for (std::string line; std::getline(lines, line);) {
    EXPECT_LE(line.size(), 100u) << line;
    if (line.rfind(id, 0) == 0) row = line;
  }
  ASSERT_FALSE(row.empty()) << table;
  EXPECT_NE(row.find(" open "), std::string::npos) << row;
  EXPECT_NE(row.find(" " + incident->kind() + " "), std::string::npos) << row;
  EXPECT_NE(row.find(" worker:0 "), std::string::npos) << row;
  EXPECT_NE(table.find("goodput"), std::string::npos) << table;
  auto [json, json_code] = Ctl({"incidents", "--sidecar", sidecar.http(), "--json"});
  auto parsed = sidecar::ParseIncidentListJson(json);
  ASSERT_TRUE(parsed.ok()) << json;
  EXPECT_EQ(parsed->incidents(0).id(), id);

  // One incident in full.
  auto [text, text_code] = Ctl({"incident", id, "--sidecar", sidecar.http()});
  EXPECT_EQ(text_code, 0) << text;
  EXPECT_EQ(text.rfind("incident " + id + " (open, ", 0), 0u) << text;
  for (const char* part :
       {"\ncause:    task worker:0", "\naffected tasks (", "\ntimeline:\n", "\nevidence ("}) {
    EXPECT_NE(text.find(part), std::string::npos) << part << " in\n" << text;
  }

  // /api/v1/evidence: this sidecar's record of it; a node that is not a member, or no incident
  // named, is refused, saying why.
  auto here = sidecar::ParseNodeEvidenceJson(sidecar.Get("/api/v1/evidence?incident=" + id));
  ASSERT_TRUE(here.ok()) << here.status();
  EXPECT_TRUE(here->held());
  EXPECT_EQ(here->incident().id(), id);
  auto stranger = trainscope::HttpGet(
      sidecar.http(), "/api/v1/evidence?incident=" + id + "&node=10.0.0.9%3A4317", 2000);
  ASSERT_TRUE(stranger.ok()) << stranger.status();
  EXPECT_EQ(stranger->status, 404) << stranger->body;
  EXPECT_NE(stranger->body.find("no node 10.0.0.9:4317 among this sidecar's members"),
            std::string::npos)
      << stranger->body;
  auto unnamed = trainscope::HttpGet(sidecar.http(), "/api/v1/evidence?from=x", 2000);
  ASSERT_TRUE(unnamed.ok()) << unnamed.status();
  EXPECT_EQ(unnamed->status, 400) << unnamed->body;

  // The bundle.
  char dir_template[] = "/tmp/ctl-incidents.XXXXXX";
  ASSERT_NE(mkdtemp(dir_template), nullptr);
  const std::string dir = dir_template;
  const std::string bundle = dir + "/f.tar.gz";
  auto [wrote, wrote_code] = Ctl({"incident", id, "--sidecar", sidecar.http(), "--bundle", bundle});
  std::printf("[figure] trainscopectl incident %s --bundle f.tar.gz:\n%s", id.c_str(),
              wrote.c_str());
  ASSERT_EQ(wrote_code, 0) << wrote;
  auto [listing, tar_code] = Shell("tar -tzf '" + bundle + "'");
  ASSERT_EQ(tar_code, 0) << listing;
  std::printf("[figure] tar -tzf f.tar.gz:\n%s", listing.c_str());
  for (const char* file :
       {"README.txt", "incident.json", "timeline.txt", "stacks/worker_0.txt",
        "stacks/worker_0.now.txt", "traces/slow.json", "traces/errors.json", "tasks.json"}) {
    EXPECT_NE(listing.find(std::string(file) + "\n"), std::string::npos) << file << "\n" << listing;
  }
  const std::string out = dir + "/out";
  ASSERT_EQ(system(("mkdir '" + out + "' && tar -xzf '" + bundle + "' -C '" + out + "'").c_str()),
            0);
  auto again = sidecar::ParseIncidentJson(Slurp(out + "/incident.json"));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->id(), id);
  const std::string readme = Slurp(out + "/README.txt");
  std::printf("[figure] README.txt:\n%s", readme.c_str());
  EXPECT_NE(readme.find(id), std::string::npos) << readme;
  EXPECT_NE(readme.find(sidecar.http()), std::string::npos) << readme;
  const std::string stacks = Slurp(out + "/stacks/worker_0.txt");
  bool snapshot = false;
  for (const pb::IncidentEvidence& e : again->evidence()) snapshot |= e.has_snapshot();
  EXPECT_TRUE(snapshot || !ptrace) << Slurp(out + "/incident.json");
  if (snapshot) {  // Snapshots need ptrace (root): without, the file says none is kept.
    EXPECT_NE(stacks.find("=== worker:0 pid "), std::string::npos) << stacks;
  } else {
    EXPECT_NE(stacks.find("no snapshot of worker:0"), std::string::npos) << stacks;
  }

  // Bad inputs: each refused with words and a non-zero code, nothing half written.
  const std::string before = Slurp(bundle);
  auto [exists, exists_code] =
      Ctl({"incident", id, "--sidecar", sidecar.http(), "--bundle", bundle});
  EXPECT_EQ(exists_code, 1) << exists;
  EXPECT_NE(exists.find(bundle + " exists (--force overwrites it)"), std::string::npos) << exists;
  EXPECT_TRUE(Slurp(bundle) == before);
  auto [forced, forced_code] =
      Ctl({"incident", id, "--sidecar", sidecar.http(), "--bundle", bundle, "--force"});
  EXPECT_EQ(forced_code, 0) << forced;

  const std::string nowhere = dir + "/no/such/folder/f.tar.gz";
  auto [missing_dir, missing_dir_code] =
      Ctl({"incident", id, "--sidecar", sidecar.http(), "--bundle", nowhere});
  EXPECT_EQ(missing_dir_code, 1) << missing_dir;
  EXPECT_NE(missing_dir.find("cannot write the bundle to " + nowhere), std::string::npos)
      << missing_dir;
  EXPECT_NE(missing_dir.find("No such file or directory"), std::string::npos) << missing_dir;

  auto [unknown, unknown_code] = Ctl({"incident", "inc-000000000000", "--sidecar", sidecar.http()});
  EXPECT_EQ(unknown_code, 1) << unknown;
  EXPECT_NE(unknown.find("no incident inc-000000000000 here"), std::string::npos) << unknown;
  auto [bad_id, bad_id_code] = Ctl({"incident", "../tasks", "--sidecar", sidecar.http()});
  EXPECT_EQ(bad_id_code, 1) << bad_id;
  EXPECT_NE(bad_id.find("is not an incident id"), std::string::npos) << bad_id;
  auto [unknown_bundle, unknown_bundle_code] = Ctl(
      {"incident", "inc-000000000000", "--sidecar", sidecar.http(), "--bundle", dir + "/u.tar.gz"});
  EXPECT_EQ(unknown_bundle_code, 1) << unknown_bundle;
  EXPECT_NE(access((dir + "/u.tar.gz").c_str(), F_OK), 0);

  // Nobody at the address; something that is not a sidecar (the worker's gRPC port).
  auto [unreachable, unreachable_code] = Ctl({"incidents", "--sidecar", FreeAddress()});
  EXPECT_EQ(unreachable_code, 2) << unreachable;
  EXPECT_NE(unreachable.find("cannot ask the sidecar at"), std::string::npos) << unreachable;
  auto [not_http, not_http_code] = Ctl({"incidents", "--sidecar", stalled.cluster["worker"][0]});
  EXPECT_EQ(not_http_code, 2) << not_http;
  EXPECT_NE(not_http.find("trainscopectl: "), std::string::npos) << not_http;

  (void)system(("rm -rf '" + dir + "'").c_str());
}

}  // namespace
}  // namespace trainscope::testing
