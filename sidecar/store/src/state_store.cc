// The state store on SQLite; see state_store.h.
//
// Opening is in two steps: the file found is inspected first on a connection of its own (is it a
// SQLite database, ours, of our schema, sound?), and only a file that passes is opened for use;
// one that fails is renamed aside with its -wal, -shm and -journal (a stale WAL beside a fresh
// file would be read into it). SQLite's answers are told apart: SQLITE_NOTADB and SQLITE_CORRUPT
// are the file's fault; busy and I/O errors are the moment's, reported and never set aside.
// Every statement with a value binds it; only constants are spelt into SQL text.
#include "trainscope/sidecar/state_store.h"

#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <string_view>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "spdlog/spdlog.h"

namespace trainscope::sidecar {
namespace {

constexpr int kBusyTimeoutMs = 5000;

// Incidents, as their serialized proto and the columns they are listed and aged by. age_from:
// when a closed incident ended (its start when it has no end). Ledger: one row per cluster, task
// and outcome.
constexpr char kSchema[] = R"sql(
CREATE TABLE IF NOT EXISTS incidents (
  id TEXT PRIMARY KEY NOT NULL,
  cluster TEXT NOT NULL,
  open INTEGER NOT NULL,
  started REAL NOT NULL,
  age_from REAL NOT NULL,
  bytes INTEGER NOT NULL,
  blob BLOB NOT NULL);
CREATE INDEX IF NOT EXISTS incidents_listed ON incidents (open DESC, started DESC);
CREATE INDEX IF NOT EXISTS incidents_aged ON incidents (open, age_from);
CREATE TABLE IF NOT EXISTS ledger (
  cluster TEXT NOT NULL,
  task TEXT NOT NULL,
  outcome TEXT NOT NULL,
  seconds REAL NOT NULL,
  PRIMARY KEY (cluster, task, outcome));
)sql";

struct DbCloser {
  void operator()(sqlite3* db) const { sqlite3_close_v2(db); }
};
using Db = std::unique_ptr<sqlite3, DbCloser>;

struct StmtFinalizer {
  void operator()(sqlite3_stmt* stmt) const { sqlite3_finalize(stmt); }
};
using Stmt = std::unique_ptr<sqlite3_stmt, StmtFinalizer>;

// A failed SQLite call as a status: what was being done, the file, SQLite's words and the
// system's reason when there is one (its errno also chooses the code).
absl::Status SqlError(sqlite3* db, int rc, std::string_view what, const std::string& path) {
  const int sys = db != nullptr ? sqlite3_system_errno(db) : 0;
  std::string message = absl::StrFormat("state store %s: %s: %s", path, what,
                                        db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
  if (sys != 0) absl::StrAppend(&message, " (", std::strerror(sys), ")");
  absl::StatusCode code = absl::StatusCode::kInternal;
  const int primary = rc & 0xff;
  if (sys != 0) {
    code = absl::ErrnoToStatusCode(sys);
  } else if (primary == SQLITE_BUSY || primary == SQLITE_LOCKED) {
    code = absl::StatusCode::kUnavailable;
  } else if (primary == SQLITE_CONSTRAINT) {
    code = absl::StatusCode::kInvalidArgument;
  } else if (primary == SQLITE_FULL) {
    code = absl::StatusCode::kResourceExhausted;
  } else if (primary == SQLITE_READONLY || primary == SQLITE_PERM) {
    code = absl::StatusCode::kPermissionDenied;
  } else if (primary == SQLITE_NOTADB || primary == SQLITE_CORRUPT) {
    code = absl::StatusCode::kDataLoss;
  }
  return absl::Status(code, message);
}

absl::StatusOr<Stmt> Prepare(sqlite3* db, const char* sql, const std::string& path) {
  sqlite3_stmt* stmt = nullptr;
  const int rc = sqlite3_prepare_v2(db, sql, -1, &stmt, nullptr);
  if (rc != SQLITE_OK) return SqlError(db, rc, "cannot prepare a statement", path);
  return Stmt(stmt);
}

// Runs constant SQL (no values in it).
absl::Status Exec(sqlite3* db, const char* sql, std::string_view what, const std::string& path) {
  const int rc = sqlite3_exec(db, sql, nullptr, nullptr, nullptr);
  return rc == SQLITE_OK ? absl::OkStatus() : SqlError(db, rc, what, path);
}

void BindText(sqlite3_stmt* stmt, int index, const std::string& text) {
  sqlite3_bind_text(stmt, index, text.data(), static_cast<int>(text.size()), SQLITE_TRANSIENT);
}

// The first column of every row of constant SQL, as text. A file SQLite finds is not a database
// or is corrupt sets `bad` (why, in words) and is not an error.
absl::Status Rows(sqlite3* db, const char* sql, const std::string& path,
                  std::vector<std::string>* rows, std::string* bad) {
  sqlite3_stmt* raw = nullptr;
  int rc = sqlite3_prepare_v2(db, sql, -1, &raw, nullptr);
  Stmt stmt(raw);
  while (rc == SQLITE_OK || rc == SQLITE_ROW) {
    rc = sqlite3_step(stmt.get());
    if (rc == SQLITE_ROW) {
      const unsigned char* text = sqlite3_column_text(stmt.get(), 0);
      rows->emplace_back(text != nullptr ? reinterpret_cast<const char*>(text) : "");
    } else if (rc == SQLITE_DONE) {
      return absl::OkStatus();
    }
  }
  if ((rc & 0xff) == SQLITE_NOTADB) {
    *bad = "is not a SQLite database";
    return absl::OkStatus();
  }
  if ((rc & 0xff) == SQLITE_CORRUPT) {
    *bad = absl::StrCat("is corrupt (", sqlite3_errmsg(db), ")");
    return absl::OkStatus();
  }
  return SqlError(db, rc, absl::StrCat("cannot run ", sql), path);
}

// Why the file at `path` cannot be used as a store of ours; "" when it can or there is none.
absl::StatusOr<std::string> Inspect(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return std::string();
    return absl::ErrnoToStatus(errno, absl::StrCat("state store ", path, ": cannot stat it"));
  }
  if (!S_ISREG(st.st_mode)) return std::string("is not a regular file");
  if (st.st_size == 0) return std::string("is empty");
  sqlite3* raw = nullptr;
  // Read-only: a writing connection would remove the -wal of a file that is not a database on
  // closing, and that file is kept as found.
  const int rc = sqlite3_open_v2(path.c_str(), &raw, SQLITE_OPEN_READONLY, nullptr);
  Db db(raw);
  if (rc != SQLITE_OK) return SqlError(raw, rc, "cannot open it", path);
  sqlite3_extended_result_codes(db.get(), 1);
  sqlite3_busy_timeout(db.get(), kBusyTimeoutMs);

  std::string bad;
  std::vector<std::string> rows;
  absl::Status status = Rows(db.get(), "PRAGMA application_id", path, &rows, &bad);
  if (!status.ok()) return status;
  if (!bad.empty()) return bad;
  const int64_t application_id = rows.empty() ? 0 : std::strtoll(rows[0].c_str(), nullptr, 10);
  if (application_id == 0) {
    return std::string("is a SQLite database without an application_id, not a trainscope store");
  }
  if (application_id != kStateStoreApplicationId) {
    return absl::StrFormat("is another program's SQLite database (application_id 0x%08x)",
                           static_cast<uint32_t>(application_id));
  }
  rows.clear();
  status = Rows(db.get(), "PRAGMA user_version", path, &rows, &bad);
  if (!status.ok()) return status;
  if (!bad.empty()) return bad;
  const int64_t version = rows.empty() ? 0 : std::strtoll(rows[0].c_str(), nullptr, 10);
  if (version != kStateStoreSchemaVersion) {
    return absl::StrFormat("has schema version %d, %s than this build's %d", version,
                           version > kStateStoreSchemaVersion ? "newer" : "older",
                           kStateStoreSchemaVersion);
  }
  rows.clear();
  status = Rows(db.get(), "PRAGMA quick_check", path, &rows, &bad);
  if (!status.ok()) return status;
  if (!bad.empty()) return bad;
  if (rows.size() != 1 || rows[0] != "ok") {
    return absl::StrCat("is corrupt (quick_check: ", rows.empty() ? "no answer" : rows[0], ")");
  }
  return std::string();
}

bool Exists(const std::string& path) {
  struct stat st {};
  return lstat(path.c_str(), &st) == 0;
}

// Renames the store at `path` aside; the sentence that says so.
absl::StatusOr<std::string> SetAside(const std::string& path, const std::string& why) {
  const std::string base =
      absl::StrCat(path, ".set-aside-", static_cast<int64_t>(std::time(nullptr)));
  std::string aside = base;
  for (int n = 2; Exists(aside); ++n) aside = absl::StrCat(base, ".", n);
  // Its companions first: a -wal left beside a fresh file would be read into it.
  for (const char* suffix : {"-wal", "-shm", "-journal"}) {
    const std::string from = path + suffix;
    if (std::rename(from.c_str(), (aside + suffix).c_str()) != 0 && errno != ENOENT) {
      return absl::ErrnoToStatus(
          errno, absl::StrFormat("state store %s %s, but %s cannot be moved", path, why, from));
    }
  }
  if (std::rename(path.c_str(), aside.c_str()) != 0) {
    return absl::ErrnoToStatus(
        errno,
        absl::StrFormat("state store %s %s, but it cannot be moved to %s", path, why, aside));
  }
  return absl::StrFormat(
      "The state store %s %s: it was moved to %s and a fresh, empty store was made in its place.",
      path, why, aside);
}

// Opens the store at `path` for use, making it when there is none.
absl::StatusOr<Db> Connect(const std::string& path) {
  sqlite3* raw = nullptr;
  const int rc =
      sqlite3_open_v2(path.c_str(), &raw,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  Db db(raw);
  if (rc != SQLITE_OK) return SqlError(raw, rc, "cannot open or create it", path);
  sqlite3_extended_result_codes(db.get(), 1);
  sqlite3_busy_timeout(db.get(), kBusyTimeoutMs);

  std::string bad;
  std::vector<std::string> rows;
  absl::Status status = Rows(db.get(), "PRAGMA page_count", path, &rows, &bad);
  if (!status.ok()) return status;
  if (!bad.empty()) return absl::DataLossError(absl::StrCat("state store ", path, " ", bad));
  if (rows.empty() || rows[0] == "0") {
    // Only before the first table: lets Prune give deleted pages back to the file system.
    status = Exec(db.get(), "PRAGMA auto_vacuum = INCREMENTAL", "cannot set auto_vacuum", path);
    if (!status.ok()) return status;
  }
  rows.clear();
  status = Rows(db.get(), "PRAGMA journal_mode = WAL", path, &rows, &bad);
  if (!status.ok()) return status;
  if (rows.empty() || rows[0] != "wal") {
    spdlog::warn("state store {}: journal mode {} (WAL refused by the file system?)", path,
                 rows.empty() ? "unknown" : rows[0]);
  }
  status = Exec(db.get(), "PRAGMA synchronous = NORMAL", "cannot set synchronous", path);
  if (!status.ok()) return status;

  // The pragmas' values are this build's constants, not input: pragmas take no parameters.
  const std::string setup = absl::StrCat(
      "BEGIN IMMEDIATE;", kSchema, "PRAGMA application_id = ", kStateStoreApplicationId,
      ";PRAGMA user_version = ", kStateStoreSchemaVersion, ";COMMIT;");
  status = Exec(db.get(), setup.c_str(), "cannot write its schema", path);
  if (!status.ok()) {
    sqlite3_exec(db.get(), "ROLLBACK", nullptr, nullptr, nullptr);
    return status;
  }
  return db;
}

// A transaction that rolls back unless committed.
class Transaction {
 public:
  Transaction(sqlite3* db, const std::string& path) : db_(db), path_(path) {}
  ~Transaction() {
    if (begun_ && !committed_) sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
  }
  absl::Status Begin() {
    absl::Status status = Exec(db_, "BEGIN IMMEDIATE", "cannot begin a transaction", path_);
    begun_ = status.ok();
    return status;
  }
  absl::Status Commit() {
    absl::Status status = Exec(db_, "COMMIT", "cannot commit", path_);
    committed_ = status.ok();
    return status;
  }

 private:
  sqlite3* db_;
  const std::string& path_;
  bool begun_ = false;
  bool committed_ = false;
};

// A copy of an incident over kMaxIncidentBytes with its evidence snapshots' threads dropped, and
// the snapshots themselves if that is not enough; its timeline says so.
pb::Incident Trimmed(const pb::Incident& incident, size_t bytes) {
  pb::Incident out = incident;
  for (pb::IncidentEvidence& evidence : *out.mutable_evidence()) {
    if (evidence.has_snapshot()) evidence.mutable_snapshot()->clear_threads();
  }
  std::string dropped = "its evidence snapshots' threads";
  if (out.ByteSizeLong() > static_cast<size_t>(kMaxIncidentBytes)) {
    for (pb::IncidentEvidence& evidence : *out.mutable_evidence()) evidence.clear_snapshot();
    dropped = "its evidence snapshots";
  }
  pb::IncidentEvent* event = out.add_timeline();
  event->set_unix_seconds(incident.updated() > 0 ? incident.updated() : incident.started());
  event->set_text(absl::StrFormat(
      "Stored without %s: the incident took %d bytes, over the store's bound of %d.", dropped,
      bytes, kMaxIncidentBytes));
  spdlog::warn("state store: incident {} ({} bytes) stored without {}", incident.id(), bytes,
               dropped);
  return out;
}

// The incident in a row's blob; nullopt (logged) when it does not parse or is not that row's.
std::optional<pb::Incident> ParseRow(sqlite3_stmt* stmt, const std::string& path) {
  const unsigned char* id_text = sqlite3_column_text(stmt, 0);
  const std::string id = id_text != nullptr ? reinterpret_cast<const char*>(id_text) : "";
  const void* blob = sqlite3_column_blob(stmt, 1);
  const int bytes = sqlite3_column_bytes(stmt, 1);
  pb::Incident incident;
  if (!incident.ParseFromArray(blob, bytes) || incident.id() != id) {
    spdlog::warn("state store {}: incident {} is not a readable Incident ({} bytes); skipped", path,
                 id, bytes);
    return std::nullopt;
  }
  return incident;
}

void LogError(const absl::Status& status) { spdlog::error("{}", std::string(status.message())); }

}  // namespace

absl::StatusOr<std::unique_ptr<StateStore>> StateStore::Open(const std::string& dir,
                                                             StoreOptions options) {
  if (dir.empty()) return absl::InvalidArgumentError("state store: no state dir given");
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (!error && !std::filesystem::is_directory(dir, error) && !error) {
    error = std::make_error_code(std::errc::not_a_directory);
  }
  if (error) {
    return absl::Status(
        absl::ErrnoToStatusCode(error.value()),
        absl::StrFormat("state store: cannot create the state dir %s: %s", dir, error.message()));
  }
  if (access(dir.c_str(), W_OK | X_OK) != 0) {
    return absl::ErrnoToStatus(
        errno, absl::StrFormat("state store: cannot write in the state dir %s", dir));
  }
  const std::string path = (std::filesystem::path(dir) / kStateStoreFile).string();

  absl::StatusOr<std::string> bad = Inspect(path);
  if (!bad.ok()) return bad.status();
  std::string set_aside;
  if (!bad->empty()) {
    absl::StatusOr<std::string> said = SetAside(path, *bad);
    if (!said.ok()) return said.status();
    set_aside = *std::move(said);
  }
  absl::StatusOr<Db> db = Connect(path);
  if (!db.ok()) return db.status();
  return std::unique_ptr<StateStore>(
      new StateStore(db->release(), path, std::move(set_aside), options));
}

StateStore::StateStore(sqlite3* db, std::string path, std::string set_aside, StoreOptions options)
    : path_(std::move(path)), set_aside_(std::move(set_aside)), options_(options), db_(db) {}

StateStore::~StateStore() {
  std::lock_guard<std::mutex> lock(mu_);
  sqlite3_close_v2(db_);
}

absl::Status StateStore::PutIncident(const pb::Incident& incident) {
  if (incident.id().empty()) {
    return absl::InvalidArgumentError("state store: an incident without an id cannot be stored");
  }
  std::string blob;
  const size_t bytes = incident.ByteSizeLong();
  const bool ok = bytes > static_cast<size_t>(kMaxIncidentBytes)
                      ? Trimmed(incident, bytes).SerializeToString(&blob)
                      : incident.SerializeToString(&blob);
  if (!ok) {
    return absl::InvalidArgumentError(
        absl::StrCat("state store: incident ", incident.id(), " cannot be serialized"));
  }
  const double age_from = incident.ended() > 0 ? incident.ended() : incident.started();

  std::lock_guard<std::mutex> lock(mu_);
  // The rows of the ids it was known by on this node (renamed to its owner's id) go with the
  // write of the new one: never both, never neither.
  Transaction transaction(db_, path_);
  if (absl::Status begun = transaction.Begin(); !begun.ok()) return begun;
  if (incident.former_ids_size() > 0) {
    absl::StatusOr<Stmt> erase = Prepare(db_, "DELETE FROM incidents WHERE id = ?", path_);
    if (!erase.ok()) return erase.status();
    for (const std::string& id : incident.former_ids()) {
      if (id == incident.id()) continue;
      sqlite3_reset(erase->get());
      BindText(erase->get(), 1, id);
      if (const int rc = sqlite3_step(erase->get()); rc != SQLITE_DONE) {
        return SqlError(db_, rc, absl::StrCat("cannot drop incident ", id), path_);
      }
    }
  }
  absl::StatusOr<Stmt> stmt = Prepare(db_,
                                      "INSERT OR REPLACE INTO incidents "
                                      "(id, cluster, open, started, age_from, bytes, blob) "
                                      "VALUES (?, ?, ?, ?, ?, ?, ?)",
                                      path_);
  if (!stmt.ok()) return stmt.status();
  sqlite3_stmt* s = stmt->get();
  BindText(s, 1, incident.id());
  BindText(s, 2, incident.cluster());
  sqlite3_bind_int(s, 3, incident.open() ? 1 : 0);
  sqlite3_bind_double(s, 4, incident.started());
  sqlite3_bind_double(s, 5, age_from);
  sqlite3_bind_int64(s, 6, static_cast<int64_t>(blob.size()));
  sqlite3_bind_blob(s, 7, blob.data(), static_cast<int>(blob.size()), SQLITE_STATIC);
  const int rc = sqlite3_step(s);
  if (rc != SQLITE_DONE) {
    return SqlError(db_, rc, absl::StrCat("cannot store incident ", incident.id()), path_);
  }
  return transaction.Commit();
}

std::vector<pb::Incident> StateStore::Incidents(int limit) const {
  std::vector<pb::Incident> incidents;
  if (limit <= 0) return incidents;
  std::lock_guard<std::mutex> lock(mu_);
  absl::StatusOr<Stmt> stmt =
      Prepare(db_, "SELECT id, blob FROM incidents ORDER BY open DESC, started DESC, id", path_);
  if (!stmt.ok()) {
    LogError(stmt.status());
    return incidents;
  }
  int rc = SQLITE_ROW;
  while (static_cast<int>(incidents.size()) < limit &&
         (rc = sqlite3_step(stmt->get())) == SQLITE_ROW) {
    std::optional<pb::Incident> incident = ParseRow(stmt->get(), path_);
    if (incident) incidents.push_back(*std::move(incident));
  }
  if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
    LogError(SqlError(db_, rc, "cannot list incidents", path_));
  }
  return incidents;
}

