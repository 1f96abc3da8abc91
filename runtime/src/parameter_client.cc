// Worker side of the parameter service; see parameter_client.h.
#include "trainscope/runtime/parameter_client.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <thread>

#include "absl/strings/str_cat.h"
#include "internal.h"
#include "net_util.h"
#include "trainscope/common/proc.h"
#include "trainscope/common/rpc_error.h"
#include "trainscope/runtime/status_macros.h"
#include "trainscope/telemetry/context.h"
#include "trainscope/telemetry/telemetry.h"
#include "trainscope/v1/runtime.grpc.pb.h"

namespace trainscope {

std::map<std::string, int> PlaceVariables(const std::vector<VariableDef>& variables, int num_ps) {
  // Largest first onto the least-loaded ps (ties: lowest index, then name for determinism).
  std::vector<size_t> order(variables.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    int64_t sa = variables[a].spec.ByteSize();
    int64_t sb = variables[b].spec.ByteSize();
    return sa != sb ? sa > sb : variables[a].name < variables[b].name;
  });
  std::vector<int64_t> load(std::max(num_ps, 1), 0);
  std::map<std::string, int> placement;
  for (size_t i : order) {
    int ps = static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
    load[ps] += std::max<int64_t>(variables[i].spec.ByteSize(), 0);
    placement[variables[i].name] = ps;
  }
  return placement;
}

struct ParameterClient::PsStub {
  const Session::Peer* peer;
  std::unique_ptr<v1::ParameterService::Stub> stub;
  std::vector<size_t> variables;  // Indices into variables_, in creation order.
  v1::PullRequest pull_request;   // Built once: the names of `variables`.
};

ParameterClient::ParameterClient(Session* session, const TaskRef& self, int rpc_deadline_ms,
                                 int max_attempts)
    : session_(session),
      self_(self),
      rpc_deadline_ms_(rpc_deadline_ms),
      max_attempts_(std::max(1, max_attempts)) {
  for (int i = 0; i < session_->num_ps(); ++i) {
    auto ps = std::make_unique<PsStub>();
    ps->peer = &session_->ps(i);
    ps->stub = v1::ParameterService::NewStub(ps->peer->channel);
    *ps->pull_request.mutable_from() = TaskIdToProto(self_);
    ps_.push_back(std::move(ps));
  }
}

ParameterClient::~ParameterClient() = default;

namespace {

// Calls `rpc(context)` with the deadline, retrying UNAVAILABLE with backoff; turns a failure
// into an error that names the method, the ps task, its address and the cause.
template <typename Rpc>
absl::Status CallPs(const char* method, const Session::Peer& peer, const TaskRef& self,
                    int deadline_ms, int max_attempts, telemetry::Telemetry* telemetry, Rpc rpc) {
  grpc::Status st;
  int attempt = 0;
  const auto start = std::chrono::steady_clock::now();
  auto record = [&](const grpc::Status& status) {
    if (telemetry == nullptr || !telemetry->enabled()) return;
    telemetry::RpcMetrics& m = telemetry->rpc();
    static const int kPull = m.MethodIndex("trainscope.v1.ParameterService/Pull");
    static const int kPush = m.MethodIndex("trainscope.v1.ParameterService/Push");
    static const int kCreate = m.MethodIndex("trainscope.v1.ParameterService/CreateVariable");
    const int index = std::strcmp(method, "Pull") == 0   ? kPull
                      : std::strcmp(method, "Push") == 0 ? kPush
                                                         : kCreate;
    m.ClientCallEnded(
        index, status.error_code(), m.RoleIndex(peer.task.role),
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  };
  for (; attempt < max_attempts; ++attempt) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(deadline_ms));
    st = rpc(&context);
    if (st.ok()) {
      peer.health->RecordSuccess();
      record(st);
      return absl::OkStatus();
    }
    peer.health->RecordFailure(SummarizeRpcError(st.error_code(), st.error_message(), deadline_ms));
    if (st.error_code() != grpc::StatusCode::UNAVAILABLE) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(50 << attempt, 1000)));
  }
  record(st);
  const std::string trace_id = telemetry::LastClientTraceId();
  const std::string where = absl::StrCat(method, " from ", self.ShortName(), " to ",
                                         peer.task.ShortName(), " at ", peer.address);
  const std::string trace = trace_id.empty() ? "" : absl::StrCat(" [trace ", trace_id, "]");
  switch (st.error_code()) {
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return absl::DeadlineExceededError(absl::StrCat(
          where, " exceeded its deadline of ", deadline_ms, " ms (--rpc_deadline_ms): ",
          peer.task.ShortName(), " is overloaded or the network to it is slow", trace));
    case grpc::StatusCode::UNAVAILABLE:
      return absl::UnavailableError(absl::StrCat(
          where, " failed after ", attempt,
          " attempts: ", SummarizeRpcError(st.error_code(), st.error_message(), deadline_ms),
          " (is ", peer.task.ShortName(), " still running?)", trace));
    default:
      return absl::Status(static_cast<absl::StatusCode>(st.error_code()),
                          absl::StrCat(where, " failed: ", st.error_message(), trace));
  }
}

}  // namespace

