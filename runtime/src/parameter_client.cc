// Worker side of the parameter service; see parameter_client.h.
#include "trainscope/runtime/parameter_client.h"

#include <algorithm>
#include <cinttypes>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <functional>
#include <mutex>
#include <numeric>
#include <thread>

#include "absl/strings/str_cat.h"
#include "fault_injector.h"
#include "internal.h"
#include "net_util.h"
#include "patience.h"
#include "spdlog/spdlog.h"
#include "task_status.h"
#include "trainscope/common/clock.h"
#include "trainscope/common/rpc_error.h"
#include "trainscope/runtime/status_macros.h"
#include "trainscope/telemetry/context.h"
#include "trainscope/telemetry/grpc_instrumentation.h"
#include "trainscope/telemetry/telemetry.h"
#include "trainscope/v1/runtime.grpc.pb.h"

namespace trainscope {
namespace {

// Between rounds of retried calls: 50 ms, doubling, at most 250 ms (plus or minus 20%), so that
// a ps that is back, or a path healed, carries the next attempt within a quarter of a second.
constexpr BackoffOptions kRetryBackoff{
    .initial_s = 0.05, .max_s = 0.25, .multiplier = 2, .jitter = 0.2};

// Failures that waiting can mend: the ps is stopped, restarting, cut off, or was slower than the
// deadline. Every other error (a shape, a version, a refused call) ends the call at once.
bool IsTransient(grpc::StatusCode code) {
  return code == grpc::StatusCode::UNAVAILABLE || code == grpc::StatusCode::DEADLINE_EXCEEDED;
}

}  // namespace

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
  uint64_t incarnation = 0;       // The ps's, as this task last knew it.
};

ParameterClient::ParameterClient(Session* session, const TaskRef& self, int rpc_deadline_ms,
                                 double ps_patience_s)
    : session_(session),
      self_(self),
      rpc_deadline_ms_(rpc_deadline_ms),
      patience_(std::make_unique<Patience>(self.ShortName(), ps_patience_s)),
      backoff_(kRetryBackoff) {
  for (int i = 0; i < session_->num_ps(); ++i) {
    auto ps = std::make_unique<PsStub>();
    ps->peer = &session_->ps(i);
    ps->stub = v1::ParameterService::NewStub(ps->peer->channel);
    *ps->pull_request.mutable_from() = TaskIdToProto(self_);
    ps->incarnation = ps->peer->health->Read().peer_incarnation;
    ps_.push_back(std::move(ps));
  }
}

ParameterClient::~ParameterClient() = default;

std::unique_ptr<ParameterClient> NewParameterClient(Session* session, const TaskRef& self,
                                                    int rpc_deadline_ms, double ps_patience_s) {
  return std::unique_ptr<ParameterClient>(
      new ParameterClient(session, self, rpc_deadline_ms, ps_patience_s));
}

// One call of a batch: to which ps, and how to start one attempt of it (asynchronously, calling
// `done` with the outcome).
struct ParameterClient::Call {
  PsStub* ps = nullptr;
  const char* method = "";
  int method_index = 0;  // telemetry::methods::k...
  // Starts one attempt: puts the attempt's trace context into the request, makes the call, and
  // ends `attempt` with the messages' sizes before calling `done`.
  std::function<void(grpc::ClientContext*, telemetry::ClientCall* attempt,
                     std::function<void(grpc::Status)> done)>
      start;
  grpc::Status status;
  int attempts = 0;
  double seconds = 0;  // Of every attempt together.
};