std::optional<pb::Incident> StateStore::Incident(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mu_);
  absl::StatusOr<Stmt> stmt = Prepare(db_, "SELECT id, blob FROM incidents WHERE id = ?", path_);
  if (!stmt.ok()) {
    LogError(stmt.status());
    return std::nullopt;
  }
  BindText(stmt->get(), 1, id);
  const int rc = sqlite3_step(stmt->get());
  if (rc == SQLITE_ROW) return ParseRow(stmt->get(), path_);
  if (rc != SQLITE_DONE) {
    LogError(SqlError(db_, rc, absl::StrCat("cannot read incident ", id), path_));
  }
  return std::nullopt;
}

absl::Status StateStore::PutLedger(const std::string& cluster,
                                   const std::vector<LedgerRow>& totals) {
  std::lock_guard<std::mutex> lock(mu_);
  Transaction transaction(db_, path_);
  absl::Status status = transaction.Begin();
  if (!status.ok()) return status;
  absl::StatusOr<Stmt> erase = Prepare(db_, "DELETE FROM ledger WHERE cluster = ?", path_);
  if (!erase.ok()) return erase.status();
  BindText(erase->get(), 1, cluster);
  int rc = sqlite3_step(erase->get());
  if (rc != SQLITE_DONE) return SqlError(db_, rc, "cannot replace the ledger", path_);

  absl::StatusOr<Stmt> insert = Prepare(
      db_, "INSERT INTO ledger (cluster, task, outcome, seconds) VALUES (?, ?, ?, ?)", path_);
  if (!insert.ok()) return insert.status();
  sqlite3_stmt* s = insert->get();
  for (const LedgerRow& row : totals) {
    sqlite3_reset(s);
    BindText(s, 1, cluster);
    BindText(s, 2, row.task);
    BindText(s, 3, row.outcome);
    sqlite3_bind_double(s, 4, row.seconds);
    rc = sqlite3_step(s);
    if ((rc & 0xff) == SQLITE_CONSTRAINT) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "state store: the ledger of cluster %s has %s %s twice", cluster, row.task, row.outcome));
    }
    if (rc != SQLITE_DONE) return SqlError(db_, rc, "cannot write the ledger", path_);
  }
  return transaction.Commit();
}

