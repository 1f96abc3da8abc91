// The state store on real files in a temporary dir: incidents and the ledger round trip and
// survive a reopen, retention by age and by size, files that are not a store of ours set aside
// (and a working store after), a dir that cannot be made, unreadable blobs and oversized
// incidents.
#include "trainscope/sidecar/state_store.h"

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"

namespace trainscope::sidecar {
namespace {

namespace fs = std::filesystem;

// A fresh dir under /tmp, removed with what it holds.
class TempDir {
 public:
  TempDir() {
    char name[] = "/tmp/trainscope-store-XXXXXX";
    if (mkdtemp(name) != nullptr) path_ = name;
  }
  ~TempDir() {
    std::error_code ignored;
    if (!path_.empty()) fs::remove_all(path_, ignored);
  }
  const std::string& path() const { return path_; }
  std::string File() const { return (fs::path(path_) / kStateStoreFile).string(); }

 private:
  std::string path_;
};

pb::Incident MakeIncident(const std::string& id, bool open, double started, double ended = 0,
                          size_t padding = 0) {
  pb::Incident incident;
  incident.set_id(id);
  incident.set_cluster("c1");
  incident.set_kind("dead");
  incident.mutable_cause()->set_kind("task");
  incident.mutable_cause()->set_task("ps:1");
  incident.set_started(started);
  incident.set_ended(ended);
  incident.set_open(open);
  incident.set_summary("ps:1 dead for 6 s, holding worker:0");
  incident.set_outlier(std::string(padding, 'x'));
  pb::IncidentEvent* event = incident.add_timeline();
  event->set_unix_seconds(started);
  event->set_text("ps:1 stopped answering");
  pb::IncidentEvidence* evidence = incident.add_evidence();
  evidence->set_kind("snapshot");
  evidence->set_task("worker:0");
  evidence->mutable_snapshot()->set_summary("main thread waiting in Pull to ps:1");
  pb::ThreadStack* thread = evidence->mutable_snapshot()->add_threads();
  thread->set_tid(7);
  thread->add_frames()->set_function("Pull");
  return incident;
}

std::vector<std::string> Ids(const std::vector<pb::Incident>& incidents) {
  std::vector<std::string> ids;
  for (const pb::Incident& incident : incidents) ids.push_back(incident.id());
  return ids;
}

std::unique_ptr<StateStore> OpenOk(const std::string& dir, StoreOptions options = {}) {
  absl::StatusOr<std::unique_ptr<StateStore>> store = StateStore::Open(dir, options);
  EXPECT_TRUE(store.ok()) << store.status();
  return store.ok() ? *std::move(store) : nullptr;
}

// Constant SQL run on the file directly, as another program would.
void RawExec(const std::string& file, const std::string& sql) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(file.c_str(), &db), SQLITE_OK);
  char* error = nullptr;
  const int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &error);
  EXPECT_EQ(rc, SQLITE_OK) << (error != nullptr ? error : "");
  sqlite3_free(error);
  sqlite3_close(db);
}

std::string RawPragma(const std::string& file, const char* pragma) {
  sqlite3* db = nullptr;
  EXPECT_EQ(sqlite3_open(file.c_str(), &db), SQLITE_OK);
  sqlite3_stmt* stmt = nullptr;
  std::string value;
  if (sqlite3_prepare_v2(db, pragma, -1, &stmt, nullptr) == SQLITE_OK &&
      sqlite3_step(stmt) == SQLITE_ROW) {
    value = reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0));
  }
  sqlite3_finalize(stmt);
  sqlite3_close(db);
  return value;
}

std::string ReadAll(const std::string& file) {
  std::ifstream in(file, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void WriteAll(const std::string& file, const std::string& bytes) {
  std::ofstream(file, std::ios::binary | std::ios::trunc) << bytes;
}

// The files in `dir` set aside from the store.
std::vector<std::string> SetAsideFiles(const std::string& dir) {
  std::vector<std::string> found;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(absl::StrCat(kStateStoreFile, ".set-aside-"), 0) == 0 &&
        name.find("-wal") == std::string::npos && name.find("-shm") == std::string::npos) {
      found.push_back(entry.path().string());
    }
  }
  return found;
}