namespace {

// Starts `rpc` (an async stub call) for `request`/`response` as one traced attempt.
template <typename Request, typename Response, typename Rpc>
void StartAttempt(grpc::ClientContext* ctx, telemetry::ClientCall* attempt, Request* request,
                  Response* response, std::function<void(grpc::Status)> done, Rpc rpc) {
  SetTrace(*attempt, request);
  rpc(ctx, request, response, [attempt, request, response, done = std::move(done)](grpc::Status s) {
    attempt->End(s, request->GetCachedSize(), static_cast<int64_t>(response->ByteSizeLong()));
    done(std::move(s));
  });
}

// A call of RunAll as the heartbeat lists it in flight, from its first attempt.
InflightCalls::Call InflightEntry(const char* method, const TaskRef& ps, double started,
                                  const telemetry::ClientCall& attempt) {
  InflightCalls::Call c;
  c.method = method;
  c.peer = ps;
  c.start = started;
  c.traced = attempt.context().valid();
  c.trace_id = attempt.context().trace_id;
  c.tid = CurrentTid();
  return c;
}

// How long a failed call was retried, for its error.
struct Tried {
  int attempts = 1;
  double waited_s = 0;  // Of the outage it ended in; 0: none.
  double patience_s = 0;
  int deadline_ms = 0;
};

// "after 12 attempts in 10 min 0 s (--ps_patience_s 600)", or "" for a call tried once.
std::string TriedWords(const Tried& t) {
  if (t.attempts <= 1) return "";
  return absl::StrCat(" after ", t.attempts, " attempts in ", HumanDuration(t.waited_s),
                      t.waited_s >= t.patience_s
                          ? absl::StrCat(" (--ps_patience_s ", t.patience_s, ")")
                          : std::string(" (the task is stopping)"));
}

// A failed call in words that blame the right thing: the ps, or the network to it.
absl::Status CallError(const char* method, const TaskRef& self, const TaskRef& ps,
                       const std::string& address, const grpc::Status& st, const Tried& tried) {
  const std::string trace_id = telemetry::LastClientTraceId();
  const std::string where =
      absl::StrCat(method, " from ", self.ShortName(), " to ", ps.ShortName(), " at ", address);
  const std::string trace = trace_id.empty() ? "" : absl::StrCat(" [trace ", trace_id, "]");
  const RpcErrorSummary e =
      ClassifyRpcError(static_cast<int>(st.error_code()), st.error_message(), tried.deadline_ms);
  if (st.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
    return absl::DeadlineExceededError(absl::StrCat(
        where, " exceeded its deadline of ", tried.deadline_ms, " ms (--rpc_deadline_ms)",
        TriedWords(tried), ": ", ps.ShortName(),
        " answered too slowly (overloaded? stopped?) or the network to it is slow", trace));
  }
  if (st.error_code() == grpc::StatusCode::UNAVAILABLE) {
    const std::string why =
        IsNetworkFailure(e.kind) ? absl::StrCat("the network to ", ps.ShortName(), " failed (",
                                                e.words, "): is the path to it cut?")
        : e.kind == RpcFailure::kRefused
            ? absl::StrCat(e.words, " (is ", ps.ShortName(), " still running?)")
            : absl::StrCat(e.words, " (is ", ps.ShortName(), " still running and reachable?)");
    return absl::UnavailableError(
        absl::StrCat(where, " failed", TriedWords(tried), ": ", why, trace));
  }
  int64_t sent = 0, limit = 0;
  if (st.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED &&
      std::sscanf(st.error_message().c_str(),
                  "Received message larger than max (%" SCNd64 " vs. %" SCNd64 ")", &sent,
                  &limit) == 2) {
    return absl::ResourceExhaustedError(
        absl::StrCat(where, " failed: the message (", HumanBytes(sent), ") is larger than ",
                     ps.ShortName(), " accepts (", HumanBytes(limit),
                     ": its --max_message_bytes, or its memory budget plus 1 MiB)", trace));
  }
  return absl::Status(static_cast<absl::StatusCode>(st.error_code()),
                      absl::StrCat(where, " failed: ", st.error_message(), trace));
}

}  // namespace

void ParameterClient::ReportWaiting(const char* method, std::vector<TaskRef> failing) {
  TaskStatus* status = session_->status();
  if (status == nullptr) return;
  // While calls to some ps fail, the heartbeat says the task waits on them (its
  // sidecar calls it blocked after a while, naming the peers and the error), until a round of
  // calls gets through again.
  if (failing.empty()) {
    if (waiting_) status->StopWaiting();
    waiting_ = false;
  } else if (!waiting_) {
    status->StartWaiting(method, std::move(failing));
    waiting_ = true;
  } else {
    status->UpdateWaiting(std::move(failing));
  }
}

