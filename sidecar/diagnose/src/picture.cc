#include "trainscope/sidecar/picture.h"

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "trainscope/common/clock.h"

namespace trainscope::sidecar {
namespace {

// What the alerts follow: every task's state, every node's status, the open incidents' ids and
// the tasks they hold (their `incident` labels).
std::string Held(const ClusterView& view, const IncidentsNow& now) {
  std::string held;
  for (const TaskView& t : view.tasks)
    absl::StrAppend(&held, t.task.ShortName(), "=", std::string(StateName(t.state)), ",");
  for (const NodeInfo& n : view.nodes) absl::StrAppend(&held, n.id, "=", n.status, ",");
  held += '|';
  for (const pb::Incident& incident : now.incidents) {
    if (!incident.open()) continue;
    absl::StrAppend(&held, incident.id(), ":");
    for (const pb::AffectedTask& t : incident.affected()) {
      if (t.until() == 0) absl::StrAppend(&held, t.task(), ",");
    }
    held += ';';
  }
  return held;
}

}  // namespace

PictureTicker::PictureTicker(PictureTickerOptions options)
    : options_(std::move(options)), book_(options_.book) {}

PictureTicker::~PictureTicker() { Stop(); }

void PictureTicker::Restore(const std::vector<pb::Incident>& incidents,
                            const std::vector<Ledger::Row>& rows) {
  book_.Restore(incidents);
  book_.ledger().Restore(rows);
}

void PictureTicker::Start() {
  thread_ = std::thread([this] {
    using Clock = std::chrono::steady_clock;
    const auto period = std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double>(options_.period_s));
    const auto gap = std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double>(options_.min_poked_gap_s));
    std::unique_lock<std::mutex> lock(mu_);
    while (!stopping_) {
      const bool poked = std::exchange(poked_, false);
      lock.unlock();
      const Clock::time_point began = Clock::now();
      Tick(poked);
      lock.lock();
      cv_.wait_until(lock, began + period, [this] { return stopping_ || poked_; });
      // Poked: at once, but no sooner than the gap after the last tick began.
      cv_.wait_until(lock, began + gap, [this] { return stopping_; });
    }
  });
}

void PictureTicker::Stop() {
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

void PictureTicker::Poke() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    poked_ = true;
  }
  cv_.notify_all();
}

void PictureTicker::Persist() {
  last_persist_ = MonotonicSeconds();
  if (!options_.persist) return;
  std::vector<pb::Incident> changed = book_.TakeChanged();
  options_.persist(changed, book_.ledger());
}

void PictureTicker::Tick(bool poked) {
  const ClusterViewInputs in = options_.inputs();
  auto picture = std::make_shared<Picture>();
  picture->view = BuildClusterView(in);
  book_.Track(picture->view, in.stacks.get(), in.now_unix);
  picture->incidents = std::make_shared<const IncidentsNow>(book_.Now(options_.cluster));
  if (MonotonicSeconds() - last_persist_ >= options_.persist_every_s) Persist();
  std::string held = Held(picture->view, *picture->incidents);
  {
    std::lock_guard<std::mutex> lock(mu_);
    now_ = std::move(picture);
  }
  const bool changed = held != held_;
  held_ = std::move(held);
  if ((changed || poked) && options_.on_news) options_.on_news();
}

std::shared_ptr<const Picture> PictureTicker::Now() const {
  std::lock_guard<std::mutex> lock(mu_);
  return now_;
}

}  // namespace trainscope::sidecar
