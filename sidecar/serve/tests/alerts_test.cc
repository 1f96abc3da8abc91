// First-hand alerts: which ones a cluster view raises and with which labels (the contract with
// the Prometheus rules), their JSON, and the notifier against a stand-in Alertmanager.
#include "trainscope/sidecar/alerts.h"

#include <civetweb.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "nlohmann/json.hpp"
#include "trainscope/sidecar/alert_notifier.h"

namespace trainscope::sidecar {
namespace {

using Labels = std::map<std::string, std::string>;

TaskView View(const std::string& role, int index, TaskState state) {
  TaskView v;
  v.cluster = "c";
  v.task = {role, index};
  v.state = state;
  v.reason = "because";
  v.since = 100;
  return v;
}

ClusterView SampleView() {
  ClusterView view;
  view.tasks = {View("worker", 0, TaskState::kDead), View("worker", 1, TaskState::kHung),
                View("ps", 0, TaskState::kDone), View("ps", 1, TaskState::kUp),
                View("worker", 3, TaskState::kDead)};
  view.tasks[3].partitioned_from = {"worker:2"};
  view.tasks[4].source = "other:4317";  // Another node's: not first-hand.
  view.local = {{"worker", 0}, {"worker", 1}, {"ps", 0}, {"ps", 1}};
  PartitionInfo p;
  p.a = {"worker", 2};
  p.b = {"ps", 1};
  p.a_address = "10.0.0.2:2222";
  p.b_address = "10.0.0.1:2222";
  p.error = "connection lost";
  p.since = 50;
  view.partitions = {p};
  NodeInfo self{"me:4317", "me", "alive", 0, {}, "", true};
  NodeInfo silent{"b:4317", "b", "silent", 70, {{"worker", 3}}, "answers no probe", false};
  NodeInfo alive{"c:4317", "c", "alive", 0, {}, "", false};
  view.nodes = {self, silent, alive};
  return view;
}

TEST(FirstHandAlerts, LabelsAreTheRulesOwn) {
  auto alerts = FirstHandAlerts(SampleView(), {"c", "http://me:9400/", nullptr});
  std::vector<Labels> labels;
  for (const FiringAlert& a : alerts) labels.push_back(a.labels);
  const std::vector<Labels> want = {{{"alertname", "TrainscopeTaskDead"},
                                     {"cluster", "c"},
                                     {"role", "worker"},
                                     {"task", "0"},
                                     {"severity", "critical"}},
                                    {{"alertname", "TrainscopeTaskHung"},
                                     {"cluster", "c"},
                                     {"role", "worker"},
                                     {"task", "1"},
                                     {"severity", "critical"}},
                                    {{"alertname", "TrainscopeTaskPartitioned"},
                                     {"cluster", "c"},
                                     {"role", "ps"},
                                     {"task", "1"},
                                     {"peer_role", "worker"},
                                     {"peer_task", "2"},
                                     {"severity", "critical"}},
                                    {{"alertname", "TrainscopeTaskPartitioned"},
                                     {"cluster", "c"},
                                     {"role", "worker"},
                                     {"task", "2"},
                                     {"peer_role", "ps"},
                                     {"peer_task", "1"},
                                     {"severity", "critical"}},
                                    {{"alertname", "TrainscopeNodeIsolated"},
                                     {"cluster", "c"},
                                     {"node", "b:4317"},
                                     {"severity", "critical"}}};
  // Not the done ps:0, not another node's worker:3; the far side of ps:1's partition too.
  EXPECT_EQ(labels, want);
  EXPECT_EQ(alerts[0].annotations.at("summary"), "worker:0 of cluster c is dead");
  EXPECT_NE(alerts[0].annotations.at("description").find("http://me:9400/"), std::string::npos);
  EXPECT_NE(alerts[0].annotations.at("description").find("because"), std::string::npos);
  EXPECT_NE(alerts[2].annotations.at("description").find("connection lost"), std::string::npos);
  EXPECT_EQ(alerts[2].starts_at, 50);
  EXPECT_EQ(alerts[0].hold_s, 0);  // Confirmed by the sidecar: at once.
  EXPECT_GT(alerts[2].hold_s, 0);  // Inferred, the sidecars' link fine: must last a while.
  EXPECT_EQ(alerts[3].starts_at, 50);
  EXPECT_EQ(alerts[3].annotations.at("summary"),
            "worker:2 of cluster c is cut off from its peer ps:1");
  EXPECT_EQ(alerts[4].starts_at, 70);
  // The two nodes' sidecars cannot reach each other directly either: a second path failing the
  // same way confirms it, at once.
  ClusterView cut = SampleView();
  cut.partitions[0].nodes_cut = true;
  EXPECT_EQ(FirstHandAlerts(cut, {"c", "http://me:9400/", nullptr})[2].hold_s, 0);
  EXPECT_EQ(FirstHandAlerts(cut, {"c", "http://me:9400/", nullptr})[3].hold_s, 0);
  for (const FiringAlert& a : alerts) {
    EXPECT_EQ(a.annotations.at("runbook_url").rfind("https://", 0), 0u);
  }
}

// A task OOM-killed by its cgroup's limit: the alert says so, in its description and reason.
TEST(FirstHandAlerts, DeadTaskAlertCarriesOomKilled) {
  ClusterView view;
  TaskView ps = View("ps", 0, TaskState::kDead);
  ps.reason =
      "OOM-killed by its container's memory limit (64 MiB; usage was 64 MiB): process 7712 is "
      "gone (no /proc/7712)";
  ps.cgroup.version = 1;
  ps.cgroup.oom_killed = true;
  view.tasks = {ps};
  view.local = {{"ps", 0}};
  auto alerts = FirstHandAlerts(view, {"c", "http://me:9400/", nullptr});
  ASSERT_EQ(alerts.size(), 1u);
  EXPECT_EQ(alerts[0].labels.at("alertname"), "TrainscopeTaskDead");
  EXPECT_EQ(alerts[0].annotations.at("reason").rfind("OOM-killed by its container's", 0), 0u);
  EXPECT_NE(alerts[0].annotations.at("description").find(": OOM-killed by its container's"),
            std::string::npos)
      << alerts[0].annotations.at("description");
}

// An alert about a task an open incident holds carries the incident's id (a label, which the
// rules join from trainscope_task_incident, so that it is the same alert whichever sends it),
// its summary and link.
TEST(FirstHandAlerts, AnAlertCarriesTheOpenIncidentThatHoldsItsTask) {
  ClusterView view;
  view.tasks = {View("ps", 1, TaskState::kDead)};
  view.local = {{"ps", 1}};
  auto now = std::make_shared<IncidentsNow>();
  pb::Incident closed;
  closed.set_id("inc-000000000001");
  closed.mutable_cause()->set_kind("task");
  closed.mutable_cause()->set_task("ps:1");
  closed.add_affected()->set_task("ps:1");
  pb::Incident open = closed;
  open.set_id("inc-000000000002");
  open.set_open(true);
  open.set_summary("ps:1 dead for 3 s, holding worker:0");
  now->incidents = {closed, open};
  const auto without = FirstHandAlerts(view, {"c", "http://me:9400/", nullptr});
  const auto with = FirstHandAlerts(view, {"c", "http://me:9400/", now});
  ASSERT_EQ(with.size(), 1u);
  auto labels = without[0].labels;
  labels["incident"] = "inc-000000000002";  // What Alertmanager groups by; the rules join it.
  EXPECT_EQ(with[0].labels, labels);
  EXPECT_EQ(with[0].annotations.at("incident"), "inc-000000000002");
  EXPECT_EQ(with[0].annotations.at("incident_url"),
            "http://me:9400/api/v1/incidents/inc-000000000002");
  EXPECT_EQ(with[0].annotations.at("incident_summary"), "ps:1 dead for 3 s, holding worker:0");
  EXPECT_EQ(without[0].annotations.count("incident"), 0u);
}

// The open incident of the cut between nodes a:4317 and b:4317.
pb::Incident LinkIncident() {
  pb::Incident link;
  link.set_id("inc-00000000001c");
  link.set_open(true);
  link.mutable_cause()->set_kind("link");
  link.mutable_cause()->set_node("a:4317");
  link.mutable_cause()->set_peer("b:4317");
  return link;
}

// A partition's two sides page as one incident, the link's, whatever else holds a side: here a
// slow ps's incident holds worker:0 too. The ps it cannot reach is held by none (it serves the
// others). A dead or hung task's alert names the incident it is the cause of, not one that
// holds it: worker:1, stopped while ps:1's incident held it, is its own page.
TEST(FirstHandAlerts, BothSidesOfAPartitionNameTheLinksIncident) {
  ClusterView view;
  TaskView worker = View("worker", 0, TaskState::kBlocked);
  worker.partitioned_from = {"ps:0"};
  TaskView ps = View("ps", 0, TaskState::kUp);
  ps.partitioned_from = {"worker:0"};
  view.tasks = {worker, ps, View("ps", 1, TaskState::kHung), View("worker", 1, TaskState::kHung)};
  view.local = {{"worker", 0}, {"ps", 0}, {"ps", 1}, {"worker", 1}};
  PartitionInfo cut;
  cut.a = {"worker", 0};
  cut.b = {"ps", 0};
  cut.a_node = "b:4317";
  cut.b_node = "a:4317";
  view.partitions = {cut};
  auto now = std::make_shared<IncidentsNow>();
  pb::Incident slow;
  slow.set_id("inc-0000000000d0");
  slow.set_open(true);
  slow.mutable_cause()->set_kind("task");
  slow.mutable_cause()->set_task("ps:1");
  slow.add_affected()->set_task("ps:1");
  slow.add_affected()->set_task("worker:0");
  slow.add_affected()->set_task("worker:1");
  const pb::Incident link = LinkIncident();
  now->incidents = {slow, link};
  const auto alerts = FirstHandAlerts(view, {"c", "http://me:9400/", now});
  ASSERT_EQ(alerts.size(), 4u);
  for (const FiringAlert& a : alerts) {
    const std::string task = a.labels.at("role") + ":" + a.labels.at("task");
    if (task == "worker:1") {
      EXPECT_EQ(a.labels.count("incident"), 0u) << "its own incident is not open yet";
      continue;
    }
    const bool partition = a.labels.at("alertname") == "TrainscopeTaskPartitioned";
    EXPECT_EQ(a.labels.at("incident"), partition ? "inc-00000000001c" : "inc-0000000000d0")
        << a.labels.at("alertname") << " " << task;
  }
  EXPECT_EQ(OpenIncidentOf(*now, "ps:0"), nullptr);
  EXPECT_EQ(OpenLinkIncident(*now, view, {"ps", 0}, {"worker", 0})->id(), "inc-00000000001c");
  EXPECT_EQ(OpenLinkIncident(*now, view, {"ps", 1}, {"worker", 0}), nullptr);  // No partition.
}

// Only worker:0 is this node's; ps:0, across the cut, is another sidecar's. This sidecar posts
// both sides, so the pair goes out together whichever sidecar names the partition first, and
// both name the link's incident. Without the cluster view's PartitionInfo (not confirmed yet),
// only this node's side.
TEST(FirstHandAlerts, ASidecarPostsBothSidesOfItsTasksPartition) {
  ClusterView view;
  TaskView worker = View("worker", 0, TaskState::kBlocked);
  worker.partitioned_from = {"ps:0"};
  view.tasks = {worker, View("ps", 0, TaskState::kUp)};
  view.local = {{"worker", 0}};
  PartitionInfo cut;
  cut.a = {"ps", 0};
  cut.b = {"worker", 0};
  cut.a_node = "a:4317";
  cut.b_node = "b:4317";
  cut.since = 60;
  view.partitions = {cut};
  auto now = std::make_shared<IncidentsNow>();
  const pb::Incident link = LinkIncident();
  now->incidents = {link};
  const auto alerts = FirstHandAlerts(view, {"c", "http://me:9400/", now});
  ASSERT_EQ(alerts.size(), 2u);
  std::set<std::string> sides;
  for (const FiringAlert& a : alerts) {
    sides.insert(a.labels.at("role") + ":" + a.labels.at("task") + "->" + a.labels.at("peer_role") +
                 ":" + a.labels.at("peer_task"));
    EXPECT_EQ(a.labels.at("incident"), "inc-00000000001c");
    EXPECT_EQ(a.starts_at, 60);
  }
  EXPECT_EQ(sides, (std::set<std::string>{"worker:0->ps:0", "ps:0->worker:0"}));
  view.partitions.clear();
  const auto unconfirmed = FirstHandAlerts(view, {"c", "http://me:9400/", nullptr});
  ASSERT_EQ(unconfirmed.size(), 1u);
  EXPECT_EQ(unconfirmed[0].labels.at("role"), "worker");
}

TEST(FirstHandAlerts, NothingWhenHealthyOrDone) {
  ClusterView view;
  view.tasks = {View("ps", 0, TaskState::kUp), View("worker", 0, TaskState::kDone),
                View("worker", 1, TaskState::kBlocked)};
  view.local = {{"ps", 0}, {"worker", 0}, {"worker", 1}};
  view.nodes = {{"me:1", "me", "isolated", 1, {}, "", true},
                {"b:1", "b", "down", 1, {}, "", false}};
  EXPECT_TRUE(FirstHandAlerts(view, {"c", "http://me/", nullptr}).empty());
}

TEST(AlertsToJson, FiringExpiresResolvedEndsNow) {
  FiringAlert a;
  a.labels = {{"alertname", "X"}};
  a.starts_at = 1700000000.25;
  const double now = 1700000010;
  auto body =
      nlohmann::json::parse(AlertsToJson({{a}, {a, true, 1700000005}}, "http://me/", now, 40));
  ASSERT_EQ(body.size(), 2u);
  EXPECT_EQ(body[0]["startsAt"], "2023-11-14T22:13:20.250Z");
  EXPECT_EQ(body[0]["endsAt"], "2023-11-14T22:14:10.000Z");  // now + 40 s
  EXPECT_EQ(body[1]["endsAt"], "2023-11-14T22:13:25.000Z");
  EXPECT_EQ(body[0]["generatorURL"], "http://me/");
  EXPECT_EQ(body[0]["labels"]["alertname"], "X");
}

// Credentials for Alertmanagers that require them: a table of files and headers, each taken or
// refused with the flag and the fix (the files are secrets: one every user may read is refused).
TEST(AlertmanagerHeaders, FilesAndHeadersTakenOrRefusedWithTheFix) {
  const std::string dir = ::testing::TempDir() + "/am-auth-" + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  auto write = [&](const std::string& name, const std::string& text, mode_t mode = 0600) {
    const std::string path = dir + "/" + name;
    std::ofstream(path) << text;
    chmod(path.c_str(), mode);
    return path;
  };
  auto basic = AlertmanagerHeaders({write("basic", "trainscope:s3cret\n"), "", {}});
  ASSERT_TRUE(basic.ok()) << basic.status();
  EXPECT_EQ(*basic, std::vector<std::string>{"Authorization: Basic dHJhaW5zY29wZTpzM2NyZXQ="});
  auto bearer = AlertmanagerHeaders({"", write("token", "abc.def\n"), {"X-Scope-OrgID: team-a"}});
  ASSERT_TRUE(bearer.ok()) << bearer.status();
  EXPECT_EQ(*bearer,
            (std::vector<std::string>{"Authorization: Bearer abc.def", "X-Scope-OrgID: team-a"}));
  EXPECT_TRUE(AlertmanagerHeaders({}).ok());
  struct Bad {
    AlertmanagerAuth auth;
    std::string says;
  };
  const std::vector<Bad> bad = {
      {{write("open", "u:p\n", 0644), "", {}}, "chmod 600"},
      {{dir + "/missing", "", {}}, "cannot read it"},
      {{write("nocolon", "justone\n"), "", {}}, "not user:password"},
      {{write("two", "u:p\nv:q\n"), "", {}}, "no single line"},
      {{"", write("spaced", "a b\n"), {}}, "no spaces"},
      {{write("b2", "u:p"), write("t2", "t"), {}}, "give one of them"},
      {{"", "", {"NoColon"}}, "not \"Name: value\""},
      {{"", "", {"Bad Name: x"}}, "not \"Name: value\""},
      {{"", "", {"X-Ok: line\r\nInjected: 1"}}, "not \"Name: value\""},
      {{"", "", {"authorization: Bearer x"}}, "keep the credential in a file"},
      {{"", "", std::vector<std::string>(33, "X-A: b")}, "at most 32"},
  };
  for (const Bad& b : bad) {
    auto r = AlertmanagerHeaders(b.auth);
    ASSERT_FALSE(r.ok()) << b.says;
    EXPECT_NE(r.status().message().find(b.says), std::string::npos) << r.status();
  }
}

TEST(AlertNotifier, ParsesUrls) {
  auto urls = AlertNotifier::ParseUrls({"a:9093, http://b:9093/am/", "[::1]:9093"});
  ASSERT_TRUE(urls.ok()) << urls.status();
  EXPECT_EQ(*urls,
            (std::vector<std::string>{"http://a:9093", "http://b:9093/am", "http://[::1]:9093"}));
  EXPECT_EQ(*AlertNotifier::ParseUrls({"https://a:9093/"}),
            std::vector<std::string>{"https://a:9093"});
  EXPECT_FALSE(AlertNotifier::ParseUrls({"a"}).ok());
}

// A stand-in Alertmanager: records the body of every POST /api/v2/alerts.
class FakeAlertmanager {
 public:
  FakeAlertmanager() {
    mg_init_library(0);
    const char* options[] = {"listening_ports", "127.0.0.1:0", "num_threads", "2", nullptr};
    ctx_ = mg_start(nullptr, nullptr, options);
    mg_set_request_handler(ctx_, "/api/v2/alerts", &FakeAlertmanager::Handle, this);
    mg_server_port ports[1];
    mg_get_server_ports(ctx_, 1, ports);
    port_ = ports[0].port;
  }
  ~FakeAlertmanager() { mg_stop(ctx_); }
  std::string url() const { return "127.0.0.1:" + std::to_string(port_); }