// One round of RunAll: the calls it runs and when each of their attempts ended.
struct ParameterClient::Round {
  std::vector<size_t> pending;  // Indices into the calls.
  std::vector<double> ended;    // By call index: MonotonicSeconds() of its attempt's end; 0: not.
  double start = 0;
  double first_started = 0;  // Of RunAll, for the calls in flight.
  InflightCalls* registry = nullptr;
  std::vector<uint64_t> inflight;  // Ids in `registry` by call index; 0: not listed.
};

std::vector<std::pair<size_t, int64_t>> ParameterClient::StartOrder(
    const std::vector<Call>& calls, const std::vector<size_t>& pending) const {
  std::vector<std::pair<size_t, int64_t>> order;
  FaultInjector* faults = session_->faults();
  for (size_t i : pending) {
    order.push_back({i, faults ? faults->LinkDelayMs(calls[i].ps->peer->task.ShortName()) : 0});
  }
  std::stable_sort(order.begin(), order.end(),
                   [](const auto& a, const auto& b) { return a.second < b.second; });
  return order;
}

void ParameterClient::RunRound(std::vector<Call>& calls, Round& round) {
  telemetry::Telemetry* telemetry = session_->telemetry();
  std::mutex mu;
  std::condition_variable cv;
  size_t finished = 0;
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<std::unique_ptr<telemetry::ClientCall>> attempts;
  round.start = MonotonicSeconds();
  std::fill(round.ended.begin(), round.ended.end(), 0);
  for (const auto& [index, delay] : StartOrder(calls, round.pending)) {
    const size_t i = index;  // A variable, so that the callback below can capture it.
    const int64_t delay_ms = delay;
    auto ctx = std::make_unique<grpc::ClientContext>();
    ctx->set_deadline(std::chrono::system_clock::now() +
                      std::chrono::milliseconds(rpc_deadline_ms_));
    auto attempt = std::make_unique<telemetry::ClientCall>(
        telemetry, calls[i].method_index, calls[i].ps->peer->index, rpc_deadline_ms_);
    calls[i].attempts++;
    // An injected slow link: the call leaves `delay_ms` after the round began; its time, its
    // span and its deadline include the delay, as over a slow network.
    const double leave = round.start + static_cast<double>(delay_ms) / 1000;
    if (const double wait = leave - MonotonicSeconds(); wait > 0) {
      std::this_thread::sleep_for(std::chrono::duration<double>(wait));
    }
    calls[i].start(ctx.get(), attempt.get(), [&, i](grpc::Status s) {
      std::lock_guard lock(mu);
      calls[i].status = std::move(s);
      round.ended[i] = MonotonicSeconds();
      RecordAttempt(calls[i], round.ended[i] - round.start);
      ++finished;
      cv.notify_all();
    });
    if (round.registry != nullptr && round.inflight[i] == 0) {
      round.inflight[i] = round.registry->Add(
          InflightEntry(calls[i].method, calls[i].ps->peer->task, round.first_started, *attempt));
    }
    contexts.push_back(std::move(ctx));
    attempts.push_back(std::move(attempt));
  }
  std::unique_lock lock(mu);
  cv.wait(lock, [&] { return finished == round.pending.size(); });
}

std::vector<size_t> ParameterClient::TakeRound(std::vector<Call>& calls, const Round& round,
                                               std::vector<TaskRef>* failing) const {
  std::vector<size_t> retry;
  failing->clear();
  for (size_t i : round.pending) {
    Call& c = calls[i];
    const double took = round.ended[i] - round.start;
    c.seconds += took;
    c.ps->peer->health->AddWait(took);
    if (IsTransient(c.status.error_code())) {
      const TaskRef& peer = c.ps->peer->task;
      if (std::find(failing->begin(), failing->end(), peer) == failing->end()) {
        failing->push_back(peer);
      }
      retry.push_back(i);
    }
  }
  return retry;
}