TEST(StateStore, IncidentsRoundTripOpenFirstThenNewestStartAndReplaceById) {
  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  std::unique_ptr<StateStore> store = OpenOk(dir.path());
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->set_aside(), "");
  EXPECT_TRUE(store->Incidents(10).empty());

  const pb::Incident closed_old = MakeIncident("closed-old", false, 100, 150);
  ASSERT_TRUE(store->PutIncident(closed_old).ok());
  ASSERT_TRUE(store->PutIncident(MakeIncident("open-old", true, 50)).ok());
  ASSERT_TRUE(store->PutIncident(MakeIncident("closed-new", false, 200, 250)).ok());
  ASSERT_TRUE(store->PutIncident(MakeIncident("open-new", true, 300)).ok());

  EXPECT_EQ(Ids(store->Incidents(10)),
            (std::vector<std::string>{"open-new", "open-old", "closed-new", "closed-old"}));
  EXPECT_EQ(Ids(store->Incidents(2)), (std::vector<std::string>{"open-new", "open-old"}));
  EXPECT_TRUE(store->Incidents(0).empty());

  std::optional<pb::Incident> read = store->Incident("closed-old");
  ASSERT_TRUE(read.has_value());
  EXPECT_EQ(read->SerializeAsString(), closed_old.SerializeAsString());
  EXPECT_EQ(read->evidence(0).snapshot().threads_size(), 1);
  EXPECT_FALSE(store->Incident("no-such-id").has_value());

  // The same id again replaces it (here: it reopened), and moves it in the order.
  pb::Incident reopened = MakeIncident("closed-old", true, 100);
  reopened.set_summary("ps:1 dead again");
  ASSERT_TRUE(store->PutIncident(reopened).ok());
  EXPECT_EQ(Ids(store->Incidents(10)),
            (std::vector<std::string>{"open-new", "closed-old", "open-old", "closed-new"}));
  ASSERT_TRUE(store->Incident("closed-old").has_value());
  EXPECT_EQ(store->Incident("closed-old")->summary(), "ps:1 dead again");

  absl::Status no_id = store->PutIncident(MakeIncident("", true, 1));
  EXPECT_EQ(no_id.code(), absl::StatusCode::kInvalidArgument) << no_id;
  EXPECT_EQ(store->Incidents(10).size(), 4u);
}

// Renamed to its owner's id: the write of the new id drops the rows of its former ids (and
// only those), so that a restart brings back one incident, not the old name too.
TEST(StateStore, AnIncidentRenamedToItsOwnersIdReplacesItsFormerRows) {
  TempDir dir;
  std::unique_ptr<StateStore> store = OpenOk(dir.path());
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->PutIncident(MakeIncident("inc-00000000000a", true, 100)).ok());
  ASSERT_TRUE(store->PutIncident(MakeIncident("inc-00000000000b", true, 90)).ok());
  pb::Incident renamed = MakeIncident("inc-0000000000aa", true, 99);
  renamed.add_former_ids("inc-00000000000a");
  renamed.add_former_ids("inc-0000000000aa");  // Its own id among them: kept.
  ASSERT_TRUE(store->PutIncident(renamed).ok());
  EXPECT_EQ(Ids(store->Incidents(10)),
            (std::vector<std::string>{"inc-0000000000aa", "inc-00000000000b"}));
  store.reset();
  store = OpenOk(dir.path());
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(Ids(store->Incidents(10)),
            (std::vector<std::string>{"inc-0000000000aa", "inc-00000000000b"}));
  EXPECT_EQ(store->Incident("inc-0000000000aa")->former_ids(0), "inc-00000000000a");
}

