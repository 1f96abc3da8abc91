// Writes to the state store that outlast a failed one; see store_writer.h.
#include "trainscope/sidecar/store_writer.h"

#include <utility>

#include "spdlog/spdlog.h"

namespace trainscope::sidecar {

StoreWriter::StoreWriter(StoreWriterOptions options) : options_(std::move(options)) {}

StoreWriter::~StoreWriter() {
  if (waiting_.empty()) return;
  spdlog::warn("state store {}: {} incident{} never written: it took no writes until the end ({})",
               options_.path, waiting_.size(), waiting_.size() == 1 ? " was" : "s were", error());
}

void StoreWriter::Write(const std::vector<pb::Incident>& changed,
                        const std::vector<LedgerRow>& ledger, double now_s) {
  for (const pb::Incident& incident : changed) {
    // Renamed to its owner's id: a copy still waiting under a former id would put its row back.
    for (const std::string& id : incident.former_ids()) {
      if (id != incident.id()) waiting_.erase(id);
    }
    waiting_[incident.id()] = incident;
  }
  int written = 0;
  const absl::Status status = WriteAll(ledger, &written);
  if (status.ok() && failing_since_s_ >= 0) {
    spdlog::info("state store {}: kept again after {:.0f} s; {} incident{} caught up",
                 options_.path, now_s - failing_since_s_, written, written == 1 ? "" : "s");
    failing_since_s_ = -1;
  } else if (!status.ok() && failing_since_s_ < 0) {
    failing_since_s_ = now_s;
    spdlog::warn(
        "{}. Nothing is lost: the incidents stay in memory, served as before, and are written "
        "once the store takes writes again (tried every second; logged again only then)",
        std::string(status.message()));
  }
  std::lock_guard<std::mutex> lock(mu_);
  error_ = std::string(status.message());
}

absl::Status StoreWriter::WriteAll(const std::vector<LedgerRow>& ledger, int* written) {
  for (auto it = waiting_.begin(); it != waiting_.end(); it = waiting_.erase(it)) {
    const absl::Status status = options_.put_incident(it->second);
    if (status.code() == absl::StatusCode::kInvalidArgument) {
      spdlog::warn("state store {}: incident {} not kept: {}", options_.path, it->first,
                   std::string(status.message()));
    } else if (!status.ok()) {
      return status;
    } else {
      ++*written;
    }
  }
  return options_.put_ledger(ledger);
}

std::string StoreWriter::error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return error_;
}

}  // namespace trainscope::sidecar
