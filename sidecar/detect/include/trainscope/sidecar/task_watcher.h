#pragma once
// Watches this node's tasks: one thread polls every task's heartbeat (HeartbeatPoller), feeds
// the answers and /proc facts to each task's TaskTracker, decides the states once per tick, and
// publishes the views. Readers (the HTTP API, /metrics, the exchange) take the latest published
// snapshot and never hold up the loop. Thread-safe.

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "trainscope/common/process_identity.h"
#include "trainscope/sidecar/task_tracker.h"
#include "trainscope/sidecar/task_view.h"

namespace grpc {
class ChannelCredentials;
}  // namespace grpc

namespace trainscope::sidecar {

class HookReports;

struct WatchedTask {
  TaskRef task;
  std::string address;
  bool local = false;      // Its host is this machine: /proc evidence applies.
  bool black_box = false;  // Watched from outside whatever it answers (--black_box_tasks).
};

struct WatcherOptions {
  std::string cluster;
  std::vector<WatchedTask> tasks;
  TrackerOptions tracker;
  int heartbeat_deadline_ms = 2000;
  std::string watcher_name;  // Sent in every HeartbeatRequest.
  std::string hostname;      // This machine's.
  double start_unix = 0;
  // Of the channels to the tasks: plain text when null, else TLS (--tls_*).
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  // How local tasks' processes are found (the capture helper's, once the sidecar has dropped
  // its capabilities); empty members: this process's /proc.
  ProcessFinder finder;
  // Reports of hooked programs (hook_reports.h), merged into their tasks' answers; may be null.
  std::shared_ptr<const HookReports> hooks;
};

// What the watcher decided at its last tick.
struct LocalSnapshot {
  std::vector<TaskView> views;  // Parallel to counters, in WatcherOptions.tasks order.
  std::vector<TaskCounters> counters;
  int64_t pauses = 0;  // Times the loop itself was paused and re-learned.
};

class TaskWatcher {
 public:
  // `on_change` runs on the watcher's thread after a publication in which a task changed state
  // or restarted, or while a task is held up by a peer (HeldUpByAPeer; keep it cheap).
  TaskWatcher(WatcherOptions options, std::function<void()> on_change);
  ~TaskWatcher();
  void Start();
  // Returns once the loop has stopped and every call in flight is cancelled.
  void Stop();
  std::shared_ptr<const LocalSnapshot> snapshot() const;

 private:
  void Loop();
  void Publish(std::vector<TaskView> views, std::vector<TaskCounters> counters, bool paused,
               bool changed);

  WatcherOptions options_;
  std::function<void()> on_change_;
  std::vector<TaskTracker> trackers_;  // Owned by the loop's thread.
  mutable std::mutex mu_;              // Guards snapshot_ and stop_.
  std::shared_ptr<const LocalSnapshot> snapshot_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace trainscope::sidecar