TEST(StateStore, PersistsAcrossReopenInWalModeWithOurApplicationId) {
  TempDir dir;
  {
    std::unique_ptr<StateStore> store = OpenOk(dir.path());
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(store->PutIncident(MakeIncident("a", true, 10)).ok());
    ASSERT_TRUE(store->PutIncident(MakeIncident("b", false, 5, 8)).ok());
    ASSERT_TRUE(store->PutLedger("c1", {{"worker:0", "productive", 12.5}}).ok());
  }
  EXPECT_EQ(RawPragma(dir.File(), "PRAGMA application_id"),
            std::to_string(kStateStoreApplicationId));
  EXPECT_EQ(RawPragma(dir.File(), "PRAGMA user_version"), std::to_string(kStateStoreSchemaVersion));
  EXPECT_EQ(RawPragma(dir.File(), "PRAGMA journal_mode"), "wal");

  std::unique_ptr<StateStore> store = OpenOk(dir.path());
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->set_aside(), "");
  EXPECT_TRUE(SetAsideFiles(dir.path()).empty());
  EXPECT_EQ(Ids(store->Incidents(10)), (std::vector<std::string>{"a", "b"}));
  std::vector<LedgerRow> ledger = store->Ledger("c1");
  ASSERT_EQ(ledger.size(), 1u);
  EXPECT_EQ(ledger[0].seconds, 12.5);
}

TEST(StateStore, OpensAStoreLeftByACrashWithWhatItsLogHolds) {
  TempDir dir;
  TempDir copy;
  std::unique_ptr<StateStore> store = OpenOk(dir.path());
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->PutIncident(MakeIncident("a", true, 10)).ok());
  ASSERT_TRUE(store->PutLedger("c1", {{"worker:0", "productive", 3}}).ok());
  // The files as a killed sidecar leaves them: what was written is in the -wal still.
  ASSERT_GT(fs::file_size(dir.File() + "-wal"), 0u);
  fs::copy_file(dir.File(), copy.File());
  fs::copy_file(dir.File() + "-wal", copy.File() + "-wal");

  std::unique_ptr<StateStore> reopened = OpenOk(copy.path());
  ASSERT_NE(reopened, nullptr);
  EXPECT_EQ(reopened->set_aside(), "");
  EXPECT_EQ(Ids(reopened->Incidents(10)), (std::vector<std::string>{"a"}));
  EXPECT_EQ(reopened->Ledger("c1").size(), 1u);
}

TEST(StateStore, LedgerRoundTripsAndIsReplacedPerCluster) {
  TempDir dir;
  std::unique_ptr<StateStore> store = OpenOk(dir.path());
  ASSERT_NE(store, nullptr);
  EXPECT_TRUE(store->Ledger("c1").empty());

  ASSERT_TRUE(store
                  ->PutLedger("c1", {{"worker:1", "waiting", 3},
                                     {"worker:0", "productive", 100},
                                     {"worker:0", "down", 7.25}})
                  .ok());
  ASSERT_TRUE(store->PutLedger("c2", {{"chief:0", "idle", 1}}).ok());
  std::vector<LedgerRow> rows = store->Ledger("c1");
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0].task, "worker:0");
  EXPECT_EQ(rows[0].outcome, "down");
  EXPECT_EQ(rows[0].seconds, 7.25);
  EXPECT_EQ(rows[1].outcome, "productive");
  EXPECT_EQ(rows[2].task, "worker:1");
  EXPECT_EQ(rows[2].seconds, 3);

  // Replaced whole: the rows not given again are gone; the other cluster is untouched.
  ASSERT_TRUE(store->PutLedger("c1", {{"worker:0", "productive", 160}}).ok());
  rows = store->Ledger("c1");
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].seconds, 160);
  ASSERT_EQ(store->Ledger("c2").size(), 1u);

  // A task and outcome given twice changes nothing.
  absl::Status twice = store->PutLedger("c1", {{"worker:0", "idle", 1}, {"worker:0", "idle", 2}});
  EXPECT_EQ(twice.code(), absl::StatusCode::kInvalidArgument) << twice;
  rows = store->Ledger("c1");
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].seconds, 160);

  ASSERT_TRUE(store->PutLedger("c1", {}).ok());
  EXPECT_TRUE(store->Ledger("c1").empty());
}

