// The capture helper (capture_helper.h): the fork, the helper's loop (one child per request,
// killed at the deadline), its identity check, and the network process's end of the socket.
#include "trainscope/sidecar/capture_helper.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <functional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "helper_wire.h"
#include "spdlog/spdlog.h"
#include "trainscope/common/proc.h"

namespace trainscope::sidecar {
namespace {

constexpr int kCapKill = 5;
constexpr int kCapDacReadSearch = 2;
constexpr int kCapSysPtrace = 19;
constexpr uint64_t kLookupCaps =
    (uint64_t{1} << kCapDacReadSearch) | (uint64_t{1} << kCapSysPtrace);
constexpr uint64_t kCaptureCaps = kLookupCaps | (uint64_t{1} << kCapKill);

std::string What(const wire::Request& q) {
  switch (q.kind) {
    case wire::Kind::kCapture:
      return absl::StrCat("capture of pid ", q.target.pid);
    case wire::Kind::kFindTask:
      return absl::StrCat("look-up of the task with pid ", q.target.pid, " on ", q.target.host, ":",
                          q.target.port);
    case wire::Kind::kFindPort:
      return absl::StrCat("look-up of the process on ", q.target.host, ":", q.target.port);
    case wire::Kind::kReadLog:
      return absl::StrCat("read of pid ", q.target.pid, "'s log");
    case wire::Kind::kReadEnviron:
      return absl::StrCat("read of pid ", q.target.pid, "'s environment");
  }
  return "request";
}

// The answer to `q`, computed in this process (the helper's child for the request).
std::string Answer(const wire::Request& q, const CaptureHelperOptions& o, pid_t helper,
                   pid_t sidecar) {
  const CaptureTarget& t = q.target;
  if (q.kind == wire::Kind::kFindTask) {
    absl::StatusOr<ProcessIdentity> id = FindTaskProcess(t.pid, t.host, t.port);
    return id.ok() ? wire::EncodeIdentity(*id) : wire::EncodeError(id.status());
  }
  if (q.kind == wire::Kind::kFindPort) {
    absl::StatusOr<ProcessIdentity> id = FindListeningProcess(t.host, t.port);
    return id.ok() ? wire::EncodeIdentity(*id) : wire::EncodeError(id.status());
  }
  if (absl::Status st = CheckCaptureTarget(t, helper, sidecar); !st.ok()) {
    return wire::EncodeError(st);
  }
  if (q.kind == wire::Kind::kReadLog || q.kind == wire::Kind::kReadEnviron) {
    // Bytes copied, none parsed: the network process reads them.
    std::string reply;
    if (q.kind == wire::Kind::kReadLog) {
      absl::StatusOr<LogChunk> chunk = ReadProcessLog(t.pid, q.offset, kMaxLogChunk);
      reply = chunk.ok() ? wire::EncodeLogChunk(*chunk) : wire::EncodeError(chunk.status());
    } else {
      absl::StatusOr<std::string> env = ReadProcessEnviron(t.pid);
      reply = env.ok() ? wire::EncodeBytes(*env) : wire::EncodeError(env.status());
    }
    std::optional<ProcStat> after = ReadProcStat(t.pid);
    if (!after || after->start_ticks != t.start_ticks) {
      return wire::EncodeError(absl::FailedPreconditionError(
          absl::StrCat("pid ", t.pid, " exited during the read: dropped")));
    }
    return reply;
  }
  absl::StatusOr<forensics::ProcessSnapshot> s = forensics::Capture(t.pid, o.capture);
  if (!s.ok()) return wire::EncodeError(s.status());
  std::optional<ProcStat> after = ReadProcStat(t.pid);
  if (!after || after->start_ticks != t.start_ticks) {
    return wire::EncodeError(absl::FailedPreconditionError(
        absl::StrCat("pid ", t.pid, " exited during the capture: dropped")));
  }
  return wire::EncodeSnapshot(*s);
}

// Runs `q` in a child of the helper, which dies with the helper, and kills it at the deadline.
// A capture's tracer is that child: its death (killed here, or with the helper) detaches every
// thread it held, and PTRACE_SEIZE sent no SIGSTOP, so no task is left stopped.
std::string RunInChild(const wire::Request& q, const CaptureHelperOptions& o, pid_t sidecar) {
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
    return wire::EncodeError(absl::InternalError(absl::StrCat("socketpair: ", strerror(errno))));
  }
  const pid_t helper = getpid();
  const pid_t child = fork();
  if (child == 0) {
    close(fds[0]);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != helper) _exit(0);
    wire::WriteFrame(fds[1], Answer(q, o, helper, sidecar));
    _exit(0);
  }
  close(fds[1]);
  if (child < 0) {
    close(fds[0]);
    return wire::EncodeError(absl::InternalError(absl::StrCat("fork: ", strerror(errno))));
  }
  absl::StatusOr<std::string> reply =
      wire::ReadFrame(fds[0], static_cast<int>(o.deadline_s * 1000));
  close(fds[0]);
  if (!reply.ok()) kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  if (reply.ok()) return *reply;
  if (absl::IsDeadlineExceeded(reply.status())) {
    return wire::EncodeError(absl::DeadlineExceededError(
        absl::StrFormat("the %s took longer than %.1f s: stopped, and every thread it held let go",
                        What(q), o.deadline_s)));
  }
  return wire::EncodeError(absl::InternalError(
      absl::StrCat("the ", What(q), " failed in the capture helper: its worker died (",
                   reply.status().message(), ")")));
}