std::vector<LedgerRow> StateStore::Ledger(const std::string& cluster) const {
  std::vector<LedgerRow> rows;
  std::lock_guard<std::mutex> lock(mu_);
  absl::StatusOr<Stmt> stmt = Prepare(
      db_, "SELECT task, outcome, seconds FROM ledger WHERE cluster = ? ORDER BY task, outcome",
      path_);
  if (!stmt.ok()) {
    LogError(stmt.status());
    return rows;
  }
  BindText(stmt->get(), 1, cluster);
  int rc;
  while ((rc = sqlite3_step(stmt->get())) == SQLITE_ROW) {
    LedgerRow& row = rows.emplace_back();
    row.task = reinterpret_cast<const char*>(sqlite3_column_text(stmt->get(), 0));
    row.outcome = reinterpret_cast<const char*>(sqlite3_column_text(stmt->get(), 1));
    row.seconds = sqlite3_column_double(stmt->get(), 2);
  }
  if (rc != SQLITE_DONE) {
    LogError(SqlError(db_, rc, "cannot read the ledger", path_));
  }
  return rows;
}

int StateStore::Prune(double now_unix) {
  std::lock_guard<std::mutex> lock(mu_);
  Transaction transaction(db_, path_);
  int deleted = 0;
  absl::Status status = [&]() -> absl::Status {
    absl::Status begun = transaction.Begin();
    if (!begun.ok()) return begun;
    absl::StatusOr<Stmt> aged =
        Prepare(db_, "DELETE FROM incidents WHERE open = 0 AND age_from < ?", path_);
    if (!aged.ok()) return aged.status();
    sqlite3_bind_double(aged->get(), 1, now_unix - options_.max_age_s);
    int rc = sqlite3_step(aged->get());
    if (rc != SQLITE_DONE) return SqlError(db_, rc, "cannot delete old incidents", path_);
    deleted += sqlite3_changes(db_);

    absl::StatusOr<Stmt> total =
        Prepare(db_, "SELECT COALESCE(SUM(bytes), 0) FROM incidents", path_);
    if (!total.ok()) return total.status();
    rc = sqlite3_step(total->get());
    if (rc != SQLITE_ROW) return SqlError(db_, rc, "cannot sum the incidents' sizes", path_);
    int64_t bytes = sqlite3_column_int64(total->get(), 0);
    if (bytes <= options_.max_bytes) return transaction.Commit();

    absl::StatusOr<Stmt> oldest = Prepare(
        db_, "SELECT id, bytes FROM incidents WHERE open = 0 ORDER BY age_from, started, id",
        path_);
    if (!oldest.ok()) return oldest.status();
    std::vector<std::string> ids;
    while (bytes > options_.max_bytes && (rc = sqlite3_step(oldest->get())) == SQLITE_ROW) {
      ids.emplace_back(reinterpret_cast<const char*>(sqlite3_column_text(oldest->get(), 0)));
      bytes -= sqlite3_column_int64(oldest->get(), 1);
    }
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
      return SqlError(db_, rc, "cannot list closed incidents", path_);
    }
    absl::StatusOr<Stmt> erase = Prepare(db_, "DELETE FROM incidents WHERE id = ?", path_);
    if (!erase.ok()) return erase.status();
    for (const std::string& id : ids) {
      sqlite3_reset(erase->get());
      BindText(erase->get(), 1, id);
      rc = sqlite3_step(erase->get());
      if (rc != SQLITE_DONE) return SqlError(db_, rc, "cannot delete incidents", path_);
      deleted += sqlite3_changes(db_);
    }
    return transaction.Commit();
  }();
  if (!status.ok()) {
    LogError(status);
    return 0;
  }
  if (deleted > 0) {
    // Gives the freed pages back to the file system; the store is already consistent without.
    sqlite3_exec(db_, "PRAGMA incremental_vacuum", nullptr, nullptr, nullptr);
  }
  return deleted;
}

}  // namespace trainscope::sidecar
