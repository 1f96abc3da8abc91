// gRPC heartbeat polling; see poller.h.
#include "trainscope/sidecar/poller.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "grpcpp/alarm.h"
#include "grpcpp/grpcpp.h"
#include "spdlog/spdlog.h"
#include "trainscope/common/grpc_channel.h"
#include "trainscope/common/phase.h"
#include "trainscope/common/proc.h"
#include "trainscope/common/process_identity.h"
#include "trainscope/common/rpc_error.h"
#include "trainscope/sidecar/hook_reports.h"
#include "trainscope/sidecar/tf_log.h"
#include "trainscope/v1/runtime.grpc.pb.h"

namespace trainscope::sidecar {
namespace {

namespace rpb = ::trainscope::v1;

constexpr size_t kMaxString = 512;
constexpr int kMaxPeers = 4096;
constexpr int kMaxInflight = 64;

std::string Bound(const std::string& s) {
  return s.size() <= kMaxString ? s : s.substr(0, kMaxString - 3) + "...";
}

PeerInfo ConvertPeer(const rpb::PeerView& p) {
  PeerInfo out;
  out.peer = {Bound(p.peer().role()), p.peer().index()};
  out.address = Bound(p.address());
  out.connected = p.connected();
  out.consecutive_failures = p.consecutive_failures();
  out.last_error = Bound(p.last_error());
  out.seconds_since_success = p.seconds_since_success();
  out.peer_incarnation = p.peer_incarnation();
  out.peer_listen_address = Bound(p.peer_listen_address());
  out.latency_seconds = std::isfinite(p.latency_seconds()) ? std::max(0.0, p.latency_seconds()) : 0;
  out.step_share = std::isfinite(p.step_share()) ? std::clamp(p.step_share(), 0.0, 1.0) : 0;
  out.network_failure = p.network_failure();
  out.seconds_failing = std::isfinite(p.seconds_failing()) ? std::max(0.0, p.seconds_failing()) : 0;
  return out;
}

HeartbeatInfo Convert(const rpb::HeartbeatResponse& r) {
  HeartbeatInfo hb;
  const rpb::TaskIdentity& id = r.identity();
  hb.cluster_name = Bound(id.cluster_name());
  hb.task = {Bound(id.task().role()), id.task().index()};
  hb.incarnation = id.incarnation();
  hb.pid = id.pid();
  hb.hostname = Bound(id.hostname());
  hb.listen_address = Bound(id.listen_address());
  hb.runtime_version = Bound(id.runtime_version());
  hb.phase = std::string(PhaseName(PhaseFromWire(r.phase())));
  if (r.has_waiting()) {
    hb.waiting = true;
    hb.waiting_what = Bound(r.waiting().what());
    hb.waiting_since_unix = r.waiting().since_unix_seconds();
    for (int i = 0; i < std::min(r.waiting().peers_size(), kMaxPeers); ++i) {
      hb.waiting_on.push_back(ConvertPeer(r.waiting().peers(i)));
    }
  }
  hb.steps = r.steps();
  for (int i = 0; i < std::min(r.peers_size(), kMaxPeers); ++i) {
    hb.peers.push_back(ConvertPeer(r.peers(i)));
  }
  hb.cpu_seconds = r.resources().cpu_seconds();
  hb.resident_bytes = r.resources().resident_bytes();
  hb.threads = r.resources().threads();
  hb.open_fds = r.resources().open_fds();
  hb.inflight_reported_unix = r.unix_seconds();
  for (int i = 0; i < std::min(r.inflight_size(), kMaxInflight); ++i) {
    const rpb::InflightCall& c = r.inflight(i);
    CallInFlight call;
    call.method = Bound(c.method());
    call.peer = {Bound(c.peer().role()), c.peer().index()};
    call.age_seconds = std::isfinite(c.age_seconds()) ? std::max(0.0, c.age_seconds()) : 0;
    call.trace_id = Bound(c.trace_id());
    call.tid = c.tid();
    call.served = c.served();
    hb.inflight.push_back(std::move(call));
  }
  hb.metrics_address = Bound(r.metrics_address());
  hb.last_step_seconds = r.last_step_seconds();
  hb.last_step_recovered = r.last_step_recovered();
  hb.expects_progress = r.expects_progress();
  if (r.has_serving()) {
    hb.serving = true;
    hb.served_calls = std::max<int64_t>(0, r.serving().calls());
    hb.served_seconds = r.serving().seconds();
    hb.served_queue_seconds = r.serving().queue_seconds();
    hb.served_work_seconds = r.serving().work_seconds();
  }
  if (r.ps_state().restored())
    hb.restored_step = std::max<int64_t>(0, r.ps_state().restored_step());
  return hb;
}

// Connects to `address` to tell "nothing listens" from other failures. Local addresses only:
// the answer comes at once.
bool ConnectRefused(const std::string& address) {
  auto hp = ParseHostPort(address);
  if (!hp.ok()) return false;
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(hp->host.c_str(), std::to_string(hp->port).c_str(), &hints, &res) != 0) {
    return false;
  }
  bool refused = false;
  if (res != nullptr) {
    int s = socket(res->ai_family, res->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (s >= 0) {
      int rc = connect(s, res->ai_addr, res->ai_addrlen);
      if (rc != 0 && errno == ECONNREFUSED) {
        refused = true;
      } else if (rc != 0 && errno == EINPROGRESS) {
        pollfd p{s, POLLOUT, 0};
        if (poll(&p, 1, 50) == 1) {
          int err = 0;
          socklen_t len = sizeof(err);
          getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &len);
          refused = err == ECONNREFUSED;
        }
      }
      close(s);
    }
  }
  freeaddrinfo(res);
  return refused;
}

// A parsed answer (gRPC parsed it, or DecodeHeartbeatAnswer did) into a PollResult.
PollResult DecodeAnswer(const rpb::HeartbeatResponse& response, double sent_s, double received_s) {
  PollResult r;
  r.sent_s = sent_s;
  r.received_s = received_s;
  if (!response.has_identity()) {
    r.failure = FailureKind::kBadAnswer;
    r.error = "heartbeat answer without identity";
    return r;
  }
  r.ok = true;
  r.heartbeat = Convert(response);
  return r;
}

// The process holding a watched task's socket (its address and port, in whichever network
// namespace: a pod's own), cached: the /proc scan runs only when the cached process is gone, a
// zombie (killed, not yet reaped) or its pid was reused, and after a failed scan at most once a
// second.
struct PortOwnerCache {
  int64_t pid = 0;
  int64_t ns_pid = 0;  // In its own PID namespace.
  double start_time_unix = 0;
  std::string command;
  double next_scan_s = 0;

