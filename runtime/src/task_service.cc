// The TaskService every task serves: handshakes, the end-of-training signal, heartbeats for
// its watchers, and injected faults for tests and drills.
#include <unistd.h>

#include <algorithm>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "net_util.h"
#include "spdlog/spdlog.h"
#include "task_impl.h"
#include "trainscope/common/cluster_spec.h"
#include "trainscope/runtime/status_macros.h"
#include "trainscope/telemetry/grpc_instrumentation.h"
#include "trainscope/telemetry/telemetry.h"
#include "trainscope/v1/runtime.grpc.pb.h"

namespace trainscope {
namespace {

// Links a fault request may delay at once.
constexpr int kMaxDelayedLinks = 64;

// The link delays of a fault request, by peer short name, when every delay in it is in bounds
// and every peer a task name; else why not.
absl::StatusOr<std::map<std::string, int64_t>> CheckedFault(const v1::InjectFaultRequest& r) {
  const double p = r.random_delay_probability();
  auto bounded = [](int64_t ms) { return ms >= 0 && ms <= kMaxInjectedDelayMs; };
  if (!(p >= 0 && p <= 1) || !bounded(r.random_delay_ms()) || !bounded(r.parameter_delay_ms()) ||
      !bounded(r.heartbeat_delay_ms())) {
    return absl::InvalidArgumentError(
        absl::StrCat("random_delay_probability must be in [0, 1] and every delay in [0, ",
                     kMaxInjectedDelayMs, "] ms"));
  }
  if (r.link_delay_ms_size() > kMaxDelayedLinks) {
    return absl::InvalidArgumentError(absl::StrCat(
        "at most ", kMaxDelayedLinks, " links may be delayed, not ", r.link_delay_ms_size()));
  }
  std::map<std::string, int64_t> links;
  for (const auto& [peer, ms] : r.link_delay_ms()) {
    absl::StatusOr<TaskRef> ref = ParseTaskRef(peer);
    if (!ref.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("link_delay_ms: '", absl::CHexEscape(peer.substr(0, 40)),
                       "' is not a task (e.g. ps:1): ", ref.status().message()));
    }
    if (!bounded(ms)) {
      return absl::InvalidArgumentError(absl::StrCat("link_delay_ms: the delay to ",
                                                     ref->ShortName(), " must be in [0, ",
                                                     kMaxInjectedDelayMs, "] ms, not ", ms));
    }
    links[ref->ShortName()] = ms;
  }
  return links;
}

// Arms what a checked fault request asks, logs it, and says what is now set.
void ApplyFault(const v1::InjectFaultRequest& r, std::map<std::string, int64_t> links,
                FaultInjector& faults, v1::InjectFaultResponse* response) {
  const double p = r.random_delay_probability();
  faults.SetDelays({r.parameter_delay_ms(), r.heartbeat_delay_ms(), r.random_delay_ms() > 0 ? p : 0,
                    r.random_delay_ms()});
  faults.SetLinkDelays(std::move(links));
  if (r.deadlock_training()) faults.ArmDeadlock();
  if (r.block_parameter_service()) faults.ArmBlockParameterService();
  if (r.deadlock_training() || r.block_parameter_service()) {
    spdlog::warn("fault injected: armed {}{}",
                 r.deadlock_training() ? "a deadlock of the training thread " : "",
                 r.block_parameter_service() ? "a ParameterService call that blocks" : "");
  }
  const FaultInjector::Delays now = faults.delays();
  std::string link_words;
  for (const auto& [peer, ms] : faults.link_delays()) {
    absl::StrAppend(&link_words, ", calls to ", peer, " delayed ", ms, " ms (a slow link)");
    (*response->mutable_link_delay_ms())[peer] = ms;
  }
  spdlog::warn(
      "fault injected: parameter calls delayed {} ms, heartbeats delayed {} ms, one parameter "
      "call in {:.0f} delayed {} ms{}",
      now.parameter_ms, now.heartbeat_ms,
      now.random_probability > 0 ? 1 / now.random_probability : 0.0, now.random_ms, link_words);
  response->set_parameter_delay_ms(now.parameter_ms);
  response->set_heartbeat_delay_ms(now.heartbeat_ms);
  response->set_random_delay_probability(now.random_probability);
  response->set_random_delay_ms(now.random_ms);
  response->set_random_delays(faults.random_delays());
}

class TaskServiceImpl final : public v1::TaskService::Service {
 public:
  explicit TaskServiceImpl(TaskServiceParts parts) : p_(std::move(parts)) {}

