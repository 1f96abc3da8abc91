#pragma once
// The exchange protocol between sidecars without its transport: what to send each period (a
// probe, news to a few members, a slice of anti-entropy), what to put in each message, and what
// to make of each answer and request. PeerExchange carries it over gRPC; the scale bench runs
// thousands of these in one process over a simulated network. Time is injected.
// Not thread-safe: the owner serializes every call.

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "trainscope/sidecar/exchange_keys.h"
#include "trainscope/sidecar/membership.h"
#include "trainscope/sidecar/node_records.h"
#include "trainscope/sidecar/task_view.h"

namespace trainscope::sidecar {

// The exchange's wire version (Header.protocol_version). Peers of another version are refused.
inline constexpr uint32_t kExchangeProtocolVersion = 1;

struct ExchangeOptions {
  std::string cluster;
  std::string self;  // This node's id: host:port the others reach its exchange at.
  std::string hostname;
  std::vector<std::string> peers;  // The other members' ids.
  MembershipOptions membership;
  int probe_timeout_ms = 200;             // A direct probe's deadline.
  int indirect_timeout_ms = 250;          // The deadline of an indirect probe, through a helper.
  double sync_interval_s = 1;             // Anti-entropy with one member this often ...
  size_t sync_slice = 32;                 // ... over this many records.
  int gossip_fanout = 3;                  // Members news is pushed to at once.
  size_t gossip_budget_bytes = 32 << 10;  // News per message.
  size_t max_message_bytes = 4 << 20;
  double reason_refresh_s = 5;  // A problem's changed reason is re-told at most this often.
  uint64_t seed = 0;            // Randomness (0: from the generation).
  // The cluster key (exchange_keys.h): signs every message sent and verifies every one
  // received (PeerExchange). Null: the exchange is not authenticated, and says so.
  std::shared_ptr<ExchangeKeys> keys;
  // The exchange runs over mutual TLS: a caller's certificate must name the node it speaks as.
  bool mutual_tls = false;
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
  // Messages refused before they were read, by Refusal (exchange_keys.h).
  std::array<int64_t, std::size(kAllRefusals) + 1> refused{};
  bool authenticated = false;  // Signed with a cluster key, or over mutual TLS.
};

// What the exchange knows, as a value.
struct ExchangeSnapshot {
  std::string self;
  std::string hostname;
  std::vector<Member> members;  // The others; status_since and last_contact in unix seconds.
  std::map<std::string, std::shared_ptr<const RecordEntry>> records;  // Every node's, own too.
  std::optional<double> isolated_since_unix;
  std::optional<double> back_since_unix;  // Membership::back_since.
  bool ever_contacted = false;
  double made_at_unix = 0;
  ExchangeStats stats;
};

// A moment on both clocks: monotonic for durations, unix for what people read.
struct Now {
  double s = 0;
  double unix = 0;
};

class ExchangeCore {
 public:
  ExchangeCore(ExchangeOptions options, uint64_t generation, Now now);

  // This node's first-hand views; true when they are news (its record's version rose), which
  // should then go out at once to NewsTargets().
  bool UpdateOwn(const std::vector<TaskView>& views, Now now);
  // This node's load, in its record from the next version on (OwnRecord::SetLoad).
  void SetOwnLoad(const NodeLoad& load) { own_.SetLoad(load); }
  // The incidents this node owns (open, or closed a moment ago), in its record from the next
  // version on (news when their ids change: OwnRecord::SetIncidents).
  void SetOwnIncidents(std::vector<v1::OwnedIncident> incidents) {
    own_.SetIncidents(std::move(incidents));
  }
  std::vector<std::string> NewsTargets();
  // News not passed on yet (a record or a member's status just learned): the caller pushes it to
  // NewsTargets() at once rather than at the next period, so that each hop of the epidemic
  // costs a round trip, not a period.
  bool HasFreshNews() const { return queue_.HasUnsent(); }

  // What to do this period.
  struct Period {
    std::optional<std::string> probe;  // Ping it directly (a failure leads to indirect probes).
    std::vector<std::string> gossip;   // Ping them to push news.
    std::optional<std::string> sync;   // Compare a slice of records with it.
  };
  Period OnPeriod(Now now, bool sync_due);
  // A member to probe now, out of turn: one a local task waits on or fails to reach (see
  // Membership::ProbeSoon). Its probe is not held to the next period.
  std::optional<std::string> UrgentProbe(Now now);

  // The deadline of a direct probe of `target` and the period now: the configured ones times the
  // local health multiplier; a first contact (a member never heard) gets at least a second,
  // since it includes setting up the connection.
  int ProbeTimeoutMs(const std::string& target) const;
  double PeriodSeconds() const;
  // Whether a direct exchange with `id` (either way) happened at or after `since_s` (monotonic).
  bool HeardSince(const std::string& id, double since_s) const;