  // The owner's /proc reading now, or nullopt when none is seen.
  std::optional<ProcStat> Read(const std::string& address, double now_s,
                               const ProcessFinder& finder) {
    if (pid > 0) {
      std::optional<ProcStat> st = ReadProcStat(pid);
      // A zombie holds no port: whoever answers now is another process.
      const bool exited = st && (st->state == 'Z' || st->state == 'X');
      if (st && !exited && st->start_time_unix == start_time_unix) return st;
      pid = 0;
    }
    if (now_s < next_scan_s) return std::nullopt;
    // In whichever network namespace holds it: a pod's own, or this node's.
    auto hp = ParseHostPort(address);
    absl::StatusOr<ProcessIdentity> owner = !hp.ok() ? absl::NotFoundError("no address")
                                            : finder.find_listening
                                                ? finder.find_listening(hp->host, hp->port)
                                                : FindListeningProcess(hp->host, hp->port);
    std::optional<ProcStat> st = owner.ok() ? ReadProcStat(owner->pid) : std::nullopt;
    if (!st || st->start_ticks != owner->start_ticks) {
      next_scan_s = now_s + 1;
      return std::nullopt;
    }
    pid = owner->pid;
    ns_pid = owner->ns_pid;
    start_time_unix = st->start_time_unix;
    command = owner->command;
    return st;
  }
};

// A local task's process, verified by its listening socket and its namespaced pid (FindTaskProcess)
// when it first answers or its incarnation changes, and held while it keeps its start time. A
// failed check is tried again at most once a second.
struct IdentityCache {
  std::optional<ProcessIdentity> id;
  uint64_t incarnation = 0;
  int64_t reported = 0;
  std::string error;
  double next_try_s = 0;

