#pragma once
// The sidecar's writes to its state store, as the incident ticker hands them: the incidents that
// changed, and the ledger. A failed write (a full disk) loses nothing the store was handed: the
// incidents not written wait, by id, and go with the next call. The failure is logged once when
// writes start to fail and once when they succeed again, never once a call.

#include <cstddef>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "trainscope/sidecar/api.h"
#include "trainscope/sidecar/state_store.h"

namespace trainscope::sidecar {

struct StoreWriterOptions {
  std::string path;  // The store's file, for the log lines.
  // Writes one incident (StateStore::PutIncident); writes the whole ledger (StateStore::PutLedger
  // with the cluster).
  std::function<absl::Status(const pb::Incident&)> put_incident;
  std::function<absl::Status(const std::vector<LedgerRow>&)> put_ledger;
};

// Write and waiting() are called from one thread (the ticker's); error() from any.
class StoreWriter {
 public:
  explicit StoreWriter(StoreWriterOptions options);
  // Logs the incidents that never got written (the store took no writes until the end).
  ~StoreWriter();
  StoreWriter(const StoreWriter&) = delete;
  StoreWriter& operator=(const StoreWriter&) = delete;

  // Writes the incidents still waiting and `changed`, one write per id (the newest copy), then
  // the ledger. Stops at the first failed write: the incidents not written wait for the next
  // call (the ledger is whole in every call). An incident refused for itself (InvalidArgument:
  // no id) is logged and dropped, as writing it again cannot help. `now_s` (monotonic seconds)
  // dates when writes started to fail, for the line that says they work again.
  void Write(const std::vector<pb::Incident>& changed, const std::vector<LedgerRow>& ledger,
             double now_s);
  // Incidents waiting for a write that succeeds.
  size_t waiting() const { return waiting_.size(); }
  // Why the last write failed ("" once a Write succeeds in full): the file and SQLite's reason.
  std::string error() const;

 private:
  // The waiting incidents (counting those written), then the ledger; the first failure.
  absl::Status WriteAll(const std::vector<LedgerRow>& ledger, int* written);

  const StoreWriterOptions options_;
  std::map<std::string, pb::Incident> waiting_;  // By id; Write's thread only.
  double failing_since_s_ = -1;                  // Write's thread only; < 0 while writes succeed.
  mutable std::mutex mu_;
  std::string error_ ABSL_GUARDED_BY(mu_);
};

}  // namespace trainscope::sidecar
