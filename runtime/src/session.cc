// CreateSession: a worker or chief handshakes with every ps until all have answered (the rounds
// and their checks: session_rounds.h), then sets up its session and parameter client.
#include <condition_variable>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "session_rounds.h"
#include "task_impl.h"
#include "trainscope/common/clock.h"
#include "trainscope/runtime/status_macros.h"
#include "trainscope/telemetry/telemetry.h"
#include "trainscope/v1/runtime.grpc.pb.h"

namespace trainscope {

namespace {

// One round of CreateSession over gRPC: a Handshake with every pending peer at once, traced and
// measured like every call; waits for all of them to end.
std::vector<HandshakeAnswer> HandshakeRound(const std::vector<Session::Peer>& ps,
                                            const std::vector<int>& pending, int deadline_ms,
                                            const v1::HandshakeRequest& request,
                                            telemetry::Telemetry* telemetry) {
  struct Attempt {
    Attempt(telemetry::Telemetry* t, int peer, int64_t deadline)
        : call(t, telemetry::methods::kHandshake, peer, deadline) {}
    grpc::ClientContext context;
    telemetry::ClientCall call;
    HandshakeAnswer answer;
  };
  std::vector<std::unique_ptr<Attempt>> attempts;
  std::mutex mu;
  std::condition_variable cv;
  size_t finished = 0;
  for (int i : pending) {
    auto attempt = std::make_unique<Attempt>(telemetry, ps[i].index, deadline_ms);
    Attempt* a = attempt.get();
    a->context.set_deadline(std::chrono::system_clock::now() +
                            std::chrono::milliseconds(deadline_ms));
    a->call.AddTraceparent(&a->context);
    v1::TaskService::Stub stub(ps[i].channel);
    stub.async()->Handshake(&a->context, &request, &a->answer.response, [&, a](grpc::Status s) {
      a->call.End(s, request.GetCachedSize(), MessageBytes(a->answer.response));
      std::lock_guard lock(mu);
      a->answer.code = static_cast<int>(s.error_code());
      a->answer.message = s.error_message();
      ++finished;
      cv.notify_all();
    });
    attempts.push_back(std::move(attempt));
  }
  std::unique_lock lock(mu);
  cv.wait(lock, [&] { return finished == attempts.size(); });
  std::vector<HandshakeAnswer> answers;
  for (auto& a : attempts) answers.push_back(std::move(a->answer));
  return answers;
}

}  // namespace

absl::StatusOr<ParameterClient*> Task::Impl::CreateSession() {
  std::vector<Session::Peer> ps;
  std::vector<SessionRounds::Peer> peers;
  for (int i = 0; i < cluster_.NumTasks("ps"); ++i) {
    TaskRef ref{"ps", i};
    std::string address = *cluster_.AddressOf(ref);
    ps.push_back({ref, address, MakePeerChannel(address, channel_credentials_),
                  status_.Peer(ref, address), telemetry_ ? telemetry_->rpc().PeerIndex(ref) : -1});
    peers.push_back({ref, address, ps.back().health});
  }
  v1::HandshakeRequest request;
  *request.mutable_from() = Identity();
  SessionRounds rounds(
      options_, self_, cluster_, Identity(), std::move(peers),
      [&](const std::vector<int>& pending, int deadline_ms) {
        return HandshakeRound(ps, pending, deadline_ms, request, telemetry_.get());
      },
      {MonotonicSeconds, SleepFor}, &status_, [this] { return stopping_.load(); });
  TS_RETURN_IF_ERROR(rounds.Run());
  status_.SetPhase(Phase::kTraining);
  status_.SetExpectsProgress(true);
  session_ = std::make_unique<Session>(std::move(ps), telemetry_.get(), &status_, Identity(),
                                       &faults_, [this] { return stopping_.load(); });
  client_ =
      NewParameterClient(session_.get(), self_, options_.rpc_deadline_ms, options_.ps_patience_s);
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