  // Puts the verified process into `hb` (pid, ns_pid, start time), or pid 0 and why not.
  void Apply(HeartbeatInfo& hb, const std::string& target_address, double now_s,
             const ProcessFinder& finder) {
    const bool same_task = incarnation == hb.incarnation && reported == hb.pid;
    if (id && same_task && !StillSameProcess(*id)) {
      spdlog::info(
          "trainscope-sidecar: the task at {} answers, but its process {} is no longer "
          "the one verified: checking again",
          target_address, id->Describe());
    }
    if (!same_task || (id && !StillSameProcess(*id))) {
      id.reset();
      next_try_s = 0;
    }
    if (!id && now_s >= next_try_s) Verify(hb, target_address, now_s, finder);
    incarnation = hb.incarnation;
    reported = hb.pid;
    hb.ns_pid = hb.pid;
    if (id) {
      hb.pid = id->pid;
      hb.pid_verified = true;
      hb.pid_start_ticks = id->start_ticks;
    } else {
      hb.pid = 0;
      hb.identity_error = error;
    }
  }

  void Verify(const HeartbeatInfo& hb, const std::string& target_address, double now_s,
              const ProcessFinder& finder) {
    // The spec's host and port: where the task is reached (it may listen on every address).
    // Never the port the heartbeat names: a task could name another process's port, and have
    // that process read and captured as itself.
    auto target = ParseHostPort(target_address);
    const int port = target.ok() ? target->port : 0;
    const std::string host = target.ok() ? target->host : "";
    absl::StatusOr<ProcessIdentity> found = finder.find_task ? finder.find_task(hb.pid, host, port)
                                                             : FindTaskProcess(hb.pid, host, port);
    if (found.ok()) {
      id = *found;
      error.clear();
      return;
    }
    if (error != found.status().message()) {
      spdlog::info(
          "trainscope-sidecar: the task at {} (pid {} in its namespace) is not read in "
          "/proc: {}",
          target_address, hb.pid, std::string(found.status().message()));
    }
    error = std::string(found.status().message());
    next_try_s = now_s + 1;
  }
};

// An answer from a task that speaks gRPC but not trainscope's Heartbeat: its round trip, and
// for a local one the /proc facts of the process holding its port.
PollResult OutsideAnswer(const std::string& address, bool local, PortOwnerCache& owner,
                         TfLogFollower& log, const ProcessFinder& finder, double sent_s,
                         double received_s) {
  PollResult r;
  r.sent_s = sent_s;
  r.received_s = received_s;
  r.ok = true;
  HeartbeatInfo& hb = r.heartbeat;
  hb.outside = true;
  hb.listen_address = address;
  hb.inflight_reported_unix = UnixSeconds();
  if (!local) return r;
  std::optional<ProcStat> st = owner.Read(address, received_s, finder);
  if (!st) return r;
  hb.pid = owner.pid;
  hb.ns_pid = owner.ns_pid;
  hb.pid_verified = true;  // It holds the port: found by its socket.
  hb.pid_start_ticks = st->start_ticks;
  hb.command = owner.command;
  hb.proc_state = st->state;
  // The same process keeps its incarnation; a restart (new pid or start time) changes it.
  hb.incarnation =
      (static_cast<uint64_t>(owner.pid) << 32) ^ static_cast<uint64_t>(st->start_time_unix * 100);
  hb.cpu_seconds = st->cpu_seconds;
  hb.resident_bytes = st->resident_bytes;
  hb.threads = st->threads;
  hb.open_fds = std::max(0, CountOpenFds(owner.pid));
  // TensorFlow's own words: whom it waits on in CreateSession (tf_log.h).
  auto hp = ParseHostPort(address);
  log.Follow({owner.pid, st->start_ticks, hp.ok() ? hp->host : "", hp.ok() ? hp->port : 0},
             hb.inflight_reported_unix, &hb);
  return r;
}

// What a hooked program reported of itself (hook_reports.h), into an answer made from outside:
// only when the reporting pid is the verified holder of the task's port.
void MergeHookReport(const HookReports* hooks, const TaskRef& task, double now_s,
                     HeartbeatInfo* hb) {
  if (hooks == nullptr || !hb->pid_verified) return;
  std::optional<HookReports::Latest> latest = hooks->Find(task, hb->pid, hb->ns_pid);
  if (!latest) return;
  const HeartbeatInfo h = Convert(latest->report);
  hb->outside = false;
  hb->hooked = true;
  hb->task = task;
  hb->phase = h.phase;
  hb->steps = h.steps;
  hb->last_step_seconds = h.last_step_seconds;
  hb->expects_progress = h.expects_progress;
  hb->peers = h.peers;
  hb->metrics_address = h.metrics_address;
  if (h.waiting) {
    hb->waiting = true;
    hb->waiting_what = h.waiting_what;
    hb->waiting_since_unix = h.waiting_since_unix;
    hb->waiting_on = h.waiting_on;
  }
  if (!h.inflight.empty()) hb->inflight = h.inflight;
  const double age = now_s - latest->received_s;
  hb->hook_silent_s = age > HookReports::kStaleS ? age : 0;
}

// Whether `code` is the server's own answer (it spoke gRPC over HTTP/2), rather than a failure
// to reach it or a deadline that passed on the way.
bool FromTheServer(grpc::StatusCode code) {
  return code != grpc::StatusCode::UNAVAILABLE && code != grpc::StatusCode::DEADLINE_EXCEEDED &&
         code != grpc::StatusCode::CANCELLED && code != grpc::StatusCode::UNKNOWN &&
         code != grpc::StatusCode::INTERNAL && code != grpc::StatusCode::RESOURCE_EXHAUSTED;
}

}  // namespace