  std::vector<nlohmann::json> posts() {
    std::lock_guard<std::mutex> lock(mu_);
    return posts_;
  }
  // Waits until `n` posts arrived; false after 5 s.
  bool WaitFor(size_t n) {
    for (int i = 0; i < 500; i++) {
      if (posts().size() >= n) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }

 private:
  static int Handle(mg_connection* conn, void* self_ptr) {
    auto* self = static_cast<FakeAlertmanager*>(self_ptr);
    std::string body;
    char buf[4096];
    int n = 0;
    while ((n = mg_read(conn, buf, sizeof(buf))) > 0) body.append(buf, static_cast<size_t>(n));
    {
      std::lock_guard<std::mutex> lock(self->mu_);
      self->posts_.push_back(nlohmann::json::parse(body));
    }
    mg_printf(conn, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
    return 200;
  }

  mg_context* ctx_ = nullptr;
  int port_ = 0;
  std::mutex mu_;
  std::vector<nlohmann::json> posts_;
};

// A notifier posting to a FakeAlertmanager, evaluating what Set() last said is failing.
class NotifierRig {
 public:
  // `configure` adjusts the options (urls: the fake Alertmanager's) before the notifier starts.
  explicit NotifierRig(const std::function<void(NotifierOptions&)>& configure) {
    NotifierOptions o;
    o.urls = *AlertNotifier::ParseUrls({am.url()});
    configure(o);
    notifier = std::make_unique<AlertNotifier>(o, [this] {
      std::lock_guard<std::mutex> lock(mu_);
      return failing_;
    });
    notifier->Start();
  }
  ~NotifierRig() { notifier->Stop(); }

  // Says what fails now; `poke`: evaluated at once, as on a state change.
  void Set(std::vector<FiringAlert> alerts, bool poke = true) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      failing_ = std::move(alerts);
    }
    if (poke) notifier->Poke();
  }