void ParameterClient::TrackOutage(double now, const std::vector<Call>& calls,
                                  const std::vector<size_t>& retry) {
  std::optional<std::string> line;
  if (retry.empty()) {
    line = patience_->Succeeded(now);
    if (line) spdlog::info("{}", *line);
    return;
  }
  std::vector<Patience::Failure> failures;  // One per ps.
  std::vector<const PsStub*> seen;
  for (size_t i : retry) {
    const Call& c = calls[i];
    if (std::find(seen.begin(), seen.end(), c.ps) != seen.end()) continue;
    seen.push_back(c.ps);
    const RpcErrorSummary e = ClassifyRpcError(static_cast<int>(c.status.error_code()),
                                               c.status.error_message(), rpc_deadline_ms_);
    failures.push_back({c.ps->peer->task.ShortName(), c.ps->peer->address, e.words});
  }
  line = patience_->Failed(now, calls[retry[0]].method, failures);
  if (line) spdlog::warn("{}", *line);
}

void ParameterClient::RecordAttempt(const Call& c, double seconds) const {
  PeerHealth* health = c.ps->peer->health;
  if (c.status.ok()) {
    health->RecordSuccess(seconds);
    return;
  }
  const RpcErrorSummary e = ClassifyRpcError(static_cast<int>(c.status.error_code()),
                                             c.status.error_message(), rpc_deadline_ms_);
  health->RecordFailure(e.words, IsNetworkFailure(e.kind));
}

absl::Status ParameterClient::EndCalls(std::vector<Call>& calls) const {
  telemetry::Telemetry* telemetry = session_->telemetry();
  absl::Status first;
  const double waited = patience_->Waited(MonotonicSeconds());
  for (Call& c : calls) {
    if (telemetry != nullptr && telemetry->enabled()) {
      telemetry::RpcMetrics& m = telemetry->rpc();
      m.ClientCallEnded(c.method_index, c.status.error_code(), m.PeerRoleIndex(c.ps->peer->index),
                        c.seconds);
    }
    if (!c.status.ok() && first.ok()) {
      first = CallError(c.method, self_, c.ps->peer->task, c.ps->peer->address, c.status,
                        {c.attempts, waited, patience_->patience_s(), rpc_deadline_ms_});
    }
  }
  return first;
}

absl::Status ParameterClient::RunAll(std::vector<Call>& calls) {
  TaskStatus* status = session_->status();
  // Each call is listed in flight from its first attempt until it ends, retries included.
  Round round;
  round.registry = status != nullptr ? &status->inflight() : nullptr;
  round.inflight.assign(calls.size(), 0);
  round.ended.assign(calls.size(), 0);
  round.first_started = MonotonicSeconds();
  round.pending.resize(calls.size());
  std::iota(round.pending.begin(), round.pending.end(), 0);
  std::vector<TaskRef> failing;
  while (!round.pending.empty()) {
    RunRound(calls, round);
    std::vector<size_t> retry = TakeRound(calls, round, &failing);
    ReportWaiting(calls[round.pending[0]].method, failing);
    const double now = MonotonicSeconds();
    TrackOutage(now, calls, retry);
    // A ps out of reach: the step that gets through (this one, or a later one) recovers.
    if (!failing.empty() && status != nullptr) status->MarkStepRecovering();
    if (patience_->Exhausted(now) || session_->stopping()) retry.clear();
    for (size_t i : round.pending) {
      const bool again = std::find(retry.begin(), retry.end(), i) != retry.end();
      if (!again && round.registry != nullptr && round.inflight[i] != 0) {
        round.registry->Remove(round.inflight[i]);
      }
    }
    round.pending = std::move(retry);
    if (round.pending.empty()) break;
    // At most about a quarter of a second: a healed path carries the next attempt at once.
    std::this_thread::sleep_for(std::chrono::milliseconds(backoff_.NextDelayMs()));
  }
  if (failing.empty()) {
    ReportWaiting("", {});
    backoff_.Reset();
  }
  return EndCalls(calls);
}

std::optional<int64_t> ParameterClient::TakeResume() {
  std::optional<int64_t> step = resume_;
  resume_.reset();
  return step;
}