TEST(StateStore, PruneDeletesClosedIncidentsOlderThanMaxAge) {
  TempDir dir;
  std::unique_ptr<StateStore> store = OpenOk(dir.path(), {.max_age_s = 100, .max_bytes = 1 << 30});
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->PutIncident(MakeIncident("ended-long-ago", false, 9000, 9850)).ok());
  ASSERT_TRUE(store->PutIncident(MakeIncident("ended-lately", false, 9000, 9950)).ok());
  ASSERT_TRUE(store->PutIncident(MakeIncident("open-for-ages", true, 1)).ok());
  ASSERT_TRUE(store->PutIncident(MakeIncident("closed-without-end", false, 9000, 0)).ok());

  EXPECT_EQ(store->Prune(10000), 2);
  EXPECT_EQ(Ids(store->Incidents(10)), (std::vector<std::string>{"open-for-ages", "ended-lately"}));
  EXPECT_EQ(store->Prune(10000), 0);
  EXPECT_EQ(store->Prune(10051), 1);
  EXPECT_EQ(Ids(store->Incidents(10)), (std::vector<std::string>{"open-for-ages"}));
}

TEST(StateStore, PruneDeletesOldestClosedFirstUntilUnderMaxBytesAndNeverOpenOnes) {
  TempDir dir;
  {
    std::unique_ptr<StateStore> store = OpenOk(dir.path(), {.max_age_s = 1e9, .max_bytes = 35000});
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(store->PutIncident(MakeIncident("open", true, 1, 0, 20000)).ok());
    ASSERT_TRUE(store->PutIncident(MakeIncident("closed-second", false, 5, 20, 10000)).ok());
    ASSERT_TRUE(store->PutIncident(MakeIncident("closed-first", false, 30, 10, 10000)).ok());
    ASSERT_TRUE(store->PutIncident(MakeIncident("closed-last", false, 6, 30, 10000)).ok());

    // About 50 kB: the two that ended first go, which leaves about 30 kB.
    EXPECT_EQ(store->Prune(100), 2);
    EXPECT_EQ(Ids(store->Incidents(10)), (std::vector<std::string>{"open", "closed-last"}));
    EXPECT_EQ(store->Prune(100), 0);
  }
  // Over the bound with open incidents alone: they stay.
  std::unique_ptr<StateStore> store = OpenOk(dir.path(), {.max_age_s = 1e9, .max_bytes = 1000});
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->PutIncident(MakeIncident("open-2", true, 2, 0, 20000)).ok());
  EXPECT_EQ(store->Prune(100), 1);
  EXPECT_EQ(Ids(store->Incidents(10)), (std::vector<std::string>{"open-2", "open"}));
}

struct BadFile {
  std::string name;
  std::function<void(const TempDir&)> make;
  std::string why;  // In the set-aside sentence.
};

void MakeFullStore(const TempDir& dir) {
  std::unique_ptr<StateStore> store = OpenOk(dir.path());
  ASSERT_NE(store, nullptr);
  for (int i = 0; i < 60; ++i) {
    ASSERT_TRUE(
        store->PutIncident(MakeIncident(absl::StrCat("i", i), i % 2 == 0, i, 0, 4000)).ok());
  }
}