PollResult DecodeHeartbeatAnswer(absl::string_view serialized, double sent_s, double received_s) {
  rpb::HeartbeatResponse response;
  // Protobuf takes an int size; gRPC's 1 MiB receive limit keeps real answers far below it.
  const bool fits = serialized.size() <= static_cast<size_t>(std::numeric_limits<int>::max());
  if (!fits || !response.ParseFromArray(serialized.data(), static_cast<int>(serialized.size()))) {
    PollResult r;
    r.sent_s = sent_s;
    r.received_s = received_s;
    r.failure = FailureKind::kBadAnswer;
    r.error = "not a valid heartbeat: the answer does not parse";
    return r;
  }
  return DecodeAnswer(response, sent_s, received_s);
}

namespace {

// Deaths of verified local processes, known the moment they happen: a pidfd per process (it
// never names another process, and turns readable when its process exits), watched by one thread
// that wakes the poll loop's completion queue with an alarm. Without pidfd_open (kernels before
// 5.3) nothing is watched and deaths are found by the 100 ms poll, as before.
class DeathWatch {
 public:
  DeathWatch(size_t slots, grpc::CompletionQueue* cq, void* tag)
      : cq_(cq), tag_(tag), pidfds_(slots, -1), wake_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
    if (wake_ >= 0) thread_ = std::thread([this] { Run(); });
  }
  ~DeathWatch() { Stop(); }

  // Watches `pid` for slot `i` (replacing what it watched); false when it cannot (the process is
  // gone, or no pidfd_open). The caller checks the process is still the one it verified after.
  bool Watch(size_t i, int64_t pid) {
    const int fd = static_cast<int>(syscall(SYS_pidfd_open, static_cast<pid_t>(pid), 0));
    std::lock_guard lock(mu_);
    if (pidfds_[i] >= 0) close(pidfds_[i]);
    pidfds_[i] = fd;
    Wake();
    return fd >= 0;
  }
  void Forget(size_t i) {
    std::lock_guard lock(mu_);
    if (pidfds_[i] >= 0) close(pidfds_[i]);
    pidfds_[i] = -1;
    Wake();
  }
  // The slots whose process exited since the last call (after the alarm's tag came).
  std::vector<size_t> TakeExited() {
    std::lock_guard lock(mu_);
    alarm_pending_ = false;
    return std::exchange(exited_, {});
  }
  void Stop() {
    {
      std::lock_guard lock(mu_);
      if (stopping_) return;
      stopping_ = true;
      if (alarm_pending_) alarm_.Cancel();
      Wake();
    }
    if (thread_.joinable()) thread_.join();
    for (int fd : pidfds_) {
      if (fd >= 0) close(fd);
    }
    if (wake_ >= 0) close(wake_);
  }