// `captures`: the capture helper; else the look-up helper, which refuses captures.
[[noreturn]] void HelperMain(int fd, const CaptureHelperOptions& o, pid_t sidecar, bool captures) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != sidecar) _exit(0);
  prctl(PR_SET_DUMPABLE, 0);  // The network process may not ptrace or read the helper.
  signal(SIGPIPE, SIG_IGN);
  if (absl::Status st = KeepOnlyCapabilities(captures ? kCaptureCaps : kLookupCaps); !st.ok()) {
    spdlog::warn("trainscope-sidecar: capture helper: {}", std::string(st.message()));
  }
  while (true) {
    absl::StatusOr<std::string> frame = wire::ReadFrame(fd, -1);
    if (!frame.ok()) _exit(0);  // The sidecar closed its end, or is gone.
    absl::StatusOr<wire::Request> q = wire::DecodeRequest(*frame);
    std::string reply;
    if (!q.ok()) {
      reply = wire::EncodeError(q.status());
    } else if ((q->kind == wire::Kind::kCapture) != captures) {
      reply = wire::EncodeError(absl::InvalidArgumentError(
          absl::StrCat("the ", captures ? "capture" : "look-up", " helper does no ", What(*q))));
    } else {
      reply = RunInChild(*q, o, sidecar);
    }
    if (!wire::WriteFrame(fd, reply)) _exit(0);
  }
}

}  // namespace

absl::Status CheckCaptureTarget(const CaptureTarget& t, pid_t self, pid_t parent) {
  if (t.pid <= 0 || t.pid > INT32_MAX) {
    return absl::InvalidArgumentError(absl::StrCat("not a process id: ", t.pid));
  }
  if (t.pid == 1) return absl::InvalidArgumentError("pid 1 (init) is never captured");
  if (t.pid == self) return absl::InvalidArgumentError("the capture helper never captures itself");
  if (t.pid == parent) return absl::InvalidArgumentError("the sidecar itself is never captured");
  if (t.start_ticks == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("no start time given for pid ", t.pid, ": not captured"));
  }
  std::optional<ProcStat> st = ReadProcStat(t.pid);
  if (!st || st->state == 'Z' || st->state == 'X') {
    return absl::FailedPreconditionError(absl::StrCat("pid ", t.pid, " has exited"));
  }
  if (st->start_ticks != t.start_ticks) {
    return absl::FailedPreconditionError(
        absl::StrFormat("pid %d started at tick %d, not %d: another process has that pid now",
                        t.pid, st->start_ticks, t.start_ticks));
  }
  absl::StatusOr<ProcessIdentity> owner = FindListeningProcess(t.host, t.port);
  if (!owner.ok()) {
    return absl::FailedPreconditionError(absl::StrCat("pid ", t.pid, " does not hold ", t.host, ":",
                                                      t.port, ": ", owner.status().message()));
  }
  if (owner->pid != t.pid) {
    return absl::FailedPreconditionError(absl::StrCat("pid ", t.pid, " does not hold ", t.host, ":",
                                                      t.port, " (", owner->Describe(),
                                                      " does): not captured"));
  }
  return absl::OkStatus();
}

