// The store writer over a stand-in store that can be made to fail as a full disk does: what a
// failed write did not take waits (the newest copy of each incident) and is written once the
// store works again, and the log says so once each way, not once a call.
#include "trainscope/sidecar/store_writer.h"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "spdlog/sinks/ostream_sink.h"
#include "spdlog/spdlog.h"

namespace trainscope::sidecar {
namespace {

constexpr char kPath[] = "/var/lib/trainscope/trainscope-state.db";
constexpr char kFull[] =
    "state store /var/lib/trainscope/trainscope-state.db: cannot store incident inc-1: database "
    "or disk is full";

// What the writer writes to: incidents by id and the ledger, or failures while `full`.
struct FakeStore {
  bool full = false;
  int puts = 0;  // Calls of put_incident, failed or not.
  std::map<std::string, pb::Incident> incidents;
  std::vector<LedgerRow> ledger;

  StoreWriterOptions Options() {
    StoreWriterOptions o;
    o.path = kPath;
    o.put_incident = [this](const pb::Incident& in) {
      ++puts;
      if (in.id().empty()) return absl::InvalidArgumentError("an incident without an id");
      if (full) return absl::ResourceExhaustedError(kFull);
      incidents[in.id()] = in;
      return absl::OkStatus();
    };
    o.put_ledger = [this](const std::vector<LedgerRow>& rows) {
      if (full) return absl::ResourceExhaustedError(kFull);
      ledger = rows;
      return absl::OkStatus();
    };
    return o;
  }
};

pb::Incident Incident(const std::string& id, const std::string& summary) {
  pb::Incident in;
  in.set_id(id);
  in.set_summary(summary);
  return in;
}

// The default logger's lines, while it lives.
class CapturedLog {
 public:
  CapturedLog() : previous_(spdlog::default_logger()) {
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(lines_);
    sink->set_pattern("%l %v");
    spdlog::set_default_logger(std::make_shared<spdlog::logger>("captured", sink));
  }
  ~CapturedLog() { spdlog::set_default_logger(previous_); }
  std::string text() const { return lines_.str(); }
  int Count(const std::string& part) const {
    int n = 0;
    for (size_t at = text().find(part); at != std::string::npos; at = text().find(part, at + 1)) {
      ++n;
    }
    return n;
  }

 private:
  std::shared_ptr<spdlog::logger> previous_;
  std::ostringstream lines_;
};

TEST(StoreWriter, WhatAFullStoreDidNotTakeIsWrittenOnceItWorksAgainSaidOnceEachWay) {
  CapturedLog log;
  FakeStore store;
  StoreWriter writer(store.Options());
  writer.Write({Incident("inc-1", "opened")}, {{"worker:0", "productive", 1}}, 100);
  EXPECT_EQ(writer.error(), "");
  EXPECT_EQ(store.incidents.size(), 1u);

  store.full = true;
  writer.Write({Incident("inc-1", "changed"), Incident("inc-2", "opened")},
               {{"worker:0", "productive", 2}}, 101);
  EXPECT_EQ(writer.error(), kFull);
  EXPECT_EQ(writer.waiting(), 2u);
  // Ten more seconds full, inc-2 changing twice: one failed write a call, not one per incident.
  for (int s = 102; s < 112; ++s) {
    const int puts = store.puts;
    writer.Write(s % 2 == 0 ? std::vector<pb::Incident>{Incident("inc-2", "changed")}
                            : std::vector<pb::Incident>{},
                 {{"worker:0", "productive", 2}, {"worker:0", "waiting", s - 101.0}}, s);
    EXPECT_EQ(store.puts - puts, 1);
  }
  EXPECT_EQ(writer.waiting(), 2u);
  EXPECT_EQ(store.incidents["inc-1"].summary(), "opened");  // Only the first, written before.

  store.full = false;
  writer.Write({Incident("inc-3", "opened")}, {{"worker:0", "waiting", 12}}, 112.4);
  EXPECT_EQ(writer.error(), "");
  EXPECT_EQ(writer.waiting(), 0u);
  ASSERT_EQ(store.incidents.size(), 3u);
  EXPECT_EQ(store.incidents["inc-1"].summary(), "changed");
  EXPECT_EQ(store.incidents["inc-2"].summary(), "changed");
  ASSERT_EQ(store.ledger.size(), 1u);
  EXPECT_EQ(store.ledger[0].seconds, 12);

  EXPECT_EQ(log.Count("warning "), 1) << log.text();
  EXPECT_EQ(log.Count(kFull), 1) << log.text();
  EXPECT_EQ(log.Count("Nothing is lost"), 1) << log.text();
  EXPECT_EQ(log.Count(std::string("info state store ") + kPath +
                      ": kept again after 11 s; 3 incidents caught up"),
            1)
      << log.text();

  // A second failure is said again: it is news.
  store.full = true;
  writer.Write({Incident("inc-4", "opened")}, {}, 200);
  EXPECT_EQ(log.Count("warning "), 2) << log.text();
}

// Renamed while the store was full: the copy waiting under its former id is not written after
// the store works again (it would put the old row back); the new one is.
TEST(StoreWriter, ACopyWaitingUnderAFormerIdIsDropped) {
  CapturedLog log;
  FakeStore store;
  StoreWriter writer(store.Options());
  store.full = true;
  writer.Write({Incident("inc-a", "opened")}, {}, 1);
  EXPECT_EQ(writer.waiting(), 1u);
  pb::Incident renamed = Incident("inc-owner", "renamed");
  renamed.add_former_ids("inc-a");
  store.full = false;
  writer.Write({renamed}, {}, 2);
  EXPECT_EQ(writer.waiting(), 0u);
  ASSERT_EQ(store.incidents.size(), 1u);
  EXPECT_EQ(store.incidents.begin()->first, "inc-owner");
}

// An incident the store refuses for itself (no id) is dropped with a line; it neither waits nor
// holds up the others, and the store counts as working.
TEST(StoreWriter, AnIncidentRefusedForItselfIsDroppedNotTriedAgain) {
  CapturedLog log;
  FakeStore store;
  StoreWriter writer(store.Options());
  writer.Write({Incident("", "no id"), Incident("inc-1", "opened")}, {}, 1);
  EXPECT_EQ(writer.error(), "");
  EXPECT_EQ(writer.waiting(), 0u);
  EXPECT_EQ(store.incidents.size(), 1u);
  const int puts = store.puts;
  writer.Write({}, {}, 2);
  EXPECT_EQ(store.puts, puts);
  EXPECT_EQ(log.Count("warning state store /var/lib/trainscope/trainscope-state.db: incident  "
                      "not kept: an incident without an id"),
            1)
      << log.text();
}

}  // namespace
}  // namespace trainscope::sidecar