absl::Status ParameterClient::CreateVariables(const std::vector<VariableDef>& variables) {
  std::map<std::string, int> placement = PlaceVariables(variables, session_->num_ps());
  for (const VariableDef& def : variables) {
    const int ps_index = placement[def.name];
    PsStub& ps = *ps_[ps_index];
    v1::CreateVariableRequest request;
    request.set_name(def.name);
    *request.mutable_from() = TaskIdToProto(self_);
    SpecToProto(def.spec, request.mutable_initial());
    request.mutable_initial()->set_content(def.initial);
    TS_RETURN_IF_ERROR(CallPs("CreateVariable", *ps.peer, self_, rpc_deadline_ms_, max_attempts_,
                              session_->telemetry(), [&](grpc::ClientContext* context) {
                                v1::CreateVariableResponse response;
                                return ps.stub->CreateVariable(context, request, &response);
                              }));
    ps.variables.push_back(variables_.size());
    ps.pull_request.add_names(def.name);
    variables_.push_back(VariableDef{def.name, def.spec, {}});
    placement_.push_back(ps_index);
  }
  return absl::OkStatus();
}

absl::Status ParameterClient::PullAll(std::vector<std::string>* values) {
  values->resize(variables_.size());
  for (auto& ps : ps_) {
    if (ps->variables.empty()) continue;
    v1::PullResponse response;
    TS_RETURN_IF_ERROR(CallPs("Pull", *ps->peer, self_, rpc_deadline_ms_, max_attempts_,
                              session_->telemetry(), [&](grpc::ClientContext* context) {
                                response.Clear();
                                return ps->stub->Pull(context, ps->pull_request, &response);
                              }));
    if (response.values_size() != static_cast<int>(ps->variables.size())) {
      return absl::DataLossError(absl::StrCat("Pull from ", ps->peer->task.ShortName(),
                                              " returned ", response.values_size(), " values for ",
                                              ps->variables.size(), " names"));
    }
    for (size_t k = 0; k < ps->variables.size(); ++k) {
      const size_t index = ps->variables[k];
      v1::Tensor* tensor = response.mutable_values(static_cast<int>(k));
      if (static_cast<int64_t>(tensor->content().size()) != variables_[index].spec.ByteSize()) {
        return absl::DataLossError(absl::StrCat("Pull of '", variables_[index].name, "' from ",
                                                ps->peer->task.ShortName(), " returned ",
                                                tensor->content().size(), " bytes, expected ",
                                                variables_[index].spec.ByteSize()));
      }
      (*values)[index].swap(*tensor->mutable_content());
    }
  }
  return absl::OkStatus();
}

absl::Status ParameterClient::Push(size_t index, std::string gradient, float learning_rate) {
  const VariableDef& def = variables_.at(index);
  PsStub& ps = *ps_[placement_[index]];
  v1::PushRequest request;
  request.set_name(def.name);
  *request.mutable_from() = TaskIdToProto(self_);
  SpecToProto(def.spec, request.mutable_gradient());
  request.mutable_gradient()->mutable_content()->swap(gradient);
  request.set_learning_rate(learning_rate);
  return CallPs("Push", *ps.peer, self_, rpc_deadline_ms_, max_attempts_, session_->telemetry(),
                [&](grpc::ClientContext* context) {
                  v1::PushResponse response;
                  return ps.stub->Push(context, request, &response);
                });
}

}  // namespace trainscope