namespace {

// Forks one helper; its pid and this process's end of its socket. The child closes `other`
// (this process's end of the other helper's socket).
absl::Status Fork(const CaptureHelperOptions& options, bool captures, int other, pid_t* pid,
                  int* fd) {
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
    return absl::InternalError(absl::StrCat("capture helper: socketpair: ", strerror(errno)));
  }
  const pid_t sidecar = getpid();
  *pid = fork();
  if (*pid == 0) {
    close(fds[0]);
    if (other >= 0) close(other);
    HelperMain(fds[1], options, sidecar, captures);
  }
  close(fds[1]);
  if (*pid < 0) {
    close(fds[0]);
    return absl::InternalError(absl::StrCat("capture helper: fork: ", strerror(errno)));
  }
  *fd = fds[0];
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<CaptureHelper>> CaptureHelper::Start(CaptureHelperOptions options) {
  std::unique_ptr<CaptureHelper> h(new CaptureHelper(options.deadline_s));
  int capture_fd = -1;
  {
    std::lock_guard lock(h->capture_.mu);
    absl::Status st = Fork(options, true, -1, &h->capture_.pid, &h->capture_.fd);
    if (!st.ok()) return st;
    capture_fd = h->capture_.fd;
  }
  std::lock_guard lock(h->lookup_.mu);
  absl::Status st = Fork(options, false, capture_fd, &h->lookup_.pid, &h->lookup_.fd);
  if (!st.ok()) return st;
  return h;
}

void CaptureHelper::Close(Channel& c) {
  {
    std::lock_guard lock(c.mu);
    if (c.fd >= 0) close(c.fd);
    c.fd = -1;
  }
  if (c.pid <= 0) return;
  // A helper exits when its socket closes; one that does not within a second is killed.
  for (int i = 0; i < 100; ++i) {
    if (waitpid(c.pid, nullptr, WNOHANG) != 0) return;
    usleep(10'000);
  }
  kill(c.pid, SIGKILL);
  waitpid(c.pid, nullptr, 0);
}

CaptureHelper::~CaptureHelper() {
  Close(capture_);
  Close(lookup_);
}

absl::StatusOr<std::string> CaptureHelper::Ask(Channel& c, const std::string& request) {
  std::lock_guard lock(c.mu);
  if (!c.dead.empty()) return absl::UnavailableError(c.dead);
  absl::StatusOr<std::string> reply = absl::UnavailableError("cannot write to it");
  if (wire::WriteFrame(c.fd, request)) {
    reply = wire::ReadFrame(c.fd, static_cast<int>((deadline_s_ + 5) * 1000));
  }
  if (reply.ok()) return reply;
  // A helper answers within its own deadline; silence or EOF means it is gone or wedged.
  kill(c.pid, SIGKILL);
  int status = 0;
  const pid_t r = waitpid(c.pid, &status, 0);
  std::string how = std::string(reply.status().message());
  if (r == c.pid && WIFSIGNALED(status)) how = absl::StrCat("killed by signal ", WTERMSIG(status));
  if (r == c.pid && WIFEXITED(status)) how = absl::StrCat("exited with ", WEXITSTATUS(status));
  const bool captures = &c == &capture_;
  c.dead =
      absl::StrCat(captures ? "stack captures" : "process look-ups", " are unavailable: the ",
                   captures ? "capture" : "look-up", " helper (pid ", c.pid, ") is gone (", how,
                   "); it cannot be started again, since this process dropped the "
                   "capabilities it needs: restart the sidecar");
  spdlog::error("trainscope-sidecar: {}", c.dead);
  return absl::UnavailableError(c.dead);
}

absl::StatusOr<forensics::ProcessSnapshot> CaptureHelper::Capture(const CaptureTarget& target) {
  absl::StatusOr<std::string> reply =
      Ask(capture_, wire::EncodeRequest({wire::Kind::kCapture, target}));
  if (!reply.ok()) return reply.status();
  return wire::DecodeSnapshot(*reply);
}

absl::StatusOr<ProcessIdentity> CaptureHelper::FindTask(int64_t reported_pid,
                                                        const std::string& host, int port) {
  absl::StatusOr<std::string> reply =
      Ask(lookup_, wire::EncodeRequest({wire::Kind::kFindTask, {reported_pid, 0, host, port}}));
  if (!reply.ok()) return reply.status();
  return wire::DecodeIdentity(*reply);
}

absl::StatusOr<LogChunk> CaptureHelper::ReadLog(const CaptureTarget& target, int64_t offset) {
  wire::Request q{wire::Kind::kReadLog, target};
  q.offset = offset;
  absl::StatusOr<std::string> reply = Ask(lookup_, wire::EncodeRequest(q));
  if (!reply.ok()) return reply.status();
  return wire::DecodeLogChunk(*reply);
}

absl::StatusOr<std::string> CaptureHelper::ReadEnviron(const CaptureTarget& target) {
  absl::StatusOr<std::string> reply =
      Ask(lookup_, wire::EncodeRequest({wire::Kind::kReadEnviron, target}));
  if (!reply.ok()) return reply.status();
  return wire::DecodeBytes(*reply);
}

absl::StatusOr<ProcessIdentity> CaptureHelper::FindPort(const std::string& host, int port) {
  absl::StatusOr<std::string> reply =
      Ask(lookup_, wire::EncodeRequest({wire::Kind::kFindPort, {0, 0, host, port}}));
  if (!reply.ok()) return reply.status();
  return wire::DecodeIdentity(*reply);
}

}  // namespace trainscope::sidecar