  FakeAlertmanager am;
  std::unique_ptr<AlertNotifier> notifier;

 private:
  std::mutex mu_;
  std::vector<FiringAlert> failing_;
};

FiringAlert Alert(std::map<std::string, std::string> labels) {
  FiringAlert a;
  a.labels = std::move(labels);
  return a;
}

TEST(AlertNotifier, PostsResendsAndResolvesPastAnUnreachableAlertmanager) {
  NotifierRig rig([](NotifierOptions& o) {
    o.urls.push_back(*AlertNotifier::ParseUrls({"127.0.0.1:1"})->begin());  // Port 1: refused.
    o.generator_url = "http://me/";
    o.resend_interval_s = 1;
    o.evaluate_interval_s = 0.2;
    o.incident_wait_s = 0;
  });
  FakeAlertmanager& am = rig.am;
  rig.Set({Alert({{"alertname", "TrainscopeTaskDead"}, {"task", "1"}})});
  ASSERT_TRUE(am.WaitFor(1));
  EXPECT_EQ(am.posts()[0][0]["labels"]["task"], "1");
  ASSERT_TRUE(am.WaitFor(2));  // Sent again while it lasts.
  rig.Set({});
  const size_t before = am.posts().size();
  ASSERT_TRUE(am.WaitFor(before + 1));
  const nlohmann::json last = am.posts().back()[0];
  EXPECT_EQ(last["labels"]["task"], "1");
  EXPECT_LT(last["endsAt"].get<std::string>(), am.posts()[0][0]["endsAt"].get<std::string>());
  NotifierStats s = rig.notifier->stats();
  EXPECT_GE(s.sent, 3);
  EXPECT_GE(s.failed, 1);  // The refused one, counted, without holding up the other.
  EXPECT_EQ(s.firing, 0);
}

TEST(AlertNotifier, NewAlertIsPostedAtOnceNotAtTheNextEvaluationOrResend) {
  // An hour to the next evaluation or resend: a post within WaitFor's 5 s is the Poke's.
  NotifierRig rig([](NotifierOptions& o) {
    o.resend_interval_s = 3600;
    o.evaluate_interval_s = 3600;
    o.incident_wait_s = 0;
  });
  rig.Set({Alert({{"alertname", "TrainscopeTaskDead"}, {"task", "1"}})});
  ASSERT_TRUE(rig.am.WaitFor(1));
  EXPECT_EQ(rig.am.posts()[0][0]["labels"]["task"], "1");
}

// A task's new alert waits for its incident (a tick after the state) and is posted once, with
// it; once posted it keeps that incident in every resend and in its resolution, whatever the
// incidents say later: a changed label would be a second alert, a second page.
TEST(AlertNotifier, ATaskAlertWaitsForItsIncidentThenKeepsIt) {
  NotifierRig rig([](NotifierOptions& o) {
    o.resend_interval_s = 0.2;
    o.evaluate_interval_s = 0.05;
    o.incident_wait_s = 3600;  // Posted only once its incident is known.
  });
  FakeAlertmanager& am = rig.am;
  const std::map<std::string, std::string> dead = {
      {"alertname", "TrainscopeTaskDead"}, {"role", "ps"}, {"task", "1"}};
  auto with = [&dead](const char* incident) {
    auto labels = dead;
    labels["incident"] = incident;
    return Alert(labels);
  };
  rig.Set({Alert(dead)});
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_TRUE(am.posts().empty());  // Waiting for its incident.
  rig.Set({with("inc-000000000001")});
  ASSERT_TRUE(am.WaitFor(1));
  EXPECT_EQ(am.posts()[0][0]["labels"]["incident"], "inc-000000000001");
  rig.Set({with("inc-000000000002")});
  ASSERT_TRUE(am.WaitFor(3));  // Resent.
  rig.Set({Alert(dead)});
  ASSERT_TRUE(am.WaitFor(5));
  rig.Set({});
  const size_t before = am.posts().size();
  ASSERT_TRUE(am.WaitFor(before + 1));
  rig.notifier->Stop();
  for (const nlohmann::json& post : am.posts()) {
    ASSERT_EQ(post.size(), 1u) << post.dump();  // One alert, never two.
    EXPECT_EQ(post[0]["labels"]["incident"], "inc-000000000001") << post.dump();
  }
  EXPECT_EQ(rig.notifier->stats().firing, 0);
}

// No incident comes (none names the task): the alert goes without one after incident_wait_s,
// on the notifier's own clock, not at the next evaluation an hour away.
TEST(AlertNotifier, ATaskAlertWithNoIncidentGoesAfterTheWait) {
  NotifierRig rig([](NotifierOptions& o) {
    o.resend_interval_s = 3600;
    o.evaluate_interval_s = 3600;
    o.incident_wait_s = 0.3;
  });
  rig.Set({Alert({{"alertname", "TrainscopeTaskHung"}, {"role", "ps"}, {"task", "0"}})});
  ASSERT_TRUE(rig.am.WaitFor(1));
  EXPECT_EQ(rig.am.posts()[0][0]["labels"].count("incident"), 0u);
  EXPECT_EQ(rig.am.posts()[0][0]["labels"]["task"], "0");
}

TEST(AlertNotifier, HeldAlertThatEndsEarlyIsNeverPosted) {
  NotifierRig rig([](NotifierOptions& o) { o.evaluate_interval_s = 0.05; });
  FiringAlert blip = Alert({{"alertname", "TrainscopeTaskPartitioned"}});
  blip.hold_s = 0.5;
  rig.Set({blip}, /*poke=*/false);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  rig.Set({}, /*poke=*/false);
  std::this_thread::sleep_for(std::chrono::milliseconds(600));
  EXPECT_TRUE(rig.am.posts().empty());  // Neither firing nor resolved.
  rig.Set({blip}, /*poke=*/false);
  ASSERT_TRUE(rig.am.WaitFor(1));  // Lasting past the hold: posted.
}

}  // namespace
}  // namespace trainscope::sidecar
