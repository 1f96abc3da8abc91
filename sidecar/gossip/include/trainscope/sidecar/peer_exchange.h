#pragma once
// The exchange between the sidecars of a cluster, served on the sidecar's gRPC port as
// trainscope.sidecar.v1.Exchange. Every period each sidecar probes one member directly (SWIM),
// retries a failed probe through a few others, pushes what is new to a few random members, and
// compares a slice of its records with one member (anti-entropy); news rides on every message.
// So each sidecar sends a constant number of small messages per period whatever the size of
// the cluster, a change reaches every sidecar in O(log N) periods, and no single sidecar's loss
// blinds the others. See docs/sidecar.md for the figures.
//
// The protocol itself is ExchangeCore; this is its gRPC transport. Thread-safe. One timer
// thread; gRPC's callback threads run the rest; one lock guards the core.

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "trainscope/sidecar/api.h"
#include "trainscope/sidecar/exchange_core.h"
#include "trainscope/sidecar/node_load.h"
#include "trainscope/sidecar/operator_proof.h"
#include "trainscope/sidecar/task_view.h"

namespace grpc {
class ChannelCredentials;
class Service;
}  // namespace grpc

namespace trainscope::sidecar {

class PeerExchange {
 public:
  // `local` gives this node's latest first-hand views; called from the exchange's thread.
  using LocalViews = std::function<std::vector<TaskView>()>;
  // `credentials`: of the channels to the other members (plain text when null).
  PeerExchange(ExchangeOptions options, LocalViews local,
               std::shared_ptr<grpc::ChannelCredentials> credentials = nullptr);
  ~PeerExchange();

  // The gRPC service to register on the sidecar's server (owned by this object).
  grpc::Service* service();
  void Start();
  // Tells a few members that this node leaves, stops the thread and cancels every call in
  // flight. Returns within about half a second whatever the peers do. The gRPC server must be
  // shut down after this and before the object is destroyed.
  void Stop();
  // This node's views may have changed: look now rather than at the next period.
  void Poke();
  // Called (on the exchange's thread, no lock held) after each published change: a member's
  // status, a record. Set before Start. The notifier evaluates then, not a second later.
  void SetOnChange(std::function<void()> on_change);
  // The latest published state (at least once a second, and on every change).
  std::shared_ptr<const ExchangeSnapshot> snapshot() const;
  // The counters as they are now.
  ExchangeStats stats() const;

  // The Snapshots service to register on the same server (synchronous; owned by this object).
  grpc::Service* snapshots_service();
  // What Snapshots.Stacks answers: the snapshots this node keeps of one of its tasks (fresh:
  // take one now). Set before Start; without it, Stacks answers UNIMPLEMENTED.
  using StacksProvider =
      std::function<absl::StatusOr<pb::StackList>(const std::string& task, bool fresh)>;
  void SetStacksProvider(StacksProvider provider);
  // What Snapshots.Evidence answers: what this node holds of the incident `id` (held false when
  // none), with the slow and failed requests its sidecar kept that overlap [from, to]. Set
  // before Start; without it, Evidence answers UNIMPLEMENTED.
  using EvidenceProvider =
      std::function<pb::NodeEvidence(const std::string& id, double from_unix, double to_unix)>;
  void SetEvidenceProvider(EvidenceProvider provider);
  // The operator's credential (operator_proof.h): a Snapshots request asking for a fresh
  // capture is refused unless it carries a proof made with this token, and one without a proof
  // is answered without program counters; FetchStacks and FetchEvidence carry a proof made
  // with it. Set before Start; must outlive this object. Without it every fresh capture asked
  // over the exchange is refused.
  void SetOperatorCredential(OperatorCredential* credential);
  // This node's load, read on the exchange's thread with the views and carried in its record.
  // Set before Start; without it the record carries none.
  void SetLoadProvider(std::function<NodeLoad()> load);
  // The incidents this node owns (open, or closed a moment ago), read on the exchange's thread
  // with the views and carried in its record (the other nodes take their ids). Set before
  // Start; without it, none.
  void SetIncidentsProvider(std::function<std::vector<v1::OwnedIncident>()> incidents);
  // Asks the sidecar of `node` (its exchange's host:port) for its snapshots of `task`, waiting
  // at most `deadline_ms`; an answer over `max_bytes` is refused. Errors in words, naming the
  // node. Blocks the caller.
  absl::StatusOr<pb::StackList> FetchStacks(const std::string& node, const std::string& task,
                                            bool fresh, int deadline_ms, int64_t max_bytes);

  // Asks the sidecar of `node` what it holds of the incident `id` (EvidenceProvider), as
  // FetchStacks asks; an answer is cut to `max_bytes` by the node (NodeEvidence.dropped).
  absl::StatusOr<pb::NodeEvidence> FetchEvidence(const std::string& node, const std::string& id,
                                                 double from_unix, double to_unix, int deadline_ms,
                                                 int64_t max_bytes);

  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace trainscope::sidecar