template <typename State>
void ParameterClient::CheckRestart(PsStub* ps, const State& answer) {
  const bool restarted = answer.incarnation() != 0 && answer.incarnation() != ps->incarnation;
  const bool first = ps->variables.empty();  // Creating: a restored ps is no surprise.
  if (!restarted && !(first && answer.restored())) return;
  if (restarted && session_->status() != nullptr) session_->status()->MarkStepRecovering();
  const std::string name = ps->peer->task.ShortName();
  absl::StatusOr<v1::HandshakeResponse> handshake;
  if (restarted) {
    // So that the new ps knows our session and accepts our Done at the end. Its answer also says
    // what the ps restored: Pull and Push answers carry only the incarnation (the hot path).
    handshake = HandshakeWith(*ps->peer, session_->identity(), rpc_deadline_ms_);
    if (!handshake.ok()) {
      // Tried again on its next answer: the incarnation stays the old one until then.
      spdlog::warn("{} restarted (incarnation {:016x} -> {:016x}); handshaking again failed: {}",
                   name, ps->incarnation, answer.incarnation(),
                   std::string(handshake.status().message()));
      return;
    }
  }
  const State& state = restarted ? handshake->ps_state() : answer;
  if (restarted) {
    spdlog::warn("{} restarted (incarnation {:016x} -> {:016x}){}", name, ps->incarnation,
                 state.incarnation(), state.restored() ? "" : " without restoring a checkpoint");
    ps->incarnation = state.incarnation();
  }
  if (!state.restored()) return;
  const int64_t step = state.restored_step();
  if (resume_ && *resume_ <= step) return;
  spdlog::warn("{} holds the variables of step {} restored from {}: {} goes on from step {}", name,
               step, state.restored_from(), self_.ShortName(), step);
  resume_ = step;
  if (on_resume_) on_resume_(step);
}

absl::Status ParameterClient::ExplainRestart(const std::vector<Call>& calls, absl::Status error) {
  for (const Call& c : calls) {
    const grpc::StatusCode code = c.status.error_code();
    if (code != grpc::StatusCode::NOT_FOUND && code != grpc::StatusCode::INVALID_ARGUMENT) continue;
    auto handshake = HandshakeWith(*c.ps->peer, session_->identity(), rpc_deadline_ms_);
    if (!handshake.ok()) return error;
    const uint64_t now = handshake->identity().incarnation();
    if (now == c.ps->incarnation) return error;
    const v1::PsState& state = handshake->ps_state();
    const std::string why =
        state.restored() ? absl::StrCat("the checkpoint it restored (", state.restored_from(),
                                        ", step ", state.restored_step(), ") does not hold them")
                         : "no checkpoint in --checkpoint_dir to restore from";
    return absl::FailedPreconditionError(absl::StrCat(
        c.ps->peer->task.ShortName(), " restarted (incarnation ",
        absl::Hex(c.ps->incarnation, absl::kZeroPad16), " -> ", absl::Hex(now, absl::kZeroPad16),
        ") and lost its variables; ", why, " (", error.message(), ")"));
  }
  return error;
}

absl::Status ParameterClient::CreateVariables(const std::vector<VariableDef>& variables) {
  std::map<std::string, int> placement = PlaceVariables(variables, session_->num_ps());
  std::vector<v1::CreateVariableRequest> requests(variables.size());
  std::vector<v1::CreateVariableResponse> responses(variables.size());
  std::vector<Call> calls(variables.size());
  for (size_t k = 0; k < variables.size(); ++k) {
    const VariableDef& def = variables[k];
    v1::CreateVariableRequest& request = requests[k];
    request.set_name(def.name);
    *request.mutable_from() = TaskIdToProto(self_);
    SpecToProto(def.spec, request.mutable_initial());
    request.mutable_initial()->set_content(def.initial);
    PsStub* ps = ps_[placement[def.name]].get();
    calls[k].ps = ps;
    calls[k].method = "CreateVariable";
    calls[k].method_index = telemetry::methods::kCreateVariable;
    calls[k].start = [ps, &request, &response = responses[k]](
                         grpc::ClientContext* ctx, telemetry::ClientCall* attempt,
                         std::function<void(grpc::Status)> done) {
      StartAttempt(ctx, attempt, &request, &response, std::move(done),
                   [ps](auto* context, auto* req, auto* resp, auto cb) {
                     ps->stub->async()->CreateVariable(context, req, resp, std::move(cb));
                   });
    };
  }
  TS_RETURN_IF_ERROR(RunAll(calls));
  for (size_t k = 0; k < variables.size(); ++k) CheckRestart(calls[k].ps, responses[k].ps_state());
  for (const VariableDef& def : variables) {
    const int ps_index = placement[def.name];
    PsStub& ps = *ps_[ps_index];
    ps.variables.push_back(variables_.size());
    ps.pull_request.add_names(def.name);
    variables_.push_back(VariableDef{def.name, def.spec, {}});
    placement_.push_back(ps_index);
  }
  return absl::OkStatus();
}

