// CreateSession: a worker or chief handshakes with every ps until all have answered, checking
// versions, cluster specs and cluster names, and logging whom it still waits for.
#include <algorithm>
#include <condition_variable>
#include <map>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "spdlog/spdlog.h"
#include "task_impl.h"
#include "trainscope/common/clock.h"
#include "trainscope/common/rpc_error.h"
#include "trainscope/runtime/version.h"
#include "trainscope/telemetry/telemetry.h"
#include "trainscope/v1/runtime.grpc.pb.h"

namespace trainscope {

absl::StatusOr<ParameterClient*> Task::Impl::CreateSession() {
  const std::string me = self_.ShortName();
  std::vector<Session::Peer> ps;
  for (int i = 0; i < cluster_.NumTasks("ps"); ++i) {
    TaskRef ref{"ps", i};
    std::string address = *cluster_.AddressOf(ref);
    ps.push_back({ref, address, MakePeerChannel(address, channel_credentials_),
                  status_.Peer(ref, address), telemetry_ ? telemetry_->rpc().PeerIndex(ref) : -1});
  }
  if (ps.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat(me, " cannot create a session: the cluster spec lists no ps tasks"));
  }

  std::vector<int> pending(ps.size());
  for (size_t i = 0; i < ps.size(); ++i) pending[i] = static_cast<int>(i);
  auto pending_refs = [&] {
    std::vector<TaskRef> refs;
    for (int i : pending) refs.push_back(ps[i].task);
    return refs;
  };
  status_.SetPhase(Phase::kCreatingSession);
  status_.StartWaiting("CreateSession", pending_refs());

  v1::HandshakeRequest request;
  *request.mutable_from() = Identity();
  const double start = MonotonicSeconds();
  double next_log = start + options_.session_log_interval_s;
  int64_t backoff_ms = 100;
  const int64_t attempt_deadline_ms = std::clamp<int64_t>(options_.rpc_deadline_ms, 200, 2000);