 private:
  void Wake() {
    if (wake_ >= 0) {
      const uint64_t one = 1;
      (void)!write(wake_, &one, sizeof(one));
    }
  }
  void Run() {
    while (true) {
      std::vector<pollfd> fds{{wake_, POLLIN, 0}};
      std::vector<size_t> slot_of;
      {
        std::lock_guard lock(mu_);
        if (stopping_) return;
        for (size_t i = 0; i < pidfds_.size(); ++i) {
          if (pidfds_[i] < 0) continue;
          fds.push_back({pidfds_[i], POLLIN, 0});
          slot_of.push_back(i);
        }
      }
      if (poll(fds.data(), fds.size(), -1) < 0 && errno != EINTR) return;
      uint64_t drained = 0;
      (void)!read(wake_, &drained, sizeof(drained));
      std::lock_guard lock(mu_);
      for (size_t k = 1; k < fds.size(); ++k) {
        const size_t i = slot_of[k - 1];
        // Only a pidfd still watched for that slot (Watch or Forget may have replaced it).
        if ((fds[k].revents & POLLIN) == 0 || pidfds_[i] != fds[k].fd) continue;
        close(pidfds_[i]);
        pidfds_[i] = -1;
        exited_.push_back(i);
      }
      if (!exited_.empty() && !alarm_pending_ && !stopping_) {
        alarm_pending_ = true;
        alarm_.Set(cq_, gpr_now(GPR_CLOCK_MONOTONIC), tag_);
      }
    }
  }

  grpc::CompletionQueue* const cq_;
  void* const tag_;
  std::mutex mu_;
  std::vector<int> pidfds_ ABSL_GUARDED_BY(mu_);  // By slot; -1: none.
  std::vector<size_t> exited_ ABSL_GUARDED_BY(mu_);
  bool alarm_pending_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Alarm alarm_;
  const int wake_;
  std::thread thread_;
};

// The completion queue tag of DeathWatch's alarm (never a Call).
char kDeathTag;

}  // namespace

struct HeartbeatPoller::Impl {
  struct Call {
    size_t target = 0;
    grpc::ClientContext ctx;
    rpb::HeartbeatResponse response;
    grpc::Status status;
    std::unique_ptr<grpc::ClientAsyncResponseReader<rpb::HeartbeatResponse>> reader;
    double sent_s = 0;
  };
  struct Slot {
    Target target;
    std::shared_ptr<grpc::Channel> channel;
    std::unique_ptr<rpb::TaskService::Stub> stub;
    Call* in_flight = nullptr;
    PortOwnerCache owner;
    TfLogFollower log;
    IdentityCache identity;
    int64_t watched_pid = 0;  // Whose death `deaths` watches for this slot; 0: none.
    bool spoke_grpc = false;  // Some answer from a gRPC server came from this address.
  };

  std::vector<Slot> slots;
  grpc::CompletionQueue cq;
  std::unique_ptr<DeathWatch> deaths;
  int deadline_ms = 2000;
  ProcessFinder finder;
  const HookReports* hooks = nullptr;
  rpb::HeartbeatRequest request;
  bool shut_down = false;