absl::Status ParameterClient::PullAll(std::vector<std::string>* values) {
  if (FaultInjector* faults = session_->faults()) faults->MaybeDeadlock();
  values->resize(variables_.size());
  std::vector<v1::PullResponse> responses(ps_.size());
  std::vector<Call> calls;
  std::vector<size_t> which;  // ps index of each call
  for (size_t p = 0; p < ps_.size(); ++p) {
    PsStub* ps = ps_[p].get();
    if (ps->variables.empty()) continue;
    Call c;
    c.ps = ps;
    c.method = "Pull";
    c.method_index = telemetry::methods::kPull;
    c.start = [ps, &response = responses[p]](grpc::ClientContext* ctx,
                                             telemetry::ClientCall* attempt,
                                             std::function<void(grpc::Status)> done) {
      response.Clear();
      StartAttempt(ctx, attempt, &ps->pull_request, &response, std::move(done),
                   [ps](auto* context, auto* req, auto* resp, auto cb) {
                     ps->stub->async()->Pull(context, req, resp, std::move(cb));
                   });
    };
    calls.push_back(std::move(c));
    which.push_back(p);
  }
  if (absl::Status st = RunAll(calls); !st.ok()) return ExplainRestart(calls, st);
  for (size_t p : which) {
    PsStub* ps = ps_[p].get();
    v1::PullResponse& response = responses[p];
    CheckRestart(ps, response.ps_state());
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
  if (after_pull_) after_pull_(*values);
  return absl::OkStatus();
}

absl::Status ParameterClient::Push(size_t index, std::string gradient, float learning_rate) {
  std::vector<std::pair<size_t, std::string>> one;
  one.emplace_back(index, std::move(gradient));
  return PushAll(std::move(one), learning_rate);
}

absl::Status ParameterClient::PushAll(std::vector<std::pair<size_t, std::string>> gradients,
                                      float learning_rate) {
  std::vector<v1::PushRequest> requests(gradients.size());
  std::vector<v1::PushResponse> responses(gradients.size());
  std::vector<Call> calls(gradients.size());
  for (size_t k = 0; k < gradients.size(); ++k) {
    const size_t index = gradients[k].first;
    const VariableDef& def = variables_.at(index);
    PsStub* ps = ps_[placement_[index]].get();
    v1::PushRequest& request = requests[k];
    request.set_name(def.name);
    *request.mutable_from() = TaskIdToProto(self_);
    SpecToProto(def.spec, request.mutable_gradient());
    request.mutable_gradient()->mutable_content()->swap(gradients[k].second);
    request.set_learning_rate(learning_rate);
    request.set_sender_incarnation(session_->identity().incarnation());
    request.set_sequence(++next_sequence_);
    calls[k].ps = ps;
    calls[k].method = "Push";
    calls[k].method_index = telemetry::methods::kPush;
    calls[k].start = [ps, &request, &response = responses[k]](
                         grpc::ClientContext* ctx, telemetry::ClientCall* attempt,
                         std::function<void(grpc::Status)> done) {
      StartAttempt(ctx, attempt, &request, &response, std::move(done),
                   [ps](auto* context, auto* req, auto* resp, auto cb) {
                     ps->stub->async()->Push(context, req, resp, std::move(cb));
                   });
    };
  }
  if (absl::Status st = RunAll(calls); !st.ok()) return ExplainRestart(calls, st);
  for (size_t k = 0; k < calls.size(); ++k) CheckRestart(calls[k].ps, responses[k].ps_state());
  return absl::OkStatus();
}

}  // namespace trainscope
