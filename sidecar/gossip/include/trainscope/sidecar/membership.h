#pragma once
// Who of the cluster's sidecars is alive, as SWIM (Das, Gupta, Motivala 2002) decides it: one
// direct probe per period in shuffled round-robin order; a probe that fails is retried through
// k other members (indirect probes), so a broken link between two nodes is not taken for a dead
// node; a member that fails both is suspected, and confirmed silent when nobody refutes the
// suspicion in time. Status changes become updates for the gossip to spread; a member that
// hears it is suspected raises its incarnation and says it is alive.
//
// Also what SWIM alone does not say: which members this node reaches only indirectly (a cut
// link), and whether this node itself is cut off from every other (no exchange with anyone for
// a while, though it kept trying).
//
// A pure state machine: no I/O, time injected (monotonic seconds). Not thread-safe: one owner
// (the peer exchange) calls it under its lock.

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "trainscope/sidecar/v1/sidecar.pb.h"

namespace trainscope::sidecar {

struct MembershipOptions {
  double period_s = 0.2;    // One direct probe per period.
  int indirect_probes = 3;  // Members asked to probe a target that failed a direct probe.
  // Suspicion lasts max(suspicion_min_s, suspicion_mult * log10(members + 1) * period_s).
  double suspicion_min_s = 0.5;
  double suspicion_mult = 4;
  // Each other member that independently suspects the same member shortens the suspicion
  // (Lifeguard): timeout / (1 + confirmations), but never below this.
  double suspicion_floor_s = 0.25;
  // No exchange with any member for this long, while at least min(3, members) distinct members
  // were tried: this node is cut off.
  double isolation_after_s = 0.6;
  // Direct probes of a member that must fail in a row (while it answers through others) before
  // the link to it counts as cut.
  int link_cut_after = 1;
  // Local health (Lifeguard): each probe this node sends that gets no answer raises a score, each
  // answered one lowers it (0..max_local_health); the probe period and timeout are multiplied by
  // 1 + score. A node too loaded to hear answers in time slows itself down instead of flooding
  // the cluster with suspicions and indirect probes.
  int max_local_health = 8;
  // Gossip retransmissions of one update: mult * ceil(log10(members + 1)), at least 3. At 4
  // (memberlist's default) one node in 64 misses a change now and then and waits for
  // anti-entropy; at 6 none did in the scale bench's simulation (docs/sidecar.md).
  int retransmit_mult = 6;
};

enum class MemberStatus { kAlive, kSuspect, kSilent, kLeft };
std::string_view MemberStatusName(MemberStatus status);

// True when `error` (a failed call's words) says the address refused the connection: its machine
// answers, and nothing listens on the port.
bool SaysRefused(std::string_view error);

struct Member {
  std::string id;  // host:port of its exchange.
  std::string hostname;
  uint64_t generation = 0;
  uint64_t incarnation = 0;
  MemberStatus status = MemberStatus::kAlive;
  bool heard = false;        // Anything ever came from it (directly or by gossip of its record).
  double status_since = 0;   // Monotonic seconds.
  double last_contact = -1;  // Last direct exchange with it, either way.
  double back_since = -1;    // When it was last alive again after being doubted, else -1.
  int direct_failures = 0;   // Consecutive failed direct probes from this node.
  double failed_at = -1;     // When the last of them failed (monotonic).
  // A failed probe of it was excused (its own message had come in meanwhile, see Excuse) since
  // it last answered one of this node's calls.
  bool excused = false;
  bool reached_indirectly = false;  // Its last failed direct probe was answered through others.
  std::string last_error;           // Of the last failed direct probe.
  std::vector<std::string> confirmations;  // Others that suspect it too, while suspect.

  // This node has had a direct exchange with it, ever.
  bool reached() const { return last_contact >= 0; }
};

class Membership {
 public:
  // `self` is this node's id; `peers` the other members' ids (self is dropped from it).
  Membership(std::string self, std::string hostname, uint64_t generation,
             std::vector<std::string> peers, MembershipOptions options, double now_s,
             uint64_t seed);

  // The member to probe directly now, in shuffled round-robin order (left members skipped);
  // nullopt when there is none.
  std::optional<std::string> NextProbeTarget();
  // The member whose exchange is on `host` (a task's host): probe it next, ahead of the round,
  // unless it was put ahead less than `min_gap_s` ago. For a node a local task waits on or fails
  // to reach: whether that node is cut off (no answer through others either) or only the link to
  // it (answered through others) is then known within one probe, not one round (N periods).
  void ProbeSoon(const std::string& host, double now_s, double min_gap_s = 1.0);
  // The same for the member `id` itself (a call to it other than a probe was refused).
  void ProbeMemberSoon(const std::string& id, double now_s, double min_gap_s = 1.0);
  // The member put ahead by ProbeSoon, if any, taken now: its probe need not wait for the next
  // period (the caller sends it at once).
  std::optional<std::string> TakeSoonTarget();
  // Up to `k` members to ask for an indirect probe of `target`: alive, not the target.
  std::vector<std::string> IndirectHelpers(const std::string& target, int k);
  // Up to `k` random members to push gossip to (alive or suspect first).
  std::vector<std::string> GossipTargets(int k);

