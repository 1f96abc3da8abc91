#pragma once
// The exchange between the sidecars of a cluster, served on the sidecar's gRPC port as
// trainscope.sidecar.v1.Exchange. Every period each sidecar probes one member directly (SWIM),
// retries a failed probe through a few others, pushes what is new to a few random members, and
// compares a slice of its records with one member (anti-entropy); news rides on every message.
// So each sidecar sends a constant number of small messages per period whatever the size of
// the cluster, a change reaches every sidecar in O(log N) periods, and no single sidecar's loss
// blinds the others. See docs/sidecar.md for the figures.
//
// Thread-safe. One timer thread; gRPC's callback threads run the rest; one lock guards state.

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "membership.h"
#include "node_records.h"
#include "trainscope/sidecar/task_view.h"

namespace grpc {
class Service;
}

namespace trainscope::sidecar {

// The exchange's wire version (Header.protocol_version). Peers of another version are refused.
inline constexpr uint32_t kExchangeProtocolVersion = 1;

struct ExchangeOptions {
  std::string cluster;
  std::string self;  // This node's id: host:port the others reach its exchange at.
  std::string hostname;
  std::vector<std::string> peers;  // The other members' ids.
  MembershipOptions membership;
  int probe_timeout_ms = 250;             // A direct probe's deadline.
  int indirect_timeout_ms = 500;          // The deadline of an indirect probe, through a helper.
  double sync_interval_s = 2;             // Anti-entropy with one member this often ...
  size_t sync_slice = 64;                 // ... over this many records.
  int gossip_fanout = 3;                  // Members news is pushed to at once.
  size_t gossip_budget_bytes = 32 << 10;  // News per message.
  size_t max_message_bytes = 4 << 20;
  double reason_refresh_s = 5;  // A problem's changed reason is re-told at most this often.
  uint64_t seed = 0;            // Randomness (0: from the clock).
};

// Counters of the exchange, for /metrics and the scale bench.
struct ExchangeStats {
  int64_t messages_sent = 0;
  int64_t messages_received = 0;
  int64_t bytes_sent = 0;  // Message payload (protobuf) bytes, both directions' calls.
  int64_t bytes_received = 0;
  int64_t errors = 0;  // Failed calls and nonsense from peers.
  int64_t records_refused = 0;
  int64_t records_learned = 0;
};

// What the exchange knows, as a value.
struct ExchangeSnapshot {
  std::string self;
  std::string hostname;
  std::vector<Member> members;  // The others; status_since and last_contact in unix seconds.
  std::map<std::string, std::shared_ptr<const RecordEntry>> records;  // Every node's, own too.
  std::optional<double> isolated_since_unix;
  bool ever_contacted = false;
  double made_at_unix = 0;
  ExchangeStats stats;
};

class PeerExchange {
 public:
  // `local` gives this node's latest first-hand views; called from the exchange's thread.
  using LocalViews = std::function<std::vector<TaskView>()>;
  PeerExchange(ExchangeOptions options, LocalViews local);
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
  // The latest published state (at least once a second, and on every change).
  std::shared_ptr<const ExchangeSnapshot> snapshot() const;
  // The counters as they are now.
  ExchangeStats stats() const;

  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace trainscope::sidecar
