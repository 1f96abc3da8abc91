// trainscope-sidecar: flags -> SidecarOptions -> Sidecar -> wait for a signal -> exit code.
// The process-wide settings live here, not in the library: malloc arenas, abseil's mutex mode,
// and which thread takes SIGINT/SIGTERM.
#include <malloc.h>
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "CLI/CLI.hpp"
#include "absl/synchronization/mutex.h"
#include "flags.h"
#include "spdlog/spdlog.h"
#include "trainscope/common/tls_flags.h"
#include "trainscope/sidecar/sidecar.h"

namespace {

// Blocks SIGINT and SIGTERM in every thread started from here on; WaitForStopSignal takes them.
sigset_t BlockStopSignals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  return signals;
}

// Privilege separation (capture_helper.h): with stack snapshots, fork the helper that keeps
// CAP_SYS_PTRACE, CAP_DAC_READ_SEARCH and CAP_KILL, before any thread; then this process, which
// talks to the network, drops every capability.
absl::Status SeparatePrivileges(trainscope::sidecar::SidecarOptions& o) {
  using trainscope::sidecar::CaptureHelper;
  if (o.stack_snapshots) {
    trainscope::sidecar::CaptureHelperOptions h;
    h.capture.stacks = true;
    auto helper = CaptureHelper::Start(h);
    if (!helper.ok()) return helper.status();
    o.capture_helper = std::move(*helper);
  }
  return trainscope::sidecar::KeepOnlyCapabilities(0);
}

int Run(trainscope::sidecar::SidecarOptions& o, const sigset_t& signals) {
  // The cluster key is read while this process may still read a root-only file.
  if (absl::Status st = trainscope::sidecar::ReadExchangeKeys(o); !st.ok()) {
    std::cerr << "trainscope-sidecar: " << st.message() << "\n";
    return 2;
  }
  if (absl::Status st = SeparatePrivileges(o); !st.ok()) {
    std::cerr << "trainscope-sidecar: cannot drop privileges: " << st.message() << "\n";
    return 1;
  }
  auto sidecar = trainscope::sidecar::Sidecar::Create(o);
  if (!sidecar.ok()) {
    std::cerr << "trainscope-sidecar: " << sidecar.status().message() << "\n";
    return sidecar.status().code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
  }
  (*sidecar)->Start();
  int sig = 0;
  sigwait(&signals, &sig);
  (*sidecar)->Stop();
  sidecar->reset();
  o.capture_helper.reset();
  // Everything is stopped and its ports closed. Returning would run the libraries' static
  // teardown, which takes gRPC a further 2 s here: a sidecar must stop within a second of
  // SIGTERM, so flush and leave.
  trainscope::RemoveStagedTlsFiles();
  spdlog::shutdown();
  std::fflush(nullptr);
  std::_Exit(0);
}

// --check_config: 0 and what would be watched, or 2 and the error.
int PrintCheckedConfig(trainscope::sidecar::SidecarOptions& o) {
  if (absl::Status st = trainscope::sidecar::ReadExchangeKeys(o); !st.ok()) {
    std::cerr << "trainscope-sidecar: " << st.message() << "\n";
    return 2;
  }
  auto summary = trainscope::sidecar::CheckConfig(o);
  if (!summary.ok()) {
    std::cerr << "trainscope-sidecar: " << summary.status().message() << "\n";
    return 2;
  }
  std::cout << *summary << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // glibc gives each thread that allocates its own arena (up to 8 per core); with gRPC's and
  // the HTTP handlers' threads that is several MiB of mostly idle heap. Two arenas suffice.
  mallopt(M_ARENA_MAX, 2);
  // gRPC's mutexes are absl::Mutex; Debian's abseil keeps its deadlock detection on (a graph of
  // every lock order, updated on each lock): ~10% of the sidecar's CPU while polling.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  const sigset_t signals = BlockStopSignals();
  trainscope::sidecar::SidecarOptions o;
  CLI::App app{
      "trainscope-sidecar: watches the training tasks of this node, says which are "
      "dead, hung, blocked or slow and why, and exports it over HTTP and gRPC."};
  app.set_version_flag("--version", "trainscope-sidecar " TRAINSCOPE_VERSION);
  trainscope::sidecar::AddSidecarFlags(app, o);
  bool check_config = false;
  app.add_flag("--check_config", check_config,
               "Check the cluster spec and flags and exit: 0 and what would be watched when they "
               "are valid, 2 and the error when not");
  CLI11_PARSE(app, argc, argv);
  return check_config ? PrintCheckedConfig(o) : Run(o, signals);
}
