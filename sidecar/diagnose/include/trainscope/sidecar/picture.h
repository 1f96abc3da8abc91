#pragma once
// One tick, one picture. Every `period_s`, and at once when poked (a task of this node changed
// state; what the exchange learns waits for the next tick, so that a busy exchange does not
// tick it tens of times a second), the ticker turns the observers' newest values (the cluster
// view's inputs) into one immutable Picture: the cluster view with its explanations and the
// incident book's state. It is published by pointer swap, and every reader (the API, the page,
// /metrics, the notifier, the stacks route) shares it; no reader builds a view. Every
// `persist_every_s` (and once more on Stop) what the book changed is handed to `persist` (the
// store). The book advances whether or not anyone reads the page.

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

// The cluster as this sidecar sees it, as of one tick. Never changed once published.
struct Picture {
  ClusterView view;
  std::shared_ptr<const IncidentsNow> incidents;  // Never null.
};

// Where readers take the newest picture from.
class PictureSource {
 public:
  virtual ~PictureSource() = default;
  // The newest picture; null before the first tick.
  virtual std::shared_ptr<const Picture> Now() const = 0;
};

struct PictureTickerOptions {
  std::string cluster;
  double period_s = 0.2;
  // A poke ticks at once, but no sooner than this after the last tick began: at 40 nodes the
  // exchange's snapshot changes tens of times a second, and a tick each time would cost more
  // than the readers it saves.
  double min_poked_gap_s = 0.1;
  IncidentBookOptions book;
  std::function<ClusterViewInputs()> inputs;  // The observers' values of this moment.
  // Called on the ticker's thread with the incidents opened, changed or closed since its last
  // call, and the ledger; null: nothing is kept.
  double persist_every_s = 1;
  std::function<void(const std::vector<pb::Incident>&, const Ledger&)> persist;
  // Called on the ticker's thread after a tick that was poked, or that changed a task's state,
  // a node's status, the open incidents or the tasks they hold (what the alerts and their
  // `incident` labels follow), for the readers who act on change (the notifier). Null: nobody.
  std::function<void()> on_news;
};

class PictureTicker : public PictureSource {
 public:
  explicit PictureTicker(PictureTickerOptions options);
  ~PictureTicker() override;

  // Puts back what the store kept; before Start.
  void Restore(const std::vector<pb::Incident>& incidents, const std::vector<Ledger::Row>& rows);
  void Start();
  void Stop();
  // One tick now (the thread's body; tests call it); `poked`: one asked for by Poke.
  void Tick(bool poked = false);
  // A tick as soon as the thread is free, without waiting for the period: something changed.
  void Poke();
  // Hands what changed to `persist` now.
  void Persist();
  std::shared_ptr<const Picture> Now() const override;

 private:
  PictureTickerOptions options_;
  IncidentBook book_;  // The ticker's thread only (and Restore, before it starts).
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  bool poked_ = false;
  double last_persist_ = 0;  // Monotonic seconds.
  std::string held_;         // Open incidents' ids and held tasks, as of the last tick.
  std::shared_ptr<const Picture> now_;
  std::thread thread_;
};

}  // namespace trainscope::sidecar
