#include "incident_ticker.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "trainscope/common/clock.h"

namespace trainscope::sidecar {

IncidentTicker::IncidentTicker(IncidentTickerOptions options)
    : options_(std::move(options)), book_(options_.book) {}

IncidentTicker::~IncidentTicker() { Stop(); }

void IncidentTicker::Restore(const std::vector<pb::Incident>& incidents,
                             const std::vector<Ledger::Row>& rows) {
  book_.Restore(incidents);
  book_.ledger().Restore(rows);
  auto now = std::make_shared<const IncidentsNow>(book_.Now(options_.cluster));
  std::lock_guard<std::mutex> lock(mu_);
  now_ = std::move(now);
}

void IncidentTicker::Start() {
  thread_ = std::thread([this] {
    const auto period = std::chrono::duration<double>(options_.period_s);
    std::unique_lock<std::mutex> lock(mu_);
    while (!stopping_) {
      lock.unlock();
      Tick();
      lock.lock();
      cv_.wait_for(lock, period, [this] { return stopping_; });
    }
  });
}

void IncidentTicker::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) {
    thread_.join();
    Persist();  // What the last ticks changed.
  }
}

void IncidentTicker::Persist() {
  last_persist_ = MonotonicSeconds();
  if (!options_.persist) return;
  std::vector<pb::Incident> changed = book_.TakeChanged();
  options_.persist(changed, book_.ledger());
}

void IncidentTicker::Tick() {
  const ClusterViewInputs in = options_.inputs();
  const ClusterView view = BuildClusterView(in);
  book_.Track(view, in.stacks.get(), in.now_unix);
  auto now = std::make_shared<const IncidentsNow>(book_.Now(options_.cluster));
  if (MonotonicSeconds() - last_persist_ >= options_.persist_every_s) Persist();
  std::string held;
  for (const pb::Incident& incident : now->incidents) {
    if (!incident.open()) continue;
    absl::StrAppend(&held, incident.id(), ":");
    for (const pb::AffectedTask& t : incident.affected()) {
      if (t.until() == 0) absl::StrAppend(&held, t.task(), ",");
    }
    held += ';';
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    now_ = std::move(now);
  }
  if (held != held_) {
    held_ = std::move(held);
    if (options_.on_held_change) options_.on_held_change();
  }
}

std::shared_ptr<const IncidentsNow> IncidentTicker::Now() const {
  std::lock_guard<std::mutex> lock(mu_);
  return now_;
}

}  // namespace trainscope::sidecar