  grpc::Status Handshake(grpc::ServerContext* context, const v1::HandshakeRequest* request,
                         v1::HandshakeResponse* response) override {
    telemetry::ServerCall call(p_.telemetry, *context, telemetry::methods::kHandshake,
                               p_.callers->Index(request->from().task()), nullptr,
                               MessageBytes(*request));
    *response->mutable_identity() = p_.identity;
    if (p_.ps_memory != nullptr) p_.ps_memory->Fill(response->mutable_ps_state());
    const v1::TaskIdentity& from = request->from();
    p_.trainers->RecordHandshake(TaskIdFromProto(from.task()), from.incarnation());
    const v1::TaskIdentity& me = response->identity();
    if (from.protocol_version() != me.protocol_version() ||
        from.cluster_fingerprint() != me.cluster_fingerprint()) {
      spdlog::warn(
          "{} at {} handshakes with protocol {} and cluster fingerprint {}; this task has "
          "protocol {} and fingerprint {}: its CreateSession will fail",
          TaskIdFromProto(from.task()).ShortName(), from.listen_address(), from.protocol_version(),
          from.cluster_fingerprint(), me.protocol_version(), me.cluster_fingerprint());
    }
    return call.Finish(grpc::Status::OK, MessageBytes(*response));
  }

  grpc::Status Done(grpc::ServerContext* context, const v1::DoneRequest* request,
                    v1::DoneResponse* response) override {
    telemetry::ServerCall call(p_.telemetry, *context, telemetry::methods::kDone,
                               p_.callers->Index(request->from()), nullptr, MessageBytes(*request));
    if (absl::Status st = p_.callers->Check(*context, request->from(), "Done"); !st.ok()) {
      return call.Finish(ToGrpcStatus(st), 0);
    }
    absl::StatusOr<int> remaining =
        p_.trainers->MarkDone(TaskIdFromProto(request->from()), request->incarnation());
    if (!remaining.ok()) return call.Finish(ToGrpcStatus(remaining.status()), 0);
    response->set_workers_remaining(*remaining);
    return call.Finish(grpc::Status::OK, MessageBytes(*response));
  }

  grpc::Status Heartbeat(grpc::ServerContext* context, const v1::HeartbeatRequest* request,
                         v1::HeartbeatResponse* response) override {
    telemetry::ServerCall call(p_.telemetry, *context, telemetry::methods::kHeartbeat, -1, nullptr,
                               MessageBytes(*request));
    p_.faults->BeforeHeartbeat();
    p_.heartbeat.Fill(response);
    return call.Finish(grpc::Status::OK, MessageBytes(*response));
  }

  grpc::Status InjectFault(grpc::ServerContext* context, const v1::InjectFaultRequest* request,
                           v1::InjectFaultResponse* response) override {
    telemetry::ServerCall call(p_.telemetry, *context, telemetry::methods::kInjectFault, -1,
                               nullptr, MessageBytes(*request));
    if (!p_.accepts_faults) {
      return call.Finish(
          grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                       p_.self.ShortName() + " does not accept injected faults: start it with "
                                             "--enable_fault_injection"),
          0);
    }
    if (!IsLocalPeer(context->peer())) {
      spdlog::warn("{} refused an injected fault from {}: only callers on this machine may",
                   p_.self.ShortName(), context->peer());
      return call.Finish(grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                                      p_.self.ShortName() +
                                          " accepts injected faults only from this machine, not "
                                          "from " +
                                          context->peer()),
                         0);
    }
    auto links = CheckedFault(*request);
    if (!links.ok()) {
      return call.Finish(
          grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, std::string(links.status().message())),
          0);
    }
    ApplyFault(*request, std::move(*links), *p_.faults, response);
    return call.Finish(grpc::Status::OK, MessageBytes(*response));
  }

 private:
  const TaskServiceParts p_;
};

}  // namespace

std::unique_ptr<grpc::Service> NewTaskService(TaskServiceParts parts) {
  return std::make_unique<TaskServiceImpl>(std::move(parts));
}

}  // namespace trainscope
