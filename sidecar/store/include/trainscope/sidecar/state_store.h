#pragma once
// What the sidecar keeps across restarts: incidents (serialized pb::Incident with the columns
// they are listed and aged by) and each cluster's training-time ledger, in one SQLite file under
// the state dir. A file that is not a store of ours is set aside, never opened as one; what is
// stored is bounded (per incident, and in total by Prune's retention).

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "trainscope/sidecar/api.h"

struct sqlite3;

namespace trainscope::sidecar {

// The store's file in the state dir.
inline constexpr char kStateStoreFile[] = "trainscope-state.db";
// PRAGMA application_id of every trainscope store ("TSCP"): a file without it is not ours.
inline constexpr int32_t kStateStoreApplicationId = 0x54534350;
// PRAGMA user_version: the schema this build writes and reads. A store with another version is
// set aside (there is no older schema to migrate from yet).
inline constexpr int kStateStoreSchemaVersion = 1;
// An incident whose serialized form is larger is stored without its evidence snapshots' threads.
inline constexpr int64_t kMaxIncidentBytes = 1 << 20;

// Retention, applied by StateStore::Prune.
struct StoreOptions {
  double max_age_s = 30 * 86400;  // Closed incidents that ended longer ago than this are deleted.
  int64_t max_bytes = 64 << 20;   // Bound on the incidents' total size; oldest closed go first.
};

// One line of a cluster's ledger: the seconds one task spent in one outcome (productive,
// waiting, down, redone, idle; the store does not interpret it).
struct LedgerRow {
  std::string task;
  std::string outcome;
  double seconds = 0;
};

// The sidecar's embedded store. Thread-safe: one connection, every call under one mutex. Calls
// that return values log a failure (spdlog) and return what they could read; none throws.
class StateStore {
 public:
  // Opens <dir>/trainscope-state.db, creating the dir and the file when missing. A file that is
  // empty, not a SQLite database, corrupt (PRAGMA quick_check), another program's (its
  // application_id) or of another schema version (user_version) is renamed aside to
  // <file>.set-aside-<unix seconds> (its -wal and -shm with it) and a fresh store made; then
  // set_aside() says so. An error, naming the path and the system's reason, when the dir cannot
  // be made or the file cannot be opened, read or written (a store in use elsewhere is busy,
  // not bad: it is never set aside).
  static absl::StatusOr<std::unique_ptr<StateStore>> Open(const std::string& dir,
                                                          StoreOptions options = {});
  ~StateStore();
  StateStore(const StateStore&) = delete;
  StateStore& operator=(const StateStore&) = delete;

  // "" when the file found was opened as it was; else one sentence: which file was set aside,
  // why, and where it went.
  const std::string& set_aside() const { return set_aside_; }
  // The store's file.
  const std::string& path() const { return path_; }

  // Inserts the incident, or replaces the one with its id. InvalidArgument without an id. An
  // incident over kMaxIncidentBytes is stored with its evidence snapshots' threads dropped (and
  // if still over, the snapshots themselves), which a line of its timeline says.
  absl::Status PutIncident(const pb::Incident& incident);
  // At most `limit` incidents: the open ones first, then the closed; each newest start first.
  // Stored ones that do not parse are skipped (and logged).
  std::vector<pb::Incident> Incidents(int limit) const;
  // The incident with that id; nullopt when there is none or it does not parse.
  std::optional<pb::Incident> Incident(const std::string& id) const;

  // Replaces the cluster's ledger with `totals` (one row per task and outcome; a repeated pair
  // is InvalidArgument and changes nothing).
  absl::Status PutLedger(const std::string& cluster, const std::vector<LedgerRow>& totals);
  // The cluster's ledger, by task, then outcome; empty when none is stored.
  std::vector<LedgerRow> Ledger(const std::string& cluster) const;

  // Applies the retention: deletes the closed incidents that ended before now - max_age_s, then,
  // while the stored incidents exceed max_bytes, the closed ones that ended first. Open incidents
  // are never deleted. Returns how many were deleted (0 on a failure, which is logged). Nothing
  // else deletes incidents: call it after Open and then now and then.
  int Prune(double now_unix);

 private:
  StateStore(sqlite3* db, std::string path, std::string set_aside, StoreOptions options);

  const std::string path_;
  const std::string set_aside_;
  const StoreOptions options_;
  mutable std::mutex mu_;
  sqlite3* const db_ ABSL_GUARDED_BY(mu_);
};

}  // namespace trainscope::sidecar