  PollResult ToResult(Call* call, double now_s) {
    const grpc::Status& s = call->status;
    Slot& slot = slots[call->target];
    const bool outside = s.error_code() == grpc::StatusCode::UNIMPLEMENTED ||
                         (slot.target.black_box && (s.ok() || FromTheServer(s.error_code())));
    const bool server_answered = s.ok() || FromTheServer(s.error_code());
    if (server_answered) slot.spoke_grpc = true;
    if (outside) {
      PollResult r = OutsideAnswer(slot.target.address, slot.target.local, slot.owner, slot.log,
                                   finder, call->sent_s, now_s);
      if (r.ok) MergeHookReport(hooks, slot.target.task, now_s, &r.heartbeat);
      return r;
    }
    if (s.ok()) {
      PollResult r = DecodeAnswer(call->response, call->sent_s, now_s);
      if (r.ok && slot.target.local) {
        slot.identity.Apply(r.heartbeat, slot.target.address, now_s, finder);
        WatchDeath(call->target, r.heartbeat);
      }
      return r;
    }
    PollResult r = ToFailure(call, now_s);
    if (r.failure != FailureKind::kRefused && slot.target.local && !slot.spoke_grpc) {
      NameSilentListener(slot, now_s, r);
    }
    if (server_answered) NameOtherServer(slot, now_s, r);
    return r;
  }

  // Holds slot `i`'s verified process by a pidfd, so that its death is known at once.
  void WatchDeath(size_t i, const HeartbeatInfo& hb) {
    Slot& slot = slots[i];
    const int64_t pid = hb.pid_verified ? hb.pid : 0;
    if (pid == slot.watched_pid) return;
    slot.watched_pid = pid;
    if (pid == 0) {
      deaths->Forget(i);
      return;
    }
    // The pidfd names the process it was opened for: that must still be the verified one.
    if (!deaths->Watch(i, pid) || !slot.identity.id || !StillSameProcess(*slot.identity.id)) {
      deaths->Forget(i);
      slot.watched_pid = 0;
    }
  }

  // A gRPC server that answers the heartbeat with an error of its own (not UNIMPLEMENTED): not a
  // trainscope task; say how to watch it from outside.
  void NameOtherServer(Slot& slot, double now_s, PollResult& r) {
    std::optional<ProcStat> st =
        slot.target.local ? slot.owner.Read(slot.target.address, now_s, finder) : std::nullopt;
    absl::StrAppend(&r.error, "; ",
                    st ? absl::StrCat("pid ", slot.owner.pid, " (", slot.owner.command, ")")
                       : std::string("a gRPC server"),
                    " serves gRPC there but not trainscope's heartbeat: --black_box_tasks "
                    "watches it from outside");
  }

  // A local port that never answered gRPC: when a process holds it, say which, and that it does
  // not speak gRPC (a plain TCP listener, an HTTP/1 server, or a process stopped from the start).
  void NameSilentListener(Slot& slot, double now_s, PollResult& r) {
    std::optional<ProcStat> st = slot.owner.Read(slot.target.address, now_s, finder);
    if (!st) return;
    absl::StrAppend(&r.error, "; the port is held by pid ", slot.owner.pid, " (",
                    slot.owner.command, ", state ", std::string(1, st->state),
                    "), which has not answered gRPC over HTTP/2");
  }

  PollResult ToFailure(Call* call, double now_s) {
    const grpc::Status& s = call->status;
    PollResult r;
    r.sent_s = call->sent_s;
    r.received_s = now_s;
    RpcErrorSummary summary =
        ClassifyRpcError(static_cast<int>(s.error_code()), s.error_message(), deadline_ms);
    switch (summary.kind) {
      case RpcFailure::kRefused:
        r.failure = FailureKind::kRefused;
        r.error = summary.words;
        return r;
      case RpcFailure::kTimeout:
        r.failure = FailureKind::kTimeout;
        r.error = summary.words;
        return r;
      case RpcFailure::kApplication:
        r.failure = FailureKind::kBadAnswer;
        r.error = absl::StrCat("not a valid heartbeat: ", summary.words);
        return r;
      default:
        break;
    }
    if (slots[call->target].target.local && ConnectRefused(slots[call->target].target.address)) {
      r.failure = FailureKind::kRefused;
      r.error = "connection refused";
      return r;
    }
    r.failure = FailureKind::kUnavailable;
    r.error = summary.words;
    return r;
  }
};

