// trainscopectl's incidents in words and an incident's bundle, against a sidecar answered by the
// test (the integration test, tests/integration/ctl_incidents_test.cc, asks a real one).
#include "trainscope/sidecar/incident_bundle.h"

#include <gtest/gtest.h>

#include <map>
#include <sstream>

#include "trainscope/sidecar/incident_text.h"

namespace trainscope::sidecar {
namespace {

constexpr double kNow = 1700000100;

pb::Incident Stalled() {
  pb::Incident in;
  in.set_id("inc-0123456789ab");
  in.set_cluster("default");
  in.set_kind("stalled");
  in.mutable_cause()->set_kind("task");
  in.mutable_cause()->set_task("worker:0");
  in.mutable_cause()->set_node("n1");
  in.set_owner("n1");
  in.set_started(kNow - 40);
  in.set_open(true);
  in.set_summary("worker:0 stalled (steps stuck at 812 for 40 s) for 40 s\x1b[31m");
  in.set_lost_seconds(39.5);
  pb::AffectedTask* a = in.add_affected();
  a->set_task("worker:0");
  a->set_how("stalled");
  a->set_since(kNow - 40);
  a->set_lost_seconds(39.5);
  pb::IncidentEvent* e = in.add_timeline();
  e->set_unix_seconds(kNow - 40);
  e->set_text("worker:0 stalled");
  pb::IncidentEvidence* ev = in.add_evidence();
  ev->set_kind("snapshot");
  ev->set_task("worker:0");
  ev->set_unix_seconds(kNow - 39);
  ev->mutable_snapshot()->set_task("worker:0");
  ev->mutable_snapshot()->set_pid(4242);
  ev->mutable_snapshot()->set_taken_unix(kNow - 39);
  ev->mutable_snapshot()->set_stacks(true);
  ev->mutable_snapshot()->add_threads()->set_name("trainer");
  return in;
}

// A sidecar that answers from a table (path -> status, body); 404 for the rest.
struct FakeSidecar {
  std::map<std::string, std::pair<int, std::string>> answers;
  std::vector<std::string> asked;
  SidecarGet Get() {
    return [this](const std::string& path, int) -> absl::StatusOr<HttpResponse> {
      asked.push_back(path);
      auto it = answers.find(path);
      if (it == answers.end()) return HttpResponse{404, "no such route\n", {}};
      return HttpResponse{it->second.first, it->second.second, {}};
    };
  }
};

pb::RequestSummary Request(double start, double ms, char id = '1') {
  pb::RequestSummary r;
  r.set_trace_id(std::string(32, id));
  r.set_start_unix(start);
  r.set_duration_ms(ms);
  return r;
}

// `text` with each run of spaces and line breaks made one space: the README wraps its lines.
std::string Flat(const std::string& text) {
  std::string out;
  for (char c : text) {
    const bool space = c == ' ' || c == '\n';
    if (!space || out.empty() || out.back() != ' ') out.push_back(space ? ' ' : c);
  }
  return out;
}

const TarFile* Find(const std::vector<TarFile>& files, const std::string& name) {
  for (const TarFile& f : files) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

TEST(IncidentBundle, FetchIncidentSaysWhyItHasNone) {
  FakeSidecar sidecar;
  sidecar.answers["/api/v1/incidents/inc-0123456789ab"] = {200, ApiJson(Stalled())};
  sidecar.answers["/api/v1/incidents/inc-000000000000"] = {
      404, "no incident inc-000000000000 here (GET /api/v1/incidents lists those kept)\n"};
  sidecar.answers["/api/v1/incidents/inc-garbage"] = {200, "<html>hello</html>"};
  sidecar.answers["/api/v1/incidents/inc-other"] = {200, ApiJson(Stalled())};

  auto ok = FetchIncident(sidecar.Get(), "inc-0123456789ab");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->evidence(0).snapshot().pid(), 4242);

  auto missing = FetchIncident(sidecar.Get(), "inc-000000000000");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(missing.status().message(),
            "no incident inc-000000000000 here (GET /api/v1/incidents lists those kept)");
  EXPECT_EQ(FetchIncident(sidecar.Get(), "inc-garbage").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(FetchIncident(sidecar.Get(), "inc-other").status().code(),
            absl::StatusCode::kInvalidArgument);
  const size_t asked = sidecar.asked.size();
  for (const std::string& bad :
       std::vector<std::string>{"", "../tasks", "inc-1?x=1", "inc 1", std::string(65, 'a')}) {
    EXPECT_EQ(FetchIncident(sidecar.Get(), bad).status().code(), absl::StatusCode::kInvalidArgument)
        << bad;
  }
  EXPECT_EQ(sidecar.asked.size(), asked);  // Refused before asking.
}

// What node `node` holds of Stalled(): its record (with a snapshot of pid `pid`, none when 0).
pb::NodeEvidence Held(const std::string& node, int64_t pid) {
  pb::NodeEvidence e;
  e.set_node(node);
  e.set_held(true);
  *e.mutable_incident() = Stalled();
  e.mutable_incident()->clear_evidence();
  if (pid != 0) {
    pb::IncidentEvidence* ev = e.mutable_incident()->add_evidence();
    *ev = Stalled().evidence(0);
    ev->mutable_snapshot()->set_pid(pid);
    ev->mutable_snapshot()->set_taken_unix(kNow - 20);
  }
  return e;
}

TEST(IncidentBundle, GathersEveryNodesRecordStacksAndTracesAndSaysWhatIsMissing) {
  FakeSidecar sidecar;
  pb::TaskList tasks;
  tasks.set_cluster("default");
  tasks.set_node("n1");
  for (const char* n : {"n1", "n2", "n3"}) tasks.add_nodes()->set_node(n);
  tasks.mutable_nodes(1)->set_hostname("host2");
  sidecar.answers["/api/v1/tasks"] = {200, ToJson(tasks)};
  // The window: from a minute before the incident (100 s ago) to now, as it is open.
  const std::string ask =
      "/api/v1/evidence?incident=inc-0123456789ab&from=1700000000.000&to=1700000100.000";
  pb::NodeEvidence here = Held("n1", 0);
  *here.mutable_slow()->add_requests() = Request(kNow - 30, 500, 'a');    // in
  *here.mutable_slow()->add_requests() = Request(kNow - 103, 2000, 'b');  // ends before it
  *here.mutable_slow()->add_requests() = Request(kNow - 99, 1000, 'c');   // in
  sidecar.answers[ask] = {200, ApiJson(here)};
  pb::NodeEvidence owner = Held("n2", 4343);  // The owner kept the snapshot; n1 did not.
  *owner.mutable_slow()->add_requests() = Request(kNow - 30, 500, 'a');  // The same request.
  *owner.mutable_errors()->add_requests() = Request(kNow - 10, 30000, 'd');
  sidecar.answers[ask + "&node=n2"] = {200, ApiJson(owner)};
  sidecar.answers[ask + "&node=n3"] = {
      503, "the sidecar of node n3 (asked for inc-0123456789ab) answered: connection refused\n"};
  // /api/v1/stacks?task=worker%3A0 is not answered: 404.

  pb::Incident in = Stalled();
  in.clear_evidence();
  BundleOptions options{"127.0.0.1:9400", "trainscopectl test", kNow};
  std::vector<TarFile> files = GatherBundle(sidecar.Get(), in, options);
  std::vector<std::string> names;
  for (const TarFile& f : files) names.push_back(f.name);
  EXPECT_EQ(names, (std::vector<std::string>{"README.txt", "incident.json", "timeline.txt",
                                             "tasks.json", "nodes/n2.json", "stacks/worker_0.txt",
                                             "traces/slow.json", "traces/errors.json"}));
  auto again = ParseIncidentJson(Find(files, "incident.json")->data);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->id(), "inc-0123456789ab");
  auto theirs = ParseNodeEvidenceJson(Find(files, "nodes/n2.json")->data);
  ASSERT_TRUE(theirs.ok()) << theirs.status();
  EXPECT_EQ(theirs->incident().evidence(0).snapshot().pid(), 4343);
  // The owner's snapshot, though the sidecar asked kept none.
  const std::string& stacks = Find(files, "stacks/worker_0.txt")->data;
  EXPECT_NE(stacks.find("=== worker:0 pid 4343"), std::string::npos) << stacks;
  auto slow = ParseRequestListJson(Find(files, "traces/slow.json")->data);
  ASSERT_TRUE(slow.ok());
  ASSERT_EQ(slow->requests_size(), 2);  // Each once, in the window, slowest first.
  EXPECT_EQ(slow->requests(0).trace_id(), std::string(32, 'c'));
  auto errors = ParseRequestListJson(Find(files, "traces/errors.json")->data);
  ASSERT_TRUE(errors.ok());
  EXPECT_EQ(errors->requests_size(), 1);  // n2's.
  EXPECT_NE(std::find(sidecar.asked.begin(), sidecar.asked.end(), "/api/v1/stacks?task=worker%3A0"),
            sidecar.asked.end());

  const std::string readme = Flat(Find(files, "README.txt")->data);
  EXPECT_NE(readme.find("sidecar: 127.0.0.1:9400"), std::string::npos) << readme;
  EXPECT_NE(readme.find("kept as the incident's evidence by the sidecar of host2 (n2)"),
            std::string::npos)
      << readme;
  EXPECT_NE(readme.find("nodes/n3.json: HTTP 503: the sidecar of node n3"), std::string::npos)
      << readme;
  EXPECT_NE(readme.find("stacks/worker_0.now.txt: /api/v1/stacks?task=worker%3A0: HTTP 404"),
            std::string::npos)
      << readme;
  EXPECT_EQ(readme.find('\x1b'), std::string::npos);  // The summary's escape is not passed on.
  EXPECT_TRUE(TarGz(files, static_cast<int64_t>(kNow)).ok());
}

TEST(IncidentBundle, FromASidecarWithoutEvidenceItSaysSo) {
  FakeSidecar sidecar;  // Answers nothing: every route 404.
  std::vector<TarFile> files = GatherBundle(sidecar.Get(), Stalled(), {"s", "t", kNow});
  const std::string readme = Flat(Find(files, "README.txt")->data);
  EXPECT_NE(readme.find("nodes/: /api/v1/evidence: HTTP 404"), std::string::npos) << readme;
  EXPECT_NE(readme.find("traces/slow.json: no sidecar answered"), std::string::npos) << readme;
  // The asked sidecar's own record still gives its snapshot.
  EXPECT_NE(Find(files, "stacks/worker_0.txt")->data.find("pid 4242"), std::string::npos);
}

TEST(IncidentBundle, FileNamesAreSafeAndUnique) {
  EXPECT_EQ(SafeFileName("worker:0"), "worker_0");
  EXPECT_EQ(SafeFileName("../../etc/passwd"), "_._.._etc_passwd");
  EXPECT_EQ(SafeFileName(""), "_");
  EXPECT_EQ(SafeFileName(std::string(200, 'a')).size(), 64u);
  pb::Incident in = Stalled();
  in.mutable_affected(0)->set_task("worker:0");
  in.add_affected()->set_task("worker_0");
  in.mutable_cause()->set_task("../x");
  FakeSidecar sidecar;
  std::vector<TarFile> files = GatherBundle(sidecar.Get(), in, {"s", "t", kNow});
  EXPECT_NE(Find(files, "stacks/worker_0.txt"), nullptr);
  EXPECT_NE(Find(files, "stacks/worker_0-2.txt"), nullptr);
  EXPECT_NE(Find(files, "stacks/_._x.txt"), nullptr);
  EXPECT_TRUE(TarGz(files, 0).ok());
}

TEST(IncidentText, TheTableFitsAHundredColumnsAndEndsWithTheGoodput) {
  pb::IncidentList list;
  list.set_cluster("default");
  list.set_node("n1");
  *list.add_incidents() = Stalled();
  pb::Incident closed = Stalled();
  closed.set_id("inc-ffffffffffff");
  closed.set_open(false);
  closed.set_kind("partition");
  closed.mutable_cause()->set_kind("link");
  closed.mutable_cause()->set_peer("ps:1");
  closed.set_ended(kNow - 10);
  closed.set_summary(std::string(300, 'w'));
  *list.add_incidents() = closed;
  pb::Goodput* g = list.mutable_goodput();
  g->set_elapsed_seconds(260);
  g->set_idle_seconds(10);
  g->set_productive_seconds(232.75);
  g->set_goodput(0.931);
  (*g->mutable_lost_by_kind())["dead"] = 12;
  (*g->mutable_lost_by_kind())["partition"] = 3;

  const std::string table = IncidentsTable(list, kNow);
  std::istringstream lines(table);
  std::vector<std::string> all;
  for (std::string line; std::getline(lines, line);) {
    EXPECT_LE(line.size(), 100u) << line;
    all.push_back(line);
  }
  ASSERT_GE(all.size(), 5u) << table;
  EXPECT_EQ(all[0].rfind("ID", 0), 0u) << table;
  EXPECT_EQ(all[1].rfind("inc-0123456789ab open   stalled     worker:0", 0), 0u) << table;
  EXPECT_NE(all[1].find("40 s ago"), std::string::npos) << table;
  EXPECT_NE(table.find("inc-ffffffffffff closed partition   worker:0 -> ps:1"), std::string::npos)
      << table;
  EXPECT_EQ(table.find('\x1b'), std::string::npos);
  EXPECT_EQ(all.back(),
            "goodput 93.1% of 4 min 10 s of worker time; lost: dead 12 s, partition 3.0 s")
      << table;

  const std::string text = IncidentText(Stalled(), kNow);
  EXPECT_NE(text.find("incident inc-0123456789ab (open, stalled)"), std::string::npos) << text;
  EXPECT_NE(text.find("cause:    task worker:0 on node n1"), std::string::npos) << text;
  pb::Incident cut_off = Stalled();
  cut_off.mutable_cause()->Clear();
  cut_off.mutable_cause()->set_kind("node");
  cut_off.mutable_cause()->set_node("n3");
  EXPECT_NE(IncidentText(cut_off, kNow).find("cause:    node n3\n"), std::string::npos)
      << IncidentText(cut_off, kNow);
  EXPECT_NE(text.find("snapshot worker:0 (1 threads)"), std::string::npos) << text;
  EXPECT_NE(IncidentsTable(pb::IncidentList(), kNow).find("no incidents"), std::string::npos);
  // Renamed to its owner's id: the id this node named it by before says so.
  pb::Incident renamed = Stalled();
  renamed.set_owner("n1:4317");
  renamed.add_former_ids("inc-00000000000a");
  EXPECT_NE(IncidentText(renamed, kNow)
                .find("owned by node n1:4317 (named inc-00000000000a by this node before its "
                      "owner's name reached it)"),
            std::string::npos)
      << IncidentText(renamed, kNow);

  // The sidecar cannot write its store (a full disk): the table ends by saying so.
  list.set_store_error(
      "state store /var/lib/trainscope/trainscope-state.db: database or disk is full");
  const std::string full = IncidentsTable(list, kNow);
  EXPECT_NE(full.find("NOT KEPT ON DISK: state store /var/lib/trainscope/trainscope-state.db: "
                      "database or disk"),
            std::string::npos)
      << full;
  EXPECT_EQ(table.find("NOT KEPT"), std::string::npos);
}

}  // namespace
}  // namespace trainscope::sidecar
