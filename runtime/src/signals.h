#pragma once
// SIGTERM and SIGINT (stop: leaving) and SIGUSR1 (finish training now: done) for a task:
// blocked in every thread, and waited for by one thread of ours. Private to the runtime.

#include <atomic>
#include <functional>
#include <thread>

namespace trainscope {

// Blocks SIGTERM, SIGINT and SIGUSR1 in the calling thread (so in every thread it starts
// afterwards) and waits for them on a thread of its own, calling `on_signal` with the signal's name
// ("SIGTERM") each time one arrives. Construct it before starting other threads. The destructor
// stops the thread (within about 200 ms). Not copyable; `on_signal` runs on the watcher's thread.
class SignalWatcher {
 public:
  explicit SignalWatcher(std::function<void(const char* signal)> on_signal);
  ~SignalWatcher();
  SignalWatcher(const SignalWatcher&) = delete;
  SignalWatcher& operator=(const SignalWatcher&) = delete;

 private:
  void Loop();

  std::function<void(const char*)> on_signal_;
  std::atomic<bool> quit_{false};
  std::thread thread_;
};

}  // namespace trainscope