  while (!pending.empty()) {
    if (stopping_.load()) return absl::CancelledError(absl::StrCat(me, " stopped by a signal"));
    // One round: handshake with every pending peer at once.
    struct Attempt {
      Attempt(telemetry::Telemetry* t, int peer, int64_t deadline_ms)
          : call(t, telemetry::methods::kHandshake, peer, deadline_ms) {}
      grpc::ClientContext context;
      telemetry::ClientCall call;
      v1::HandshakeResponse response;
      grpc::Status status;
    };
    std::vector<std::unique_ptr<Attempt>> attempts;
    std::mutex round_mu;
    std::condition_variable round_cv;
    size_t finished = 0;
    for (int i : pending) {
      auto attempt = std::make_unique<Attempt>(telemetry_.get(), ps[i].index, attempt_deadline_ms);
      attempt->context.set_deadline(std::chrono::system_clock::now() +
                                    std::chrono::milliseconds(attempt_deadline_ms));
      attempt->call.AddTraceparent(&attempt->context);
      v1::TaskService::Stub stub(ps[i].channel);
      Attempt* a = attempt.get();
      stub.async()->Handshake(&a->context, &request, &a->response, [&, a](grpc::Status s) {
        a->call.End(s, request.GetCachedSize(), MessageBytes(a->response));
        std::lock_guard lock(round_mu);
        a->status = std::move(s);
        ++finished;
        round_cv.notify_all();
      });
      attempts.push_back(std::move(attempt));
    }
    {
      std::unique_lock lock(round_mu);
      round_cv.wait(lock, [&] { return finished == attempts.size(); });
    }

    std::vector<int> still_pending;
    for (size_t k = 0; k < pending.size(); ++k) {
      const Session::Peer& peer = ps[pending[k]];
      Attempt& a = *attempts[k];
      if (!a.status.ok()) {
        const RpcErrorSummary e = ClassifyRpcError(static_cast<int>(a.status.error_code()),
                                                   a.status.error_message(), attempt_deadline_ms);
        peer.health->RecordFailure(e.words, IsNetworkFailure(e.kind));
        still_pending.push_back(pending[k]);
        continue;
      }
      const v1::TaskIdentity& theirs = a.response.identity();
      const std::string them = absl::StrCat(peer.task.ShortName(), " at ", peer.address);
      const TaskRef their_ref = TaskIdFromProto(theirs.task());
      if (their_ref != peer.task) {
        return absl::FailedPreconditionError(
            absl::StrCat("CreateSession failed: ", me, " expected ", peer.task.ShortName(), " at ",
                         peer.address, " but found ", their_ref.ShortName(),
                         " there: the cluster specs list different addresses for the same task"));
      }
      if (theirs.protocol_version() != request.from().protocol_version() ||
          theirs.runtime_version() != kRuntimeVersion) {
        return absl::FailedPreconditionError(absl::StrCat(
            "CreateSession failed: version mismatch: ", me, " runs runtime ", kRuntimeVersion,
            " with protocol version ", request.from().protocol_version(), " but ", them,
            " runs runtime ", theirs.runtime_version(), " with protocol version ",
            theirs.protocol_version(), "; run the same trainscope build on every task"));
      }
      if (theirs.cluster_fingerprint() != cluster_.Fingerprint()) {
        std::map<std::string, std::vector<std::string>> jobs;
        for (const v1::JobSpec& job : theirs.cluster()) {
          jobs[job.name()].assign(job.addresses().begin(), job.addresses().end());
        }
        auto their_spec = ClusterSpec::FromJobs(std::move(jobs));
        std::string how = their_spec.ok() ? DescribeSpecDifference(cluster_, me, *their_spec,
                                                                   peer.task.ShortName())
                                          : std::string(their_spec.status().message());
        return absl::FailedPreconditionError(absl::StrCat(
            "CreateSession failed: the cluster specs differ between ", me, " and ", them,
            " (fingerprints ", cluster_.Fingerprint(), " and ", theirs.cluster_fingerprint(),
            "): ", how, "; give every task the same TF_CONFIG \"cluster\""));
      }
      if (theirs.cluster_name() != options_.cluster_name) {
        return absl::FailedPreconditionError(
            absl::StrCat("CreateSession failed: ", me, " belongs to cluster '",
                         options_.cluster_name, "' but ", them, " belongs to cluster '",
                         theirs.cluster_name(), "': two training runs share these addresses"));
      }
      peer.health->SetIdentity(theirs.incarnation(), theirs.listen_address());
      peer.health->RecordSuccess();
      spdlog::info("CreateSession: reached {} at {} after {:.1f} s", peer.task.FullName(),
                   peer.address, MonotonicSeconds() - start);
    }
    pending = std::move(still_pending);
    status_.UpdateWaiting(pending_refs());
    if (pending.empty()) break;

    const double now = MonotonicSeconds();
    const double waited = now - start;
    if (options_.session_timeout_s > 0 && waited >= options_.session_timeout_s) {
      std::vector<std::string> missing;
      for (int i : pending) {
        missing.push_back(absl::StrCat(ps[i].task.ShortName(), " at ", ps[i].address, " (",
                                       ps[i].health->Read().last_error, ")"));
      }
      return absl::DeadlineExceededError(absl::StrCat(
          me, " gave up on CreateSession after ", options_.session_timeout_s,
          " s (--session_timeout_s); still missing ", absl::StrJoin(missing, ", "),
          ": is that task running, and listening on the address the cluster spec gives?"));
    }
    if (now >= next_log) {
      for (int i : pending) {
        spdlog::warn("CreateSession still waiting for {} at {} after {:.0f} s (last error: {})",
                     ps[i].task.FullName(), ps[i].address, waited, ps[i].health->Read().last_error);
      }
      next_log = now + options_.session_log_interval_s;
    }
    SleepFor(backoff_ms);
    backoff_ms = std::min<int64_t>(backoff_ms * 3 / 2, 1000);
  }
  status_.StopWaiting();
  status_.SetPhase(Phase::kTraining);
  status_.SetExpectsProgress(true);
  spdlog::info("CreateSession: {} reached all {} ps tasks in {:.1f} s", me, ps.size(),
               MonotonicSeconds() - start);
  session_ =
      std::make_unique<Session>(std::move(ps), telemetry_.get(), &status_, Identity(), &faults_);
  client_ = std::make_unique<ParameterClient>(session_.get(), self_, options_.rpc_deadline_ms,
                                              options_.max_attempts);
  // A ps that restarted and restored a checkpoint: the run goes on from its step.
  client_->SetOnResume([this](int64_t step) {
    status_.SetSteps(step);
    metrics_->RecordRestore();
    if (saver_) saver_->ResumedAt(step);
  });
  StartCheckpointSaver();
  return client_.get();
}

absl::StatusOr<v1::HandshakeResponse> HandshakeWith(const Session::Peer& peer,
                                                    const v1::TaskIdentity& identity,
                                                    int deadline_ms) {
  v1::TaskService::Stub stub(peer.channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(deadline_ms));
  v1::HandshakeRequest request;
  *request.mutable_from() = identity;
  v1::HandshakeResponse response;
  grpc::Status st = stub.Handshake(&context, request, &response);
  if (!st.ok()) {
    return absl::UnavailableError(
        absl::StrCat("handshake with ", peer.task.ShortName(), " failed: ", st.error_message()));
  }
  peer.health->SetIdentity(response.identity().incarnation(), response.identity().listen_address());
  return response;
}

}  // namespace trainscope