TEST(StateStore, SetsAsideFilesThatAreNotAStoreOfOursAndStartsAFreshOne) {
  const std::vector<BadFile> cases = {
      {"random bytes",
       [](const TempDir& dir) {
         std::mt19937 random(42);
         std::string bytes(8192, '\0');
         for (char& c : bytes) c = static_cast<char>(random());
         WriteAll(dir.File(), bytes);
         WriteAll(dir.File() + "-wal", "a stale log");  // Must go with it.
       },
       "is not a SQLite database"},
      {"a truncated store",
       [](const TempDir& dir) {
         MakeFullStore(dir);
         fs::resize_file(dir.File(), fs::file_size(dir.File()) / 2);
       },
       "is corrupt"},
      {"an empty file", [](const TempDir& dir) { WriteAll(dir.File(), ""); }, "is empty"},
      {"another program's database",
       [](const TempDir& dir) {
         RawExec(dir.File(),
                 "CREATE TABLE notes (body TEXT); INSERT INTO notes VALUES ('mine');"
                 "PRAGMA application_id = 1234;");
       },
       "is another program's SQLite database (application_id 0x000004d2)"},
      {"a database without an application_id",
       [](const TempDir& dir) { RawExec(dir.File(), "CREATE TABLE incidents (id TEXT);"); },
       "is a SQLite database without an application_id"},
      {"a newer schema",
       [](const TempDir& dir) {
         MakeFullStore(dir);
         RawExec(dir.File(), absl::StrCat("PRAGMA user_version = ", kStateStoreSchemaVersion + 1));
       },
       absl::StrCat("has schema version ", kStateStoreSchemaVersion + 1, ", newer than")},
  };
  for (const BadFile& bad : cases) {
    SCOPED_TRACE(bad.name);
    TempDir dir;
    bad.make(dir);
    const std::string before = ReadAll(dir.File());

    std::unique_ptr<StateStore> store = OpenOk(dir.path());
    ASSERT_NE(store, nullptr);
    std::vector<std::string> aside = SetAsideFiles(dir.path());
    ASSERT_EQ(aside.size(), 1u);
    EXPECT_NE(store->set_aside().find(dir.File() + " " + bad.why), std::string::npos)
        << store->set_aside();
    EXPECT_NE(store->set_aside().find("moved to " + aside[0]), std::string::npos)
        << store->set_aside();
    EXPECT_EQ(ReadAll(aside[0]), before);
    if (bad.name == "random bytes") {
      EXPECT_EQ(ReadAll(aside[0] + "-wal"), "a stale log");
    }

    // The fresh store is empty and works, and is taken as it is when opened again.
    EXPECT_TRUE(store->Incidents(100).empty());
    ASSERT_TRUE(store->PutIncident(MakeIncident("fresh", true, 1)).ok());
    ASSERT_TRUE(store->Incident("fresh").has_value());
    store.reset();
    store = OpenOk(dir.path());
    ASSERT_NE(store, nullptr);
    EXPECT_EQ(store->set_aside(), "");
    EXPECT_EQ(Ids(store->Incidents(100)), (std::vector<std::string>{"fresh"}));
    EXPECT_EQ(SetAsideFiles(dir.path()).size(), 1u);
  }
}

