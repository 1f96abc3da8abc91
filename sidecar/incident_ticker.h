#pragma once
// The wiring's tick of the incident book: every `period_s`, the values of the moment (the
// cluster view's inputs) go to the book (diagnose/incidents.h), what it shows is published for
// the routes and /metrics, and every `persist_every_s` (and once more on Stop) what changed is
// handed to `persist` (the store). The book advances whether or not anyone reads the page.

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "trainscope/sidecar/cluster_view.h"
#include "trainscope/sidecar/incidents.h"

namespace trainscope::sidecar {

struct IncidentTickerOptions {
  std::string cluster;
  double period_s = 0.2;
  IncidentBookOptions book;
  std::function<ClusterViewInputs()> inputs;  // The observers' values of this moment.
  // Called on the ticker's thread with the incidents opened, changed or closed since its last
  // call, and the ledger; null: nothing is kept.
  double persist_every_s = 1;
  std::function<void(const std::vector<pb::Incident>&, const Ledger&)> persist;
  // Called on the ticker's thread after a tick that changed the open incidents or the tasks
  // they hold (a superset of what the alerts' `incident` labels depend on: the open incidents'
  // causes; the notifier's new alerts wait for theirs); null: nobody.
  std::function<void()> on_held_change;
};

class IncidentTicker {
 public:
  explicit IncidentTicker(IncidentTickerOptions options);
  ~IncidentTicker();

  // Puts back what the store kept; before Start.
  void Restore(const std::vector<pb::Incident>& incidents, const std::vector<Ledger::Row>& rows);
  void Start();
  void Stop();
  // One tick now (the thread's body; tests call it).
  void Tick();
  // Hands what changed to `persist` now.
  void Persist();
  // As of the last tick; null before the first.
  std::shared_ptr<const IncidentsNow> Now() const;

 private:
  IncidentTickerOptions options_;
  IncidentBook book_;  // The ticker's thread only (and Restore, before it starts).
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  double last_persist_ = 0;  // Monotonic seconds.
  std::string held_;         // Open incidents' ids and held tasks, as of the last tick.
  std::shared_ptr<const IncidentsNow> now_;
  std::thread thread_;
};

}  // namespace trainscope::sidecar
