#pragma once
// The rounds of CreateSession, without a network or a clock of their own, so that they are
// tested alone (tests/session_rounds_test.cc). Each round handshakes with every ps not reached
// yet, at once. An answer is checked: the task expected at that address, the same runtime and
// protocol versions, the same cluster spec and cluster name; a wrong one ends the session at
// once, saying how. A failure is retried in the next round, after a backoff (100 ms, times 1.5
// each round, at most 1 s, each within 20% either way: common's Backoff). Whom it still waits for
// is in the heartbeat, and logged every session_log_interval_s; after session_timeout_s (0: never)
// it gives up, naming each task still missing and its last error.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "task_status.h"
#include "trainscope/common/cluster_spec.h"
#include "trainscope/runtime/options.h"
#include "trainscope/v1/runtime.pb.h"

namespace trainscope {

// A handshake's outcome: the answer, or the gRPC status code and message of its failure.
struct HandshakeAnswer {
  int code = 0;  // grpc::StatusCode; 0 (OK): `response` holds the answer.
  std::string message;
  v1::HandshakeResponse response;
};

class SessionRounds {
 public:
  struct Peer {
    TaskRef task;
    std::string address;
    PeerHealth* health;  // Where its failures and identity are recorded (the heartbeat's).
  };
  // One round: a handshake with peers[i] for every i of `pending`, all at once, each waiting at
  // most `deadline_ms`. The answers, in the order of `pending`.
  using Round =
      std::function<std::vector<HandshakeAnswer>(const std::vector<int>& pending, int deadline_ms)>;
  // The steady clock in seconds, and a sleep in milliseconds (the test's advance a fake clock).
  struct Clock {
    std::function<double()> now;
    std::function<void(int64_t ms)> sleep;
  };

  // `identity`: this task's, as its handshakes say (its protocol version is compared).
  SessionRounds(const RuntimeOptions& options, TaskRef self, const ClusterSpec& cluster,
                v1::TaskIdentity identity, std::vector<Peer> peers, Round round, Clock clock,
                TaskStatus* status, std::function<bool()> stopping);

  // Rounds until every peer has answered rightly (OK); a peer answered wrongly
  // (FailedPrecondition, saying how); session_timeout_s passed (DeadlineExceeded, naming who is
  // missing and why); or `stopping` says so (Cancelled). Phase and waiting are reported in the
  // heartbeat as it goes.
  absl::Status Run();

 private:
  // OK when `theirs` is the peer expected, of this build, cluster spec and cluster name.
  absl::Status Check(const Peer& peer, const v1::TaskIdentity& theirs) const;
  absl::Status ClusterSpecsDiffer(const Peer& peer, const v1::TaskIdentity& theirs) const;
  // Records every answer of a round; the peers still pending, or the first wrong answer.
  absl::Status TakeAnswers(const std::vector<HandshakeAnswer>& answers, int deadline_ms);
  absl::Status GiveUp() const;
  void LogWaiting(double waited) const;
  std::vector<TaskRef> PendingTasks() const;

  const RuntimeOptions& options_;
  TaskRef self_;
  const ClusterSpec& cluster_;
  v1::TaskIdentity identity_;
  std::vector<Peer> peers_;
  Round round_;
  Clock clock_;
  TaskStatus* status_;
  std::function<bool()> stopping_;
  std::vector<int> pending_;
  double start_ = 0;
};

}  // namespace trainscope