  // Client side: fill a request, then hand over its outcome (`error` "" when it succeeded;
  // `other_answered` when it failed but something at the address answered: refused, not gRPC,
  // not a sidecar, see Membership::OnOtherAnswer).
  // `relay`: a push of news just learned (HasFreshNews), which carries only that news.
  void FillPing(const std::string& target, v1::PingRequest* request, bool relay = false);
  // Returns the helpers to ask for indirect probes of `target` (after a failed direct probe).
  std::vector<std::string> OnPingDone(const std::string& target, bool probe,
                                      const std::string& error, const v1::PingResponse& response,
                                      Now now, bool other_answered = false);
  void FillPingReq(const std::string& target, v1::PingReqRequest* request);
  void OnPingReqDone(const std::string& helper, const std::string& target, const std::string& error,
                     const v1::PingReqResponse& response, Now now, bool other_answered = false);
  void FillSync(v1::SyncRequest* request);
  void OnSyncDone(const std::string& target, const v1::SyncRequest& request,
                  const std::string& error, const v1::SyncResponse& response, Now now);

  // Server side: "" when the request was taken, else why it is refused (FAILED_PRECONDITION).
  std::string OnPing(const v1::PingRequest& request, v1::PingResponse* response, Now now);
  // A PingReq taken: the transport then pings `*dial` (the member's own id, never the string the
  // request gave) and calls FillPingReqAnswer.
  std::string OnPingReq(const v1::PingReqRequest& request, Now now, std::string* dial = nullptr);
  void FillPingReqAnswer(bool reached, const std::string& error, v1::PingReqResponse* response);
  // Names peers call themselves by, other than the address they were reached at (bounded by the
  // members: one per member).
  size_t alias_count() const { return aliases_.size(); }
  std::string OnSync(const v1::SyncRequest& request, v1::SyncResponse* response, Now now);

  // Why a peer's header is not for this node, in words; "" when it is. The words never say
  // this node's cluster name: they go back to the sender.
  std::string CheckHeader(const v1::Header& header, double now_unix) const;
  // A message from `address` (its transport address) was refused (`refusal`, `why`): counted,
  // and logged once a minute per address and reason.
  void NoteRefusal(Refusal refusal, const std::string& address, const std::string& why, Now now);

  // A snapshot for readers, and whether something changed since the last one.
  std::shared_ptr<ExchangeSnapshot> Snapshot(Now now);
  bool dirty() const { return dirty_; }
  const ExchangeStats& stats() const { return stats_; }
  const Membership& membership() const { return membership_; }
  const NodeRecords& records() const { return records_; }
  const ExchangeOptions& options() const { return options_; }
  // Log lines since the last call (member status changes, peers' errors).
  std::vector<std::string> TakeLog();
  // This node leaves: the goodbye rides on the next messages.
  void Leave();
  // Who sends: every exchange message starts with this header.
  void FillHeader(v1::Header* header) const;

 private:
  void Drain();
  void FillGossip(const std::string& target, v1::Gossip* gossip, bool fresh_only = false);
  std::string Refuse(const v1::Header& header, size_t bytes, Now now);
  std::string Canonical(const std::string& node) const;
  void Contact(const v1::Header& header, const std::string& target, double now_s);
  void ApplyGossip(const v1::Gossip& gossip, const std::string& from, Now now);
  void NoteError(const std::string& peer, const std::string& error);
  // Why a record from gossip cannot be true ("" when it can); whether a member update can.
  std::string Implausible(const v1::NodeRecord& record, Now now) const;
  bool Plausible(const v1::MemberUpdate& update, Now now) const;

  struct Indirect {
    int outstanding = 0;
    bool reached = false;
    bool helper_answered = false;  // Some helper answered (reached or not): this node hears.
  };

  const ExchangeOptions options_;
  Membership membership_;
  NodeRecords records_;
  BroadcastQueue queue_;
  OwnRecord own_;
  ExchangeStats stats_;
  std::map<std::string, Indirect> indirect_;
  std::map<std::string, double> probe_sent_s_;  // When each member was last probed (monotonic).
  std::map<std::string, std::string> aliases_;
  std::map<std::string, std::string> last_error_;  // Bounded (NoteError).
  std::map<std::string, double> refusal_logged_;   // Address and reason: when logged (unix).
  std::vector<std::string> log_;
  bool joined_ = false;
  bool dirty_ = true;
  std::string join_cursor_;
  std::string sync_cursor_;
};

}  // namespace trainscope::sidecar
