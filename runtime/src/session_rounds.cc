// The rounds of CreateSession; see session_rounds.h.
#include "session_rounds.h"

#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "internal.h"
#include "spdlog/spdlog.h"
#include "trainscope/common/backoff.h"
#include "trainscope/common/rpc_error.h"
#include "trainscope/runtime/version.h"

namespace trainscope {

SessionRounds::SessionRounds(const RuntimeOptions& options, TaskRef self,
                             const ClusterSpec& cluster, v1::TaskIdentity identity,
                             std::vector<Peer> peers, Round round, Clock clock, TaskStatus* status,
                             std::function<bool()> stopping)
    : options_(options),
      self_(std::move(self)),
      cluster_(cluster),
      identity_(std::move(identity)),
      peers_(std::move(peers)),
      round_(std::move(round)),
      clock_(std::move(clock)),
      status_(status),
      stopping_(std::move(stopping)) {}

std::vector<TaskRef> SessionRounds::PendingTasks() const {
  std::vector<TaskRef> refs;
  for (int i : pending_) refs.push_back(peers_[i].task);
  return refs;
}

absl::Status SessionRounds::Run() {
  const std::string me = self_.ShortName();
  if (peers_.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat(me, " cannot create a session: the cluster spec lists no ps tasks"));
  }
  pending_.clear();
  for (size_t i = 0; i < peers_.size(); ++i) pending_.push_back(static_cast<int>(i));
  status_->SetPhase(Phase::kCreatingSession);
  status_->StartWaiting("CreateSession", PendingTasks());
  start_ = clock_.now();
  double next_log = start_ + options_.session_log_interval_s;
  // Jittered, so that the workers of a cluster that started together do not retry together.
  Backoff backoff({.initial_s = 0.1, .max_s = 1, .multiplier = 1.5, .jitter = 0.2});
  const int deadline_ms = std::clamp(options_.rpc_deadline_ms, 200, 2000);
  while (true) {
    if (stopping_()) return absl::CancelledError(absl::StrCat(me, " stopped by a signal"));
    if (absl::Status st = TakeAnswers(round_(pending_, deadline_ms), deadline_ms); !st.ok()) {
      return st;
    }
    status_->UpdateWaiting(PendingTasks());
    if (pending_.empty()) break;
    const double now = clock_.now();
    if (options_.session_timeout_s > 0 && now - start_ >= options_.session_timeout_s) {
      return GiveUp();
    }
    if (now >= next_log) {
      LogWaiting(now - start_);
      next_log = now + options_.session_log_interval_s;
    }
    clock_.sleep(backoff.NextDelayMs());
  }
  status_->StopWaiting();
  spdlog::info("CreateSession: {} reached all {} ps tasks in {:.1f} s", me, peers_.size(),
               clock_.now() - start_);
  return absl::OkStatus();
}

absl::Status SessionRounds::TakeAnswers(const std::vector<HandshakeAnswer>& answers,
                                        int deadline_ms) {
  std::vector<int> still_pending;
  for (size_t k = 0; k < pending_.size(); ++k) {
    const Peer& peer = peers_[pending_[k]];
    const HandshakeAnswer* answer = k < answers.size() ? &answers[k] : nullptr;
    if (answer == nullptr || answer->code != 0) {
      const RpcErrorSummary e = answer == nullptr
                                    ? ClassifyRpcError(4, "no answer", deadline_ms)
                                    : ClassifyRpcError(answer->code, answer->message, deadline_ms);
      peer.health->RecordFailure(e.words, IsNetworkFailure(e.kind));
      still_pending.push_back(pending_[k]);
      continue;
    }
    const v1::TaskIdentity& theirs = answer->response.identity();
    if (absl::Status st = Check(peer, theirs); !st.ok()) return st;
    peer.health->SetIdentity(theirs.incarnation(), theirs.listen_address());
    peer.health->RecordSuccess();
    spdlog::info("CreateSession: reached {} at {} after {:.1f} s", peer.task.FullName(),
                 peer.address, clock_.now() - start_);
  }
  pending_ = std::move(still_pending);
  return absl::OkStatus();
}

absl::Status SessionRounds::Check(const Peer& peer, const v1::TaskIdentity& theirs) const {
  const std::string me = self_.ShortName();
  const std::string them = absl::StrCat(peer.task.ShortName(), " at ", peer.address);
  const TaskRef their_ref = TaskIdFromProto(theirs.task());
  if (their_ref != peer.task) {
    return absl::FailedPreconditionError(
        absl::StrCat("CreateSession failed: ", me, " expected ", peer.task.ShortName(), " at ",
                     peer.address, " but found ", their_ref.ShortName(),
                     " there: the cluster specs list different addresses for the same task"));
  }
  if (theirs.protocol_version() != identity_.protocol_version() ||
      theirs.runtime_version() != kRuntimeVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        "CreateSession failed: version mismatch: ", me, " runs runtime ", kRuntimeVersion,
        " with protocol version ", identity_.protocol_version(), " but ", them, " runs runtime ",
        theirs.runtime_version(), " with protocol version ", theirs.protocol_version(),
        "; run the same trainscope build on every task"));
  }
  if (theirs.cluster_fingerprint() != cluster_.Fingerprint()) {
    return ClusterSpecsDiffer(peer, theirs);
  }
  if (theirs.cluster_name() != options_.cluster_name) {
    return absl::FailedPreconditionError(
        absl::StrCat("CreateSession failed: ", me, " belongs to cluster '", options_.cluster_name,
                     "' but ", them, " belongs to cluster '", theirs.cluster_name(),
                     "': two training runs share these addresses"));
  }
  return absl::OkStatus();
}

absl::Status SessionRounds::ClusterSpecsDiffer(const Peer& peer,
                                               const v1::TaskIdentity& theirs) const {
  const std::string me = self_.ShortName();
  std::map<std::string, std::vector<std::string>> jobs;
  for (const v1::JobSpec& job : theirs.cluster()) {
    jobs[job.name()].assign(job.addresses().begin(), job.addresses().end());
  }
  auto their_spec = ClusterSpec::FromJobs(std::move(jobs));
  const std::string how =
      their_spec.ok() ? DescribeSpecDifference(cluster_, me, *their_spec, peer.task.ShortName())
                      : std::string(their_spec.status().message());
  return absl::FailedPreconditionError(
      absl::StrCat("CreateSession failed: the cluster specs differ between ", me, " and ",
                   peer.task.ShortName(), " at ", peer.address, " (fingerprints ",
                   cluster_.Fingerprint(), " and ", theirs.cluster_fingerprint(), "): ", how,
                   "; give every task the same TF_CONFIG \"cluster\""));
}

absl::Status SessionRounds::GiveUp() const {
  std::vector<std::string> missing;
  for (int i : pending_) {
    const Peer& peer = peers_[i];
    missing.push_back(absl::StrCat(peer.task.ShortName(), " at ", peer.address, " (",
                                   peer.health->Read().last_error, ")"));
  }
  return absl::DeadlineExceededError(absl::StrCat(
      self_.ShortName(), " gave up on CreateSession after ", options_.session_timeout_s,
      " s (--session_timeout_s); still missing ", absl::StrJoin(missing, ", "),
      ": is that task running, and listening on the address the cluster spec gives?"));
}

void SessionRounds::LogWaiting(double waited) const {
  for (int i : pending_) {
    const Peer& peer = peers_[i];
    spdlog::warn("CreateSession still waiting for {} at {} after {:.0f} s (last error: {})",
                 peer.task.FullName(), peer.address, waited, peer.health->Read().last_error);
  }
}

}  // namespace trainscope