TEST(StateStore, ADirThatCannotBeMadeIsAnErrorNamingItAndWhy) {
  TempDir dir;
  const std::string file = (fs::path(dir.path()) / "a-file").string();
  WriteAll(file, "not a dir");
  const std::string under_file = file + "/sub";
  absl::StatusOr<std::unique_ptr<StateStore>> store = StateStore::Open(under_file);
  ASSERT_FALSE(store.ok());
  EXPECT_NE(store.status().message().find(under_file), std::string::npos) << store.status();
  EXPECT_NE(store.status().message().find("Not a directory"), std::string::npos) << store.status();

  // The dir itself a file.
  store = StateStore::Open(file);
  ASSERT_FALSE(store.ok());
  EXPECT_NE(store.status().message().find(file), std::string::npos) << store.status();
  EXPECT_EQ(ReadAll(file), "not a dir");

  EXPECT_EQ(StateStore::Open("").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(StateStore, SkipsAStoredBlobThatIsNotAnIncident) {
  TempDir dir;
  {
    std::unique_ptr<StateStore> store = OpenOk(dir.path());
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(store->PutIncident(MakeIncident("a", false, 300, 310)).ok());
    ASSERT_TRUE(store->PutIncident(MakeIncident("garbage", false, 200, 210)).ok());
    ASSERT_TRUE(store->PutIncident(MakeIncident("another-id", false, 150, 160)).ok());
    ASSERT_TRUE(store->PutIncident(MakeIncident("c", false, 100, 110)).ok());
  }
  // Field 1 claims 16 bytes and has 3; a well-formed Incident of another id.
  RawExec(dir.File(),
          "UPDATE incidents SET blob = x'0a10616263' WHERE id = 'garbage';"
          "UPDATE incidents SET blob = (SELECT blob FROM incidents WHERE id = 'a') "
          "WHERE id = 'another-id';");

  std::unique_ptr<StateStore> store = OpenOk(dir.path());
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(Ids(store->Incidents(10)), (std::vector<std::string>{"a", "c"}));
  EXPECT_EQ(Ids(store->Incidents(2)), (std::vector<std::string>{"a", "c"}));
  EXPECT_FALSE(store->Incident("garbage").has_value());
  EXPECT_FALSE(store->Incident("another-id").has_value());
  EXPECT_TRUE(store->Incident("c").has_value());
}

TEST(StateStore, StoresAnOversizedIncidentWithoutItsSnapshotsThreadsAndSaysSo) {
  TempDir dir;
  std::unique_ptr<StateStore> store = OpenOk(dir.path());
  ASSERT_NE(store, nullptr);

  pb::Incident big = MakeIncident("big", true, 1);
  pb::StackSnapshot* snapshot = big.mutable_evidence(0)->mutable_snapshot();
  for (int i = 0; i < 300; ++i) {
    snapshot->add_threads()->add_frames()->set_function(std::string(4000, 'f'));
  }
  ASSERT_GT(big.ByteSizeLong(), static_cast<size_t>(kMaxIncidentBytes));
  ASSERT_TRUE(store->PutIncident(big).ok());
  std::optional<pb::Incident> read = store->Incident("big");
  ASSERT_TRUE(read.has_value());
  EXPECT_LE(read->ByteSizeLong(), static_cast<size_t>(kMaxIncidentBytes));
  EXPECT_EQ(read->evidence(0).snapshot().threads_size(), 0);
  EXPECT_EQ(read->evidence(0).snapshot().summary(), "main thread waiting in Pull to ps:1");
  ASSERT_EQ(read->timeline_size(), 2);
  EXPECT_NE(read->timeline(1).text().find("without its evidence snapshots' threads"),
            std::string::npos)
      << read->timeline(1).text();

  // Still over without the threads: the snapshots go, their evidence lines stay.
  pb::Incident bigger = MakeIncident("bigger", true, 1);
  bigger.mutable_evidence(0)->mutable_snapshot()->set_summary(std::string(kMaxIncidentBytes, 's'));
  ASSERT_TRUE(store->PutIncident(bigger).ok());
  read = store->Incident("bigger");
  ASSERT_TRUE(read.has_value());
  ASSERT_EQ(read->evidence_size(), 1);
  EXPECT_FALSE(read->evidence(0).has_snapshot());
  EXPECT_EQ(read->evidence(0).task(), "worker:0");
  EXPECT_NE(read->timeline(1).text().find("without its evidence snapshots:"), std::string::npos)
      << read->timeline(1).text();
}

TEST(StateStore, TakesCallsFromManyThreads) {
  TempDir dir;
  std::unique_ptr<StateStore> store = OpenOk(dir.path());
  ASSERT_NE(store, nullptr);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&store, t] {
      for (int i = 0; i < 50; ++i) {
        EXPECT_TRUE(store->PutIncident(MakeIncident(absl::StrCat(t, "-", i), false, i, i)).ok());
        store->Incidents(5);
        EXPECT_TRUE(
            store->PutLedger(absl::StrCat("c", t), {{"worker:0", "productive", 1.0 * i}}).ok());
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(store->Incidents(1000).size(), 200u);
  ASSERT_EQ(store->Ledger("c3").size(), 1u);
  EXPECT_EQ(store->Ledger("c3")[0].seconds, 49);
}

}  // namespace
}  // namespace trainscope::sidecar
