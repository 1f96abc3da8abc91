// SIGTERM/SIGINT turned into a clean stop; see signals.h.
#include "signals.h"

#include <signal.h>

namespace trainscope {
namespace {

sigset_t StopSignals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGUSR1);
  return signals;
}

}  // namespace

SignalWatcher::SignalWatcher(std::function<void(const char* signal)> on_signal)
    : on_signal_(std::move(on_signal)) {
  // Signals go to one thread of ours; every thread started from here on inherits the mask.
  const sigset_t signals = StopSignals();
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  thread_ = std::thread([this] { Loop(); });
}

SignalWatcher::~SignalWatcher() {
  quit_.store(true);
  if (thread_.joinable()) thread_.join();
}

void SignalWatcher::Loop() {
  const sigset_t signals = StopSignals();
  timespec timeout{0, 200 * 1000 * 1000};
  while (!quit_.load()) {
    const int sig = sigtimedwait(&signals, nullptr, &timeout);
    if (sig == SIGTERM || sig == SIGINT) on_signal_(sig == SIGTERM ? "SIGTERM" : "SIGINT");
    if (sig == SIGUSR1) on_signal_("SIGUSR1");
  }
}

}  // namespace trainscope
