#pragma once
// Privilege separation of the sidecar (docs/security.md, "What runs privileged and why"): two
// small helper processes, forked before any thread, answer three questions over a socketpair
// each; the process that talks to the network then drops every capability. Their vocabulary:
//   capture   pid P, which must hold the TCP socket listening on host:port and have started at
//             start_ticks: its threads and stacks (forensics::Capture), or why not (the capture
//             helper: CAP_SYS_PTRACE, CAP_DAC_READ_SEARCH, CAP_KILL);
//   find_task the process of a task that reported pid R and listens on host:port
//             (FindTaskProcess; the look-up helper: CAP_SYS_PTRACE, CAP_DAC_READ_SEARCH);
//   find_port the process that listens on host:port (FindListeningProcess; the same);
//   read_log, read_environ  bytes of a process verified as for a capture: its log from an
//             offset, its environment (the look-up helper copies them; it parses none).
// A capture is never of PID 1, the helper or its parent; the helper checks the identity itself,
// and runs each request in a child of its own killed at a deadline (a capture holds threads
// with PTRACE_SEIZE: a killed tracer leaves no task stopped).

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "trainscope/common/process_identity.h"
#include "trainscope/forensics/capture.h"

namespace trainscope::sidecar {

// Which process to capture, as the network process verified it; the helper checks it again.
struct CaptureTarget {
  int64_t pid = 0;
  uint64_t start_ticks = 0;  // /proc/PID/stat field 22; 0 refuses the capture.
  std::string host;          // The listening socket it must hold ("" = any address).
  int port = 0;
};

struct CaptureHelperOptions {
  double deadline_s = 10;  // Per request; past it the request's child is killed.
  forensics::CaptureOptions capture;
};

// The network process's end of the helpers: two processes, one for captures and one for the
// look-ups, so that the poll loop's look-up never waits behind a capture. Thread-safe (the
// requests to one helper are serialized). A helper cannot be started again once this process
// has dropped its capabilities: when one has died, its requests fail with Unavailable and say so.
class CaptureHelper {
 public:
  // Forks the helpers. Call before any thread is started (fork copies only the caller's thread).
  // The capture helper keeps only CAP_SYS_PTRACE, CAP_DAC_READ_SEARCH and CAP_KILL of what this
  // process has, the look-up helper only the first two (it never ptraces: it reads tasks' fds);
  // both die with this process (PR_SET_PDEATHSIG).
  static absl::StatusOr<std::unique_ptr<CaptureHelper>> Start(CaptureHelperOptions options);
  ~CaptureHelper();  // Closes the sockets (the helpers exit) and reaps them.

  absl::StatusOr<forensics::ProcessSnapshot> Capture(const CaptureTarget& target);
  absl::StatusOr<ProcessIdentity> FindTask(int64_t reported_pid, const std::string& host, int port);
  absl::StatusOr<ProcessIdentity> FindPort(const std::string& host, int port);
  // The log (from `offset`) and the environment of the verified process `target`: bytes the
  // look-up helper copies, unparsed (ReadProcessLog, ReadProcessEnviron).
  absl::StatusOr<LogChunk> ReadLog(const CaptureTarget& target, int64_t offset);
  absl::StatusOr<std::string> ReadEnviron(const CaptureTarget& target);

  pid_t pid() const { return capture_.pid; }        // The capture helper's.
  pid_t lookup_pid() const { return lookup_.pid; }  // The look-up helper's.

 private:
  struct Channel {
    pid_t pid = -1;
    std::mutex mu;  // Guards fd and dead.
    int fd ABSL_GUARDED_BY(mu) = -1;
    std::string dead ABSL_GUARDED_BY(mu);  // Why the helper is gone; empty while it runs.
  };
  explicit CaptureHelper(double deadline_s) : deadline_s_(deadline_s) {}
  absl::StatusOr<std::string> Ask(Channel& channel, const std::string& request);
  static void Close(Channel& channel);

  const double deadline_s_;
  Channel capture_;
  Channel lookup_;
};

// The helper's own check, before any capture: OK when `target` names a process that is not
// PID 1, not `self` nor `parent`, exists, started at target.start_ticks and holds the socket
// listening on target.host:target.port; else FailedPrecondition/InvalidArgument in words.
absl::Status CheckCaptureTarget(const CaptureTarget& target, pid_t self, pid_t parent);

// Capabilities (linux/capability.h numbers). Drops every capability but `keep` (a bit mask
// of capability numbers) from the effective, permitted and inheritable sets, clears the ambient
// set, and drops the rest of the bounding set where this process may (CAP_SETPCAP).
absl::Status KeepOnlyCapabilities(uint64_t keep);
// The CapEff line of /proc/self/status, as a mask; nullopt when unreadable.
std::optional<uint64_t> EffectiveCapabilities(pid_t pid = 0);

}  // namespace trainscope::sidecar