  // A direct exchange with `header.node` succeeded: its answer to this node's call (`reply`: the
  // way there and back works), or a request from it (the way from it works; a one-way cut may
  // still drop what this node sends, so its failed probes stand).
  void OnContact(const v1::Header& header, double now_s, bool reply = true);
  // A probe of `id` failed although its own message came in since the probe went out: this
  // node's connection to it may be one begun while the network was down. True (do not count the
  // failure) once; again only after it has answered one of this node's calls, so that a one-way
  // cut (its messages arrive, this node's do not) is found by the next probe.
  bool Excuse(const std::string& id);
  // This node's direct probe of `id` failed with `error`.
  void OnDirectFailure(const std::string& id, const std::string& error, double now_s);
  // Any other exchange with `id` failed (asking it to probe another, pushing news to it): not a
  // probe of it, but one more member this node tried and did not reach (a cut-off node whose
  // probes have slowed down, local health, still finds out within isolation_after_s).
  // `error`, when given, is the newest word on a member already in doubt (see OnOtherAnswer).
  void OnUnanswered(const std::string& id, const std::string& error = "");
  // Something at `id`'s address answered, but not as a sidecar of this cluster (connection
  // refused, another protocol, another cluster, a TLS refusal): no contact, but proof that the
  // network reaches it, so this node is not cut off. When `id` is already in doubt (a failed
  // probe, suspect, silent), `error` becomes its last error: a sidecar killed mid-probe fails
  // that probe with "connection reset", and the "connection refused" that follows is what says
  // its machine answers and only the sidecar is down.
  void OnOtherAnswer(const std::string& id, double now_s, const std::string& error = "");
  // The indirect probes of `id` came back: reached by at least one helper, or by none. Not
  // reached, and its port refused this node's probe: its sidecar is down (silent) at once, with
  // no suspicion to wait out: its machine answered, and nothing there can refute it.
  void OnIndirectResult(const std::string& id, bool reached, double now_s);
  // Gossip about a member's status, as `from` (the member whose message carried it) tells it.
  void OnUpdate(const v1::MemberUpdate& update, double now_s, const std::string& from = "");
  // Suspicions that timed out become silent. Call every period.
  void Tick(double now_s);
  // This node is stopping: tell the others.
  void Leave();
  // A direct probe of this node got its answer, or none (local health, above).
  void OnProbeAnswered();
  void OnProbeMissed();
  // 1 + the local health score: how much slower than configured this node probes.
  int HealthMultiplier() const { return 1 + local_health_; }

  // Updates to gossip (each replaces older news about the same member). Drained by the caller
  // through the broadcast queue.
  std::vector<v1::MemberUpdate> TakeUpdates();
  // What this node holds against `id` when that is suspicion or silence: sent back with every
  // answer to `id`, so that it learns it is doubted and refutes. nullopt when `id` is alive here.
  std::optional<v1::MemberUpdate> HintFor(const std::string& id) const;
  // Status changes since the last call, in words, for the log.
  std::vector<std::string> TakeEvents();

  // When this node got cut off from every other node, or nullopt when it is not. Only after it
  // reached some member once: before that, the others may just not have started yet.
  std::optional<double> IsolatedSince(double now_s) const;
  bool ever_contacted() const { return ever_contacted_; }
  // When this node last heard again after a silence of 3 periods or more (its own link was down
  // or flapped, short of it finding itself cut off), else -1.
  double back_since() const { return back_since_; }
  // Members this node reaches only through others (a cut link), for its record.
  std::vector<std::string> UnreachableDirectly() const;

  const std::map<std::string, Member>& members() const { return members_; }
  const Member* Find(const std::string& id) const;
  const std::string& self() const { return self_; }
  uint64_t incarnation() const { return incarnation_; }
  uint64_t generation() const { return generation_; }
  int RetransmitLimit() const;
  double SuspicionTimeout() const;
  // The header every message of this node carries (protocol version and cluster set by caller).
  void FillHeader(v1::Header* header) const;

 private:
  Member& Get(const std::string& id);
  void SetStatus(Member& m, MemberStatus status, double now_s, bool announce);
  void Announce(const Member& m);
  void Refute(uint64_t at_least);
  // What another node says of this one: a doubt is refuted.
  void OnUpdateOfSelf(const v1::MemberUpdate& update);
  // A later call to `id` failed with `error`: its last error, when it is already in doubt.
  void NoteLaterError(const std::string& id, const std::string& error);
  // This node heard from nobody since `since_s` (cut off, or its link flapped) and reaches a
  // member again: what it came to doubt meanwhile says nothing about the others. Those members
  // are alive again in its view until its probes say otherwise: else it would page a node cut
  // off that was never cut off.
  void ForgiveDoubtsSince(double since_s, double now_s);

  std::string self_;
  std::string hostname_;
  uint64_t generation_;
  uint64_t incarnation_ = 0;
  MembershipOptions options_;
  std::map<std::string, Member> members_;  // Fixed at construction.
  Member sink_;                            // Get's answer for an id that is not a member.
  std::vector<std::string> order_;         // Probe order; reshuffled at each round's end.
  std::vector<std::string> soon_;          // Probed before the round's next (ProbeSoon).
  std::map<std::string, double> soon_at_;  // When each was last put ahead.
  size_t next_ = 0;
  std::mt19937_64 rng_;
  std::map<std::string, v1::MemberUpdate> pending_;  // News to gossip, by member.
  std::vector<std::string> events_;
  // Isolation: the last direct exchange with any member, and the distinct members tried since.
  double last_any_contact_;
  double last_other_answer_ = -1e18;  // OnOtherAnswer.
  bool ever_contacted_ = false;
  double back_since_ = -1;
  int local_health_ = 0;
  std::map<std::string, bool> tried_since_contact_;
  double started_s_;
};

}  // namespace trainscope::sidecar
