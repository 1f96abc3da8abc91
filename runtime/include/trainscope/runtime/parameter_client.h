#pragma once
// The worker side of the parameter service: places variables across the ps tasks (balanced by
// size), creates them, and pulls and pushes with a deadline on every attempt. A call that fails
// for a transient reason (a ps stopped, restarting or cut off, an attempt past its deadline) is
// retried with backoff for as long as --ps_patience_s allows, one outage across calls; other
// errors end the call at once. The calls of one batch (a pull of every ps, the pushes of a step)
// run at once, so a step waits for the slowest ps, not for the sum of them. Errors name the
// method, the ps task, its address and the cause (the ps, or the network to it).

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "trainscope/common/backoff.h"
#include "trainscope/common/cluster_spec.h"
#include "trainscope/runtime/task.h"
#include "trainscope/runtime/tensor.h"

namespace trainscope {

class TaskStatus;
class Session;
class Patience;

// A variable a model declares.
struct VariableDef {
  std::string name;
  TensorSpec spec;
  std::string initial;  // ByteSize() bytes.
};

// Where each variable lives: variable name -> ps task index. Deterministic: every worker that
// declares the same variables computes the same placement.
std::map<std::string, int> PlaceVariables(const std::vector<VariableDef>& variables, int num_ps);

// Thread-compatible: one training thread drives it.
// Task::CreateSession makes it; a training program uses what is public here.
class ParameterClient {
 public:
  ~ParameterClient();

  // Places and creates the variables (idempotent across workers).
  absl::Status CreateVariables(const std::vector<VariableDef>& variables);

  // Pulls every created variable; values come back in creation order, one string of raw bytes
  // each, moved out of the response without a copy.
  absl::Status PullAll(std::vector<std::string>* values);

  // Pushes a gradient for variable `index` (creation order): the ps applies value -= lr * g.
  absl::Status Push(size_t index, std::string gradient, float learning_rate);
  // Pushes several gradients (variable index, bytes) at once.
  absl::Status PushAll(std::vector<std::pair<size_t, std::string>> gradients, float learning_rate);

  // When a ps turns out to hold variables restored from a checkpoint (it restarted, or the whole
  // cluster did), the step of that checkpoint, once: the training loop goes on from there.
  std::optional<int64_t> TakeResume();
  const std::vector<VariableDef>& variables() const { return variables_; }
  // The ps task index of variable `index`.
  int PlacementOf(size_t index) const { return placement_[index]; }

 private:
  // The runtime's own side: the task makes the client and saves checkpoints through it.
  friend class Task::Impl;
  // Makes a client over `session` (internal.h): the task's CreateSession, and the runtime's tests.
  friend std::unique_ptr<ParameterClient> NewParameterClient(Session* session, const TaskRef& self,
                                                             int rpc_deadline_ms,
                                                             double ps_patience_s);
  // `ps_patience_s`: how long an outage of ps tasks is waited out (RuntimeOptions).
  ParameterClient(Session* session, const TaskRef& self, int rpc_deadline_ms, double ps_patience_s);
  // Called with each PullAll's values before it returns (the runtime saves checkpoints so).
  void SetAfterPull(std::function<void(const std::vector<std::string>&)> f) {
    after_pull_ = std::move(f);
  }
  // Called with the step the run goes on from when a ps restored a checkpoint.
  void SetOnResume(std::function<void(int64_t step)> f) { on_resume_ = std::move(f); }

  struct PsStub;
  struct Call;
  struct Round;
  // Runs `calls` at once; those that fail for a transient reason are retried together, with
  // backoff, until they get through, the patience runs out or the task stops. The first error
  // that remains, or OK.
  absl::Status RunAll(std::vector<Call>& calls);
  // Starts one attempt of every call in `round` and waits for them all.
  // Each pending call with the injected delay of its link (FaultInjector::LinkDelayMs), in the
  // order RunRound starts them: undelayed first, then by delay.
  std::vector<std::pair<size_t, int64_t>> StartOrder(const std::vector<Call>& calls,
                                                     const std::vector<size_t>& pending) const;
  void RunRound(std::vector<Call>& calls, Round& round);
  // Records one attempt's outcome in its peer's health as soon as it ends (not when the round
  // does: a slow ps must not hide from the heartbeat that another is out of reach).
  void RecordAttempt(const Call& call, double seconds) const;
  // Records a round's outcome in each call and its peer's wait. The calls to retry (failed for a
  // transient reason); in `failing`, the ps tasks of those failures.
  std::vector<size_t> TakeRound(std::vector<Call>& calls, const Round& round,
                                std::vector<TaskRef>* failing) const;
  // The outage, begun, going on or ended by a round at `now` with these transient failures.
  void TrackOutage(double now, const std::vector<Call>& calls, const std::vector<size_t>& retry);
  // Every call's metrics; the first failure in words, or OK.
  absl::Status EndCalls(std::vector<Call>& calls) const;
  // Says in the heartbeat whom the task waits on while calls fail; nobody once they succeed.
  void ReportWaiting(const char* method, std::vector<TaskRef> failing);
  // A ps answered with `state`: when its incarnation is new, it restarted; handshake with it
  // again, learn there what it restored, and note the step to go on from. (Pull and Push answers
  // carry only the incarnation; CreateVariable answers say what was restored too.)
  template <typename State>
  void CheckRestart(PsStub* ps, const State& state);
  // A call was refused (NOT_FOUND, INVALID_ARGUMENT: variables the ps does not hold): when the
  // ps restarted, say so (and whether a checkpoint could have restored it), not the bare error.
  absl::Status ExplainRestart(const std::vector<Call>& calls, absl::Status error);

  Session* session_;
  TaskRef self_;
  int rpc_deadline_ms_;
  std::unique_ptr<Patience> patience_;  // The outage now waited out, if any.
  Backoff backoff_;                     // Between rounds of retries; reset when one gets through.
  std::vector<VariableDef> variables_;  // Specs only; initial values are dropped once created.
  std::vector<int> placement_;
  std::vector<std::unique_ptr<PsStub>> ps_;  // By ps index.
  bool waiting_ = false;                     // The heartbeat says it waits on failing ps tasks.
  uint64_t next_sequence_ = 0;               // Of Push requests (their ids, with our incarnation).
  std::optional<int64_t> resume_;
  std::function<void(const std::vector<std::string>&)> after_pull_;
  std::function<void(int64_t)> on_resume_;
};

}  // namespace trainscope
