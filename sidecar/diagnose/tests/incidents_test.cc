// The incident book and the ledger as pure functions: views made by hand, time as values.
#include "trainscope/sidecar/incidents.h"

#include <gtest/gtest.h>

#include "trainscope/sidecar/ledger.h"

namespace trainscope::sidecar {
namespace {

TaskView Task(const std::string& name, TaskState state, double since = 100) {
  TaskView v;
  v.task = *ParseTaskRef(name);
  v.cluster = "c";
  v.state = state;
  v.since = since;
  v.phase = v.task.role == "ps" ? "serving" : "training";
  v.reason = name + " " + std::string(StateName(state)) + ": because; more";
  return v;
}

TaskView BlockedOn(const std::string& name, const std::string& peer, double since = 101) {
  TaskView v = Task(name, TaskState::kBlocked, since);
  v.blocked_on.push_back({*ParseTaskRef(peer), "127.0.0.1:1", 1, "connection refused"});
  CallInFlight c;
  c.method = "Pull";
  c.peer = *ParseTaskRef(peer);
  c.age_seconds = 1;
  v.inflight.push_back(c);
  return v;
}

TaskView Training(const std::string& name, int64_t steps) {
  TaskView v = Task(name, TaskState::kUp);
  v.steps = steps;
  return v;
}

ClusterView View(std::vector<TaskView> tasks) {
  ClusterView v;
  v.cluster = "c";
  v.tasks = std::move(tasks);
  return v;
}

struct RootCase {
  std::string name;
  std::vector<TaskView> tasks;
  std::map<std::string, std::string> want;  // task -> cause text ("" for not held)
};

TEST(RootCauses, FollowWaitsToTheirRoot) {
  TaskView stalled = Task("worker:1", TaskState::kStalled);
  CallInFlight c;
  c.method = "Push";
  c.peer = *ParseTaskRef("ps:1");
  c.age_seconds = 3;
  stalled.inflight.push_back(c);
  TaskView heard_then_unreachable = Task("worker:0", TaskState::kUnreachable, 101);
  heard_then_unreachable.incarnation = 7;
  const std::vector<RootCase> cases = {
      {"all well", {Task("ps:0", TaskState::kUp), Task("worker:0", TaskState::kUp)}, {}},
      {"a dead ps holds the worker blocked on it",
       {Task("ps:0", TaskState::kDead), BlockedOn("worker:0", "ps:0")},
       {{"ps:0", "ps:0"}, {"worker:0", "ps:0"}}},
      {"a chain: blocked on a task blocked on a hung one",
       {Task("ps:0", TaskState::kHung), BlockedOn("worker:0", "ps:0"),
        BlockedOn("chief:0", "worker:0")},
       {{"ps:0", "ps:0"}, {"worker:0", "ps:0"}, {"chief:0", "ps:0"}}},
      {"a stalled call to a stalled ps",
       {Task("ps:1", TaskState::kStalled), stalled},
       {{"ps:1", "ps:1"}, {"worker:1", "ps:1"}}},
      {"missing a moment is no one's concern, nor what waits on it",
       {Task("ps:0", TaskState::kMissing, 95), BlockedOn("worker:0", "ps:0")},
       {}},
      {"missing long is",
       {Task("ps:0", TaskState::kMissing, 50), BlockedOn("worker:0", "ps:0")},
       {{"ps:0", "ps:0"}, {"worker:0", "ps:0"}}},
      {"a remote task no sidecar has reported on yet is no one's concern",
       {Task("worker:0", TaskState::kUnreachable, 101)},
       {}},
      {"one it heard from that goes unreachable is",
       {heard_then_unreachable},
       {{"worker:0", "worker:0"}}},
      {"a stalled task that waits on no one is its own cause",
       {Task("worker:0", TaskState::kStalled)},
       {{"worker:0", "worker:0"}}},
  };
  for (const RootCase& rc : cases) {
    auto got = RootCauses(View(rc.tasks), 100 + 3, 10);
    std::map<std::string, std::string> texts;
    for (const auto& [t, h] : got) texts[t.ShortName()] = h.cause.Text();
    EXPECT_EQ(texts, rc.want) << rc.name;
  }
}

TEST(RootCauses, APartitionBetweenTwoNodesIsTheLinkBetweenThem) {
  ClusterView view = View({Task("ps:0", TaskState::kUp), BlockedOn("worker:0", "ps:0")});
  PartitionInfo p;
  p.a = *ParseTaskRef("worker:0");
  p.b = *ParseTaskRef("ps:0");
  p.a_node = "n2";
  p.b_node = "n1";
  p.since = 101;
  view.partitions.push_back(p);
  auto got = RootCauses(view, 103, 10);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got.begin()->second.cause.Text(), "n1 <-> n2");
  EXPECT_EQ(got.begin()->second.kind, "partition");
}

TEST(RootCauses, ANodeCutOffHoldsWhatItCannotHearAsItsOwnCutAsTheOthersNameIt) {
  TaskView ps = Task("ps:0", TaskState::kUnreachable, 100);
  ps.node = "10.0.0.1:4317";
  ps.incarnation = 7;  // Heard from before the cut.
  TaskView w = BlockedOn("worker:0", "ps:0");
  w.node = "10.0.0.2:4317";
  ClusterView view = View({ps, w});
  view.self = "10.0.0.2:4317";
  view.isolated_since = 99.5;
  auto got = RootCauses(view, 103, 10);
  ASSERT_EQ(got.size(), 2u);
  for (const auto& [task, h] : got) {
    EXPECT_EQ(h.cause.Text(), "node 10.0.0.2:4317") << task.ShortName();
    EXPECT_EQ(h.kind, "isolated");
    EXPECT_EQ(h.since, 99.5);
  }
}

TEST(RootCauses, ATaskUnheardBecauseItsSidecarStoppedAMomentAgoIsNoOnesIncidentYet) {
  TaskView ps = Task("ps:0", TaskState::kUnreachable, 100);
  ps.node = "10.0.0.1:4317";
  ps.incarnation = 7;
  ClusterView view = View({ps});
  NodeInfo n1;
  n1.id = ps.node;
  n1.status = "left";
  n1.since = 100;
  view.nodes.push_back(n1);
  EXPECT_TRUE(RootCauses(view, 103, 10).empty());  // A sidecar restarted: nobody's fault.
  auto later = RootCauses(view, 111, 10);          // Away for longer: its node's incident.
  ASSERT_EQ(later.size(), 1u);
  EXPECT_EQ(later.begin()->second.cause.Text(), "node 10.0.0.1:4317");
}

TEST(IncidentBook, OneIncidentPerCauseOpenedHeldAndClosedWithItsCost) {
  IncidentBook book;
  book.Track(View({Task("ps:1", TaskState::kUp), Task("worker:0", TaskState::kUp),
                   Task("worker:1", TaskState::kUp)}),
             nullptr, 100);
  EXPECT_TRUE(book.List().empty());
  for (double t = 101; t <= 107; t += 1) {
    book.Track(View({Task("ps:1", TaskState::kDead, 100.5), BlockedOn("worker:0", "ps:1"),
                     BlockedOn("worker:1", "ps:1")}),
               nullptr, t);
  }
  ASSERT_EQ(book.List().size(), 1u);
  const pb::Incident open = book.List()[0];
  EXPECT_TRUE(open.open());
  EXPECT_EQ(open.cause().task(), "ps:1");
  EXPECT_EQ(open.kind(), "dead");
  EXPECT_DOUBLE_EQ(open.started(), 100.5);
  EXPECT_EQ(open.id(), IncidentId("c", {"task", "ps:1", ""}, 100.5));
  EXPECT_EQ(open.summary(),
            "ps:1 dead (ps:1 dead: because) for 6.5 s, holding worker:0 and worker:1 (waiting in "
            "Pull to ps:1)");
  // The ps answers again; a worker still reconnects to it: the same incident holds it.
  book.Track(View({Task("ps:1", TaskState::kUp), Training("worker:0", 1),
                   BlockedOn("worker:1", "ps:1", 102)}),
             nullptr, 108);
  ASSERT_EQ(book.List().size(), 1u);
  EXPECT_TRUE(book.List()[0].open());
  // Each worker is back once its steps have moved twice (the tick of its first steps is the
  // incident's still, counted at their pace).
  book.Track(View({Task("ps:1", TaskState::kUp), Training("worker:0", 2), Training("worker:1", 1)}),
             nullptr, 109);
  ASSERT_EQ(book.List().size(), 1u);
  EXPECT_TRUE(book.List()[0].open());
  book.Track(View({Task("ps:1", TaskState::kUp), Training("worker:0", 3), Training("worker:1", 2)}),
             nullptr, 110);
  ASSERT_EQ(book.List().size(), 1u);
  const pb::Incident closed = book.List()[0];
  EXPECT_FALSE(closed.open());
  EXPECT_DOUBLE_EQ(closed.ended(), 110);
  // Two workers waited from the incident's start, 100.5, to 108 (7.5 s each) and worker:1 one
  // more second; the half second before the start is not the incident's.
  EXPECT_NEAR(closed.lost_seconds(), 6.5 + 7.5, 1e-6);
  EXPECT_EQ(book.ledger().Goodput("c").lost_by_kind().at("dead"), closed.lost_seconds());
  EXPECT_EQ(book.TakeChanged().size(), 1u);
  EXPECT_TRUE(book.TakeChanged().empty());
}

TEST(IncidentBook, TheSummaryNamesTheTasksHeldInTheSpecsOrderNotInTheOrderTheyWereHeld) {
  IncidentBook book;
  book.Track(View({Task("ps:1", TaskState::kDead, 100.5), BlockedOn("worker:10", "ps:1")}), nullptr,
             101);
  book.Track(View({Task("ps:1", TaskState::kDead, 100.5), BlockedOn("worker:10", "ps:1"),
                   BlockedOn("worker:2", "ps:1")}),
             nullptr, 102);
  ASSERT_EQ(book.List().size(), 1u);
  EXPECT_NE(book.List()[0].summary().find("holding worker:2 and worker:10 "), std::string::npos)
      << book.List()[0].summary();
}

TEST(IncidentBook, AWorkerWellAgainHoldsItsIncidentOpenUntilItsStepsMove) {
  IncidentBook book;
  TaskView w = BlockedOn("worker:0", "ps:0");
  w.steps = 50;
  for (double t = 100; t <= 102; t += 1) {
    book.Track(View({Task("ps:0", TaskState::kDead, 99.5), w}), nullptr, t);
  }
  // The ps is back and the worker's state is well, but it has not stepped yet (reconnecting).
  book.Track(View({Task("ps:0", TaskState::kUp), Training("worker:0", 50)}), nullptr, 103);
  book.Track(View({Task("ps:0", TaskState::kUp), Training("worker:0", 50)}), nullptr, 104);
  ASSERT_EQ(book.List().size(), 1u);
  EXPECT_TRUE(book.List()[0].open());
  ASSERT_EQ(book.List()[0].affected_size(), 2);
  EXPECT_EQ(book.List()[0].affected(1).task(), "worker:0");
  EXPECT_EQ(book.List()[0].affected(1).how(), "recovering");
  EXPECT_NEAR(book.List()[0].lost_seconds(), 4, 1e-6);  // 101 to 104: waiting, recovering.
  // Its first step: that tick is still the incident's, its new steps productive at their pace
  // (here unknown: all of it); it is back once its steps move again.
  book.Track(View({Task("ps:0", TaskState::kUp), Training("worker:0", 51)}), nullptr, 105);
  EXPECT_TRUE(book.List()[0].open());
  EXPECT_NEAR(book.List()[0].lost_seconds(), 4, 1e-6);  // It trained again in that second.
  book.Track(View({Task("ps:0", TaskState::kUp), Training("worker:0", 61)}), nullptr, 106);
  EXPECT_FALSE(book.List()[0].open());
  EXPECT_DOUBLE_EQ(book.List()[0].ended(), 106);
  EXPECT_NEAR(book.List()[0].lost_seconds(), 4, 1e-6);
}

// worker:0 (0.1 s a step, at step 50) held by a dead ps from 100 to 102: the worker as it comes
// back, well again and not yet stepping.
TaskView HeldByADeadPsUntil102(IncidentBook& book) {
  TaskView w = BlockedOn("worker:0", "ps:0");
  w.steps = 50;
  w.usual_step_seconds = 0.1;
  for (double t = 100; t <= 102; t += 1) {
    book.Track(View({Task("ps:0", TaskState::kDead, 99.5), w}), nullptr, t);
  }
  TaskView back = Training("worker:0", 50);
  back.usual_step_seconds = 0.1;
  return back;
}

// The tick of the first step after a stall: of it, only the new steps at the usual pace were
// training (the step counters' count); the rest is still the incident's.
TEST(IncidentBook, TheFirstStepsAfterAnIncidentCountAtTheirPace) {
  IncidentBook book;
  TaskView back = HeldByADeadPsUntil102(book);
  book.Track(View({Task("ps:0", TaskState::kUp), back}), nullptr, 103);
  back.steps = 51;  // One step, 0.1 s of training, in a 1 s tick.
  book.Track(View({Task("ps:0", TaskState::kUp), back}), nullptr, 104);
  EXPECT_TRUE(book.List()[0].open());
  EXPECT_NEAR(book.List()[0].lost_seconds(), 3.9, 1e-6);  // 101 to 104, less 0.1 s training.
  back.steps = 61;
  book.Track(View({Task("ps:0", TaskState::kUp), back}), nullptr, 105);
  EXPECT_FALSE(book.List()[0].open());
  EXPECT_NEAR(book.List()[0].lost_seconds(), 3.9, 1e-6);
  EXPECT_NEAR(book.ledger().tasks().at(TaskRef{"worker", 0}).seconds[0], 0.1 + 1, 1e-6);
}

// A worker let go whose steps then crawl, within 10 s (gRPC reconnecting, a link dropping again
// too briefly to be named): the seconds they fall short of its pace are that incident's, also
// after a restart of the sidecar; later, with no cause, they are its own.
TEST(IncidentBook, AWorkerCrawlingJustAfterItsIncidentClosedCostsThatIncident) {
  IncidentBook book;
  TaskView back = HeldByADeadPsUntil102(book);
  auto at = [&](IncidentBook& b, int64_t steps, double t) {
    back.steps = steps;
    b.Track(View({Task("ps:0", TaskState::kUp), back}), nullptr, t);
  };
  at(book, 50, 103);
  at(book, 51, 104);
  at(book, 61, 105);
  ASSERT_FALSE(book.List()[0].open());
  EXPECT_NEAR(book.List()[0].lost_seconds(), 3.9, 1e-6);
  book.TakeChanged();
  at(book, 61, 106);  // Stood still: productive, for now.
  at(book, 62, 107);  // One step (0.1 s) in 2 s: 1.9 s short.
  EXPECT_NEAR(book.List()[0].lost_seconds(), 3.9 + 1.9, 1e-6);
  EXPECT_NEAR(book.List()[0].affected(1).lost_seconds(), 3.9 + 1.9, 1e-6);
  ASSERT_EQ(book.TakeChanged().size(), 1u);  // For the store.

  IncidentBook again;  // The sidecar restarted: what the incident cost stays, and adds up.
  again.Restore(book.List());
  at(again, 62, 108);
  at(again, 62, 109);
  at(again, 62, 110);
  at(again, 63, 111);
  EXPECT_NEAR(again.List()[0].lost_seconds(), 3.9 + 1.9 + 1.9, 1e-6);
  at(again, 63, 120);
  at(again, 63, 121);
  at(again, 64, 122);  // 12 s after it closed: no cause to charge.
  EXPECT_NEAR(again.List()[0].lost_seconds(), 3.9 + 1.9 + 1.9, 1e-6);
}

// A deadlocked worker, then killed to undo it: one incident, of the worse kind, whose line says
// that it was stalled first (it was not dead for all of its 5 s).
TEST(IncidentBook, ACauseGrownWorseSaysWhatItWasFirst) {
  IncidentBook book;
  for (double t = 100; t <= 103; t += 1) {
    book.Track(View({Task("ps:0", TaskState::kUp), Task("worker:0", TaskState::kStalled, 99)}),
               nullptr, t);
  }
  ASSERT_EQ(book.List().size(), 1u);
  EXPECT_EQ(book.List()[0].kind(), "stalled");
  EXPECT_EQ(book.List()[0].first_kind(), "");
  book.Track(View({Task("ps:0", TaskState::kUp), Task("worker:0", TaskState::kDead, 103.5)}),
             nullptr, 104);
  ASSERT_EQ(book.List().size(), 1u);
  const pb::Incident in = book.List()[0];
  EXPECT_EQ(in.kind(), "dead");
  EXPECT_EQ(in.first_kind(), "stalled");
  EXPECT_EQ(in.summary().rfind("worker:0 stalled, then dead (", 0), 0u) << in.summary();
  EXPECT_NE(in.summary().find(") for 5.0 s"), std::string::npos) << in.summary();
}

TEST(IncidentBook, OverlappingFaultsWithDifferentCausesAreSeparate) {
  IncidentBook book;
  for (double t = 100; t <= 103; t += 1) {
    book.Track(View({Task("ps:0", TaskState::kDead, 99), Task("ps:1", TaskState::kHung, 99.5),
                     BlockedOn("worker:0", "ps:0"), BlockedOn("worker:1", "ps:1")}),
               nullptr, t);
  }
  auto list = book.List();
  ASSERT_EQ(list.size(), 2u);
  std::set<std::string> causes = {list[0].cause().task(), list[1].cause().task()};
  EXPECT_EQ(causes, (std::set<std::string>{"ps:0", "ps:1"}));
}

TEST(IncidentBook, ACauseBackSoonAfterItClosedReopensTheSameIncident) {
  IncidentBook book;
  book.Track(View({Task("ps:0", TaskState::kHung, 99)}), nullptr, 100);
  book.Track(View({Task("ps:0", TaskState::kUp)}), nullptr, 101);
  book.Track(View({Task("ps:0", TaskState::kHung, 101.5)}), nullptr, 102);
  auto list = book.List();
  ASSERT_EQ(list.size(), 1u);
  EXPECT_TRUE(list[0].open());
  EXPECT_DOUBLE_EQ(list[0].started(), 99);
}

// ps:1 lives on n1, which owns its incident. n1 dated the death 104.8, n2 105.3: either side of
// the id's 10 s, so each named it alike only by chance before. n2 takes n1's id and start once
// n1's record names it, keeps its own as a former id, and keeps the seconds it charged.
TEST(IncidentBook, ANodeTakesTheOwnersIdForTheSameFault) {
  TaskView ps = Task("ps:1", TaskState::kDead, 104.8);
  ps.node = "n1";
  ClusterView at_owner = View({ps, BlockedOn("worker:0", "ps:1")});
  at_owner.self = "n1";
  IncidentBook owner;
  owner.Track(at_owner, nullptr, 106);
  const std::vector<v1::OwnedIncident> owned = OwnedIncidents(owner.Now("c"), "n1", 106);
  ASSERT_EQ(owned.size(), 1u);
  EXPECT_EQ(owned[0].id(), owner.List()[0].id());
  EXPECT_EQ(owned[0].cause_kind(), "task");
  EXPECT_EQ(owned[0].cause_a(), "ps:1");
  EXPECT_DOUBLE_EQ(owned[0].started(), 104.8);
  EXPECT_TRUE(OwnedIncidents(owner.Now("c"), "n2", 106).empty());

  TaskView late = ps;
  late.since = 105.3;
  ClusterView at_n2 = View({late, BlockedOn("worker:0", "ps:1")});
  at_n2.self = "n2";
  auto named = [&](const std::vector<PeerIncident>& peers) {
    IncidentBook other;
    ClusterView v = at_n2;
    other.Track(v, nullptr, 106);
    other.Track(v, nullptr, 107);
    const pb::Incident before = other.List()[0];
    other.TakeChanged();
    v.peer_incidents = peers;
    other.Track(v, nullptr, 108);
    const std::vector<pb::Incident> changed = other.TakeChanged();
    EXPECT_EQ(other.List().size(), 1u);
    EXPECT_EQ(changed.size(), 1u);
    pb::Incident after = other.List()[0];
    EXPECT_EQ(changed[0].id(), after.id());
    EXPECT_GT(after.lost_seconds(), before.lost_seconds());  // The seconds went with the name.
    return std::pair{before, after};
  };
  const PeerIncident by_owner{"n1", owned[0].id(), "task", "ps:1", "", 104.8};
  auto [before, after] = named({by_owner});
  EXPECT_NE(before.id(), owned[0].id());
  EXPECT_EQ(after.id(), owned[0].id());
  EXPECT_DOUBLE_EQ(after.started(), 104.8);
  ASSERT_EQ(after.former_ids_size(), 1);
  EXPECT_EQ(after.former_ids(0), before.id());
  EXPECT_NE(after.timeline().rbegin()->text().find("named " + owned[0].id() +
                                                   " as its owner, node n1, names it"),
            std::string::npos);
  // Not from a node that does not own the cause, not another fault of it (a stale record), not
  // another cause, not a malformed id: n2 keeps its own name.
  PeerIncident not_owner = by_owner, stale = by_owner, other_cause = by_owner, bad = by_owner;
  not_owner.node = "n3";
  stale.started = 60;
  other_cause.cause_a = "ps:0";
  bad.id = "inc-'; DROP TABLE";
  for (const PeerIncident& p : {not_owner, stale, other_cause, bad}) {
    auto [kept_before, kept_after] = named({p});
    EXPECT_EQ(kept_after.id(), kept_before.id()) << p.node << " " << p.id;
    EXPECT_EQ(kept_after.former_ids_size(), 0);
  }
}

// n2 cut off dates its cut 104.8; the others 105.3. It cannot speak for its cut while it lasts:
// the smallest other node id, n1, owns it, as every node finds. n2 closes its incident as the link
// comes back, and takes n1's id when n1's record reaches it, up to 30 s after the close.
TEST(IncidentBook, ANodeCutOffTakesTheOwnersIdForItsCutOnceItHearsAgain) {
  const std::string n1 = "10.0.0.1:4317", n2 = "10.0.0.2:4317", n3 = "10.0.0.3:4317";
  TaskView ps = Task("ps:0", TaskState::kUnreachable, 100);
  ps.node = n1;
  ps.incarnation = 7;
  TaskView w = BlockedOn("worker:0", "ps:0");
  w.node = n2;
  ClusterView cut = View({ps, w});
  cut.self = n2;
  cut.isolated_since = 104.8;
  for (const std::string& id : {n3, n2, n1}) {
    cut.nodes.push_back({id, "", id == n2 ? "isolated" : "silent", 104.8, {}, "", id == n2});
  }
  IncidentBook book;
  book.Track(cut, nullptr, 106);
  book.Track(cut, nullptr, 107);
  ASSERT_EQ(book.List().size(), 1u);
  const pb::Incident mine = book.List()[0];
  EXPECT_EQ(mine.kind(), "isolated");
  EXPECT_EQ(mine.cause().node(), n2);
  EXPECT_EQ(mine.owner(), n1);
  EXPECT_TRUE(OwnedIncidents(book.Now("c"), n2, 107).empty());

  ClusterView back = View({Task("ps:0", TaskState::kUp), Training("worker:0", 5)});
  back.self = n2;
  for (const std::string& id : {n1, n2, n3})
    back.nodes.push_back({id, "", "alive", 108, {}, "", id == n2});
  book.Track(back, nullptr, 108);
  back.tasks[1].steps = 6;
  book.Track(back, nullptr, 109);  // Its steps moved twice: back.
  ASSERT_EQ(book.List().size(), 1u);
  EXPECT_FALSE(book.List()[0].open());
  book.TakeChanged();
  const std::string owners = IncidentId("c", {"node", n2, ""}, 105.3);
  ASSERT_NE(owners, mine.id());
  back.peer_incidents = {{n1, owners, "node", n2, "", 105.3}};
  back.tasks[1].steps = 7;
  book.Track(back, nullptr, 110);
  ASSERT_EQ(book.List().size(), 1u);
  const pb::Incident renamed = book.List()[0];
  EXPECT_EQ(renamed.id(), owners);
  EXPECT_FALSE(renamed.open());
  EXPECT_DOUBLE_EQ(renamed.started(), 105.3);
  ASSERT_EQ(renamed.former_ids_size(), 1);
  EXPECT_EQ(renamed.former_ids(0), mine.id());
  const std::vector<pb::Incident> changed = book.TakeChanged();
  ASSERT_EQ(changed.size(), 1u);  // The store writes it under the owner's id, dropping n2's.
  EXPECT_EQ(changed[0].id(), owners);

  // The owner names its own, open or closed for less than 30 s.
  IncidentsNow at_n1;
  pb::Incident owned = renamed;
  owned.set_owner(n1);
  at_n1.incidents = {owned};
  EXPECT_EQ(OwnedIncidents(at_n1, n1, 130).size(), 1u);
  EXPECT_TRUE(OwnedIncidents(at_n1, n1, 140).empty());
  EXPECT_TRUE(OwnedIncidents(at_n1, n2, 130).empty());
}

TEST(IncidentBook, RestoredOpenIncidentsCloseAtTheirLastUpdateWhenTheirCauseIsGone) {
  IncidentBook first;
  first.Track(View({Task("ps:0", TaskState::kDead, 99), BlockedOn("worker:0", "ps:0")}), nullptr,
              100);
  first.Track(View({Task("ps:0", TaskState::kDead, 99), BlockedOn("worker:0", "ps:0")}), nullptr,
              104);
  IncidentBook second;
  second.Restore(first.List());
  EXPECT_TRUE(second.List()[0].open());
  second.Track(View({Task("ps:0", TaskState::kUp), Task("worker:0", TaskState::kUp)}), nullptr,
               200);
  ASSERT_EQ(second.List().size(), 1u);
  EXPECT_FALSE(second.List()[0].open());
  EXPECT_DOUBLE_EQ(second.List()[0].ended(), 104);
  EXPECT_NEAR(second.List()[0].lost_seconds(), 4, 1e-6);
}

pb::IncidentEvidence Snapshot(const std::string& task, std::vector<std::string> frames,
                              const std::string& syscall, const std::string& summary) {
  pb::IncidentEvidence e;
  e.set_kind("snapshot");
  e.set_task(task);
  e.set_summary(summary);
  pb::StackSnapshot* s = e.mutable_snapshot();
  s->set_pid(42);
  pb::ThreadStack* other = s->add_threads();
  other->set_tid(43);
  other->add_frames()->set_function("grpc::CompletionQueue::Next");
  pb::ThreadStack* main = s->add_threads();
  main->set_tid(42);
  main->set_syscall(syscall);
  pb::StackFrame* libc = main->add_frames();
  libc->set_function("__futex_abstimed_wait_common");
  libc->set_module("libc.so.6");
  for (const std::string& f : frames) main->add_frames()->set_function(f);
  return e;
}

TEST(OddOneOut, ManyStuckAlikeAndOneElsewhereNamesTheOne) {
  pb::Incident in;
  for (const char* w : {"worker:0", "worker:1", "worker:2", "worker:4"}) {
    *in.add_evidence() = Snapshot(w, {"trainscope::ParameterClient::Pull", "main"}, "futex",
                                  "main thread waiting 3.2 s in Pull to ps:3");
  }
  *in.add_evidence() =
      Snapshot("ps:3", {"trainscope::ApplyGradients", "trainscope::ParameterService::Push"},
               "futex", "main thread in trainscope::ApplyGradients (futex)");
  EXPECT_EQ(OddOneOut(in),
            "worker:0-2,4 wait in Pull to ps:3; ps:3's main thread is in "
            "trainscope::ApplyGradients < trainscope::ParameterService::Push (futex)");
  // Two alike and two others, or all alike: no odd one.
  *in.add_evidence() = Snapshot("ps:4", {"trainscope::Other"}, "futex", "");
  EXPECT_EQ(OddOneOut(in), "");
  pb::Incident alike;
  for (const char* w : {"worker:0", "worker:1"}) {
    *alike.add_evidence() = Snapshot(w, {"trainscope::ParameterClient::Pull"}, "futex", "");
  }
  EXPECT_EQ(OddOneOut(alike), "");
  EXPECT_EQ(CompressTasks({"worker:3", "ps:1", "worker:1", "worker:2", "chief:0"}),
            "chief:0 ps:1 worker:1-3");
}

TEST(Ledger, EverySecondOnceAsOneOutcome) {
  TaskView w = Task("worker:0", TaskState::kUp);
  w.steps = 10;
  const HeldBy other{"inc-1", "dead", false, 10}, own{"inc-2", "dead", true, 10};
  EXPECT_EQ(OutcomeOf(w, nullptr, 10), Outcome::kProductive);
  EXPECT_EQ(OutcomeOf(w, nullptr, 50), Outcome::kRedone);
  EXPECT_EQ(OutcomeOf(w, &other, 10), Outcome::kWaiting);
  TaskView dead = Task("worker:0", TaskState::kDead);
  EXPECT_EQ(OutcomeOf(dead, &own, 10), Outcome::kDown);
  EXPECT_EQ(OutcomeOf(dead, nullptr, 10), Outcome::kDown);
  TaskView starting = w;
  starting.phase = "creating_session";
  EXPECT_EQ(OutcomeOf(starting, nullptr, 0), Outcome::kIdle);
  EXPECT_EQ(OutcomeOf(Task("worker:0", TaskState::kDone), &other, 0), Outcome::kIdle);

  Ledger ledger;
  TaskView slow = Task("worker:1", TaskState::kSlow);
  slow.source = "10.0.0.2:4317";  // Remote: its pace over the last 10 s says how slowed.
  slow.usual_step_seconds = 0.1;
  slow.recent_step_seconds = 0.4;
  ledger.Charge({w, slow, Task("ps:0", TaskState::kUp)}, {{slow.task, {"inc-3", "slow", false}}},
                {}, 2);
  const pb::Goodput g = ledger.Goodput("c");
  EXPECT_DOUBLE_EQ(g.elapsed_seconds(), 4);           // Workers only.
  EXPECT_DOUBLE_EQ(g.productive_seconds(), 2 + 0.5);  // A quarter of its usual pace kept.
  EXPECT_DOUBLE_EQ(g.waiting_seconds(), 1.5);
  EXPECT_DOUBLE_EQ(ledger.LostTo("inc-3"), 1.5);

  // Of a step longer than the incident has been open, only its open part is the incident's.
  Ledger first;
  first.Charge({w}, {{w.task, {"inc-4", "dead", false, 0.25}}}, {}, 1);
  EXPECT_DOUBLE_EQ(first.LostTo("inc-4"), 0.25);
  EXPECT_DOUBLE_EQ(first.Goodput("c").productive_seconds(), 0.75);

  Ledger again;
  again.Restore(ledger.Rows());
  again.Restore({{"worker:9", "nonsense", 5},
                 {"ps:0", "productive", 5},
                 {"x", "idle", 1},
                 {"worker:0", "idle", -1}});
  EXPECT_EQ(again.Goodput("c").DebugString(), g.DebugString());
  // What was kept before a restart is in the goodput, not in the counters of this process.
  EXPECT_DOUBLE_EQ(again.SinceStart().at(w.task).seconds[0], 0);
  EXPECT_DOUBLE_EQ(again.LostByKindSinceStart().at("slow"), 0);
  again.Charge({w}, {}, {}, 1);
  EXPECT_DOUBLE_EQ(again.SinceStart().at(w.task).seconds[0], 1);
}

TEST(Ledger, StepsThatStoodStillBeforeTheIncidentAreItsAndRisingStepsTrain) {
  TaskView w = Task("worker:0", TaskState::kUp);
  w.steps = 100;
  Ledger ledger;
  ledger.Charge({w}, {}, {}, 1);  // The first charge: a baseline for its steps, productive.
  w.steps = 120;
  ledger.Charge({w}, {}, {}, 1);    // Rose: productive, and sure.
  ledger.Charge({w}, {}, {}, 0.5);  // Stood still while still called up: productive, for now.
  ledger.Charge({w}, {}, {}, 0.25);
  const HeldBy dead_ps{"inc-1", "dead", false, 10};
  ledger.Charge({w}, {{w.task, dead_ps}}, {}, 1);  // Held: the 0.75 s its steps stood still too.
  EXPECT_DOUBLE_EQ(ledger.LostTo("inc-1"), 1.75);
  EXPECT_DOUBLE_EQ(ledger.Goodput("c").productive_seconds(), 2);
  EXPECT_DOUBLE_EQ(ledger.lost_by_kind().at("dead"), 1.75);
  // As counters (/metrics): productive stands at its highest until it has caught up.
  EXPECT_DOUBLE_EQ(ledger.SinceStart().at(w.task).seconds[0], 2.75);
  EXPECT_DOUBLE_EQ(ledger.SinceStart().at(w.task).seconds[1], 1.75);
  w.steps = 121;  // Training again before its state is called well: productive.
  ledger.Charge({w}, {{w.task, dead_ps}}, {}, 1);
  EXPECT_DOUBLE_EQ(ledger.LostTo("inc-1"), 1.75);
  EXPECT_DOUBLE_EQ(ledger.Goodput("c").productive_seconds(), 3);
  EXPECT_DOUBLE_EQ(ledger.SinceStart().at(w.task).seconds[0], 3);

  // Slowed, first-hand: its new steps at its usual pace were productive, the rest the cause's.
  TaskView slowed = Training("worker:3", 10);
  slowed.state = TaskState::kSlow;
  slowed.usual_step_seconds = 0.01;
  Ledger pace;
  pace.Charge({slowed}, {}, {}, 1);
  slowed.steps = 30;  // 20 steps in 1 s, usually 0.2 s: a fifth of its pace.
  pace.Charge({slowed}, {{slowed.task, {"inc-5", "slow", false, 10}}}, {}, 1);
  EXPECT_DOUBLE_EQ(pace.LostTo("inc-5"), 0.8);

  // A worker started again counts from 0 and redoes nothing; a restore behind its back does.
  TaskView again = Training("worker:2", 500);
  again.incarnation = 1;
  Ledger restarts;
  restarts.Charge({again}, {}, {}, 1);
  again.incarnation = 2;
  again.steps = 3;
  restarts.Charge({again}, {}, {}, 1);
  again.steps = 4;
  restarts.Charge({again}, {}, {}, 1);
  again.steps = 2;  // The ps restored an older checkpoint.
  restarts.Charge({again}, {}, {}, 1);
  EXPECT_DOUBLE_EQ(restarts.Goodput("c").productive_seconds(), 3);
  EXPECT_DOUBLE_EQ(restarts.Goodput("c").redone_seconds(), 1);

  // A remote task's steps come too seldom to tell either: its states alone decide.
  TaskView remote = Task("worker:1", TaskState::kUp);
  remote.source = "10.0.0.2:4317";
  remote.steps = 5;
  Ledger far;
  far.Charge({remote}, {}, {}, 1);
  far.Charge({remote}, {}, {}, 1);
  far.Charge({remote}, {{remote.task, dead_ps}}, {}, 1);
  EXPECT_DOUBLE_EQ(far.LostTo("inc-1"), 1);
  remote.steps = 6;
  far.Charge({remote}, {{remote.task, dead_ps}}, {}, 1);
  EXPECT_DOUBLE_EQ(far.LostTo("inc-1"), 2);
}

TEST(Ledger, StepsShortOfTheirPaceJustAfterAnIncidentAreThatIncidents) {
  TaskView w = Training("worker:0", 100);
  w.usual_step_seconds = 0.01;
  const HeldBy link{"inc-7", "partition", false, 10};
  const std::map<TaskRef, HeldBy> after{{w.task, link}};
  Ledger ledger;
  ledger.Charge({w}, {{w.task, link}}, {}, 1);
  EXPECT_DOUBLE_EQ(ledger.LostTo("inc-7"), 1);
  w.steps = 101;  // Let go: one step (0.01 s at its pace) in 0.2 s.
  ledger.Charge({w}, {}, after, 0.2);
  EXPECT_NEAR(ledger.LostTo("inc-7"), 1.19, 1e-9);
  ledger.Charge({w}, {}, after, 0.4);  // Stood still: productive, for now.
  w.steps = 141;                       // 0.4 s of steps in 0.6 s: on pace.
  ledger.Charge({w}, {}, after, 0.2);
  EXPECT_NEAR(ledger.LostTo("inc-7"), 1.19, 1e-9);
  ledger.Charge({w}, {}, after, 0.8);  // The link dropped again, too briefly for a detection.
  w.steps = 151;                       // 0.1 s of steps in 1 s: 0.9 s short.
  ledger.Charge({w}, {}, after, 0.2);
  EXPECT_NEAR(ledger.LostTo("inc-7"), 2.09, 1e-9);
  EXPECT_NEAR(ledger.lost_by_kind().at("partition"), 2.09, 1e-9);
  const pb::Goodput g = ledger.Goodput("c");
  EXPECT_NEAR(g.productive_seconds(), 2.8 - 2.09, 1e-9);
  EXPECT_NEAR(g.waiting_seconds(), 2.09, 1e-9);

  // Before the view has learned its usual pace (10 s into training), its own steady ticks say it.
  TaskView early = Training("worker:1", 0);
  Ledger fresh;
  fresh.Charge({early}, {}, {}, 0.2);
  for (int i = 0; i < 6; ++i) {  // 20 steps a tick: 0.01 s a step.
    early.steps += 20;
    fresh.Charge({early}, {}, {}, 0.2);
  }
  early.steps += 2;  // Held by a slow ps: 0.02 s of its 0.2 s trained.
  fresh.Charge({early}, {{early.task, {"inc-8", "slow", false, 10}}}, {}, 0.2);
  EXPECT_NEAR(fresh.LostTo("inc-8"), 0.18, 1e-9);

  // With no incident a moment ago, there is no cause to charge: a crawl stays productive.
  Ledger alone;
  alone.Charge({w}, {}, {}, 1);
  alone.Charge({w}, {}, {}, 0.8);
  w.steps = 152;
  alone.Charge({w}, {}, {}, 0.2);
  EXPECT_DOUBLE_EQ(alone.Goodput("c").productive_seconds(), 2);
}

}  // namespace
}  // namespace trainscope::sidecar
