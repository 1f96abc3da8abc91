#pragma once
// Heartbeat polling over gRPC: one channel per task, asynchronous calls on one completion queue,
// at most one call in flight per task. The only place that sees HeartbeatResponse: it converts
// answers and errors into PollResult for the trackers. A task that answers UNIMPLEMENTED (a
// gRPC server without trainscope's Heartbeat, e.g. TensorFlow's) is watched from outside: its
// answer is the round trip plus /proc of the process holding its port. Private to the sidecar
// library.

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "trainscope/common/clock.h"
#include "trainscope/common/process_identity.h"
#include "trainscope/sidecar/task_tracker.h"

namespace grpc {
class ChannelCredentials;
}  // namespace grpc

namespace trainscope::sidecar {

class HookReports;

// Decodes a heartbeat answer as it comes off the wire (a serialized HeartbeatResponse) the way
// the poller takes it: bytes that do not parse, or an answer without identity, are kBadAnswer;
// otherwise a HeartbeatInfo with the sizes of everything from the wire bounded. Exposed for the
// tests and the fuzzer. Thread-safe.
PollResult DecodeHeartbeatAnswer(absl::string_view serialized, double sent_s, double received_s);

// Not thread-safe: driven by one thread (the poll loop).
class HeartbeatPoller {
 public:
  struct Target {
    std::string address;
    bool local = false;  // Probe the port with connect() to tell "refused" apart.
    // Watched from outside whatever it answers: any gRPC status from the server (not only
    // UNIMPLEMENTED, which makes any task watched from outside) proves it serves.
    bool black_box = false;
    TaskRef task;  // Whose reports (hook_reports.h) may complete an answer from outside.
  };
  // `credentials`: of every channel (plain text when null). `finder`: how local tasks'
  // processes are found (process_identity.h; empty members: this process's /proc).
  // `hooks`: the reports of hooked programs (may be null; must outlive this).
  HeartbeatPoller(std::vector<Target> targets, int deadline_ms, std::string watcher,
                  std::shared_ptr<grpc::ChannelCredentials> credentials = nullptr,
                  ProcessFinder finder = {}, const HookReports* hooks = nullptr);
  ~HeartbeatPoller();

  // Starts a call to target `i` unless one is in flight. `now_s` is monotonic seconds.
  void Poll(size_t i, double now_s);
  bool InFlight(size_t i) const;
  // Waits until `until_s` (monotonic) for completions, calling `done(i, result)` for each.
  // Returns early once a completion came (after taking the others already there).
  void Wait(double until_s, const std::function<void(size_t, const PollResult&)>& done);
  // Cancels in-flight calls and drains the queue.
  void Shutdown();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace trainscope::sidecar