HeartbeatPoller::HeartbeatPoller(std::vector<Target> targets, int deadline_ms, std::string watcher,
                                 std::shared_ptr<grpc::ChannelCredentials> credentials,
                                 ProcessFinder finder, const HookReports* hooks)
    : impl_(std::make_unique<Impl>()) {
  if (!credentials) credentials = grpc::InsecureChannelCredentials();
  impl_->finder = std::move(finder);
  impl_->hooks = hooks;
  impl_->deadline_ms = deadline_ms;
  impl_->request.set_watcher(watcher);
  // No keepalive: a heartbeat goes out every tick with a short deadline. A heartbeat is a few
  // KiB; anything much larger is garbage.
  const ChannelOptions options{.keepalive_time_ms = 0,
                               .min_reconnect_ms = 100,
                               .max_reconnect_ms = 1000,
                               .own_connection = true,
                               .max_receive_bytes = 1 << 20};
  for (Target& t : targets) {
    Impl::Slot slot;
    slot.target = t;
    slot.channel = MakeChannel(t.address, options, credentials);
    slot.stub = rpb::TaskService::NewStub(slot.channel);
    slot.log = TfLogFollower(impl_->finder);
    impl_->slots.push_back(std::move(slot));
  }
  impl_->deaths = std::make_unique<DeathWatch>(impl_->slots.size(), &impl_->cq, &kDeathTag);
}

HeartbeatPoller::~HeartbeatPoller() { Shutdown(); }

bool HeartbeatPoller::InFlight(size_t i) const { return impl_->slots[i].in_flight != nullptr; }

void HeartbeatPoller::Poll(size_t i, double now_s) {
  Impl::Slot& slot = impl_->slots[i];
  if (slot.in_flight != nullptr || impl_->shut_down) return;
  auto* call = new Impl::Call;
  call->target = i;
  call->sent_s = now_s;
  call->ctx.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::milliseconds(impl_->deadline_ms));
  call->reader = slot.stub->PrepareAsyncHeartbeat(&call->ctx, impl_->request, &impl_->cq);
  call->reader->StartCall();
  call->reader->Finish(&call->response, &call->status, call);
  slot.in_flight = call;
}

void HeartbeatPoller::Wait(double until_s,
                           const std::function<void(size_t, const PollResult&)>& done) {
  while (true) {
    double wait = until_s - MonotonicSeconds();
    auto deadline = std::chrono::system_clock::now() +
                    std::chrono::microseconds(static_cast<int64_t>(std::max(0.0, wait) * 1e6));
    void* tag = nullptr;
    bool ok = false;
    auto rc = impl_->cq.AsyncNext(&tag, &ok, deadline);
    if (rc != grpc::CompletionQueue::GOT_EVENT) return;
    double now = MonotonicSeconds();
    if (tag == &kDeathTag) {
      // A verified process exited: a failed poll now, which the tracker judges at once.
      for (size_t i : impl_->deaths->TakeExited()) {
        PollResult r;
        r.sent_s = now;
        r.received_s = now;
        r.error = "its process exited";
        done(i, r);
      }
      until_s = std::min(until_s, MonotonicSeconds());
      continue;
    }
    auto* call = static_cast<Impl::Call*>(tag);
    impl_->slots[call->target].in_flight = nullptr;
    PollResult r = impl_->ToResult(call, now);
    size_t target = call->target;
    delete call;
    done(target, r);
    // Return after this batch: take what is ready now, then let the caller look.
    until_s = std::min(until_s, MonotonicSeconds());
  }
}

void HeartbeatPoller::Shutdown() {
  if (impl_->shut_down) return;
  impl_->shut_down = true;
  for (auto& slot : impl_->slots) {
    if (slot.in_flight) slot.in_flight->ctx.TryCancel();
  }
  impl_->deaths->Stop();
  impl_->cq.Shutdown();
  void* tag = nullptr;
  bool ok = false;
  while (impl_->cq.Next(&tag, &ok)) {
    if (tag != &kDeathTag) delete static_cast<Impl::Call*>(tag);
  }
}

}  // namespace trainscope::sidecar
