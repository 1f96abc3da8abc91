// The exchange protocol without its transport; see exchange_core.h.
#include "trainscope/sidecar/exchange_core.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "trainscope/common/cluster_spec.h"
#include "trainscope/sidecar/api.h"

namespace trainscope::sidecar {
namespace {

constexpr int kMaxGossipItems = 4096;  // Records or member updates in one message.
constexpr size_t kSyncAnswerBytes = 1 << 20;
// How far ahead of this node's clock a peer's start time (its generation) may be.
constexpr double kMaxClockAheadS = 60;
constexpr uint64_t kMaxIncarnation = uint64_t{1} << 40;

// The hosts of the peers that local tasks wait on for a while or fail to reach over the network.
std::vector<std::string> HostsInTrouble(const std::vector<TaskView>& views) {
  std::vector<std::string> hosts;
  auto add = [&](const std::string& address) {
    auto hp = ParseHostPort(address);
    if (hp.ok()) hosts.push_back(hp->host);
  };
  for (const TaskView& v : views) {
    for (const PeerInfo& p : v.peers) {
      if (FailsToReach(p) && p.network_failure) add(p.address);
    }
    for (const CallInFlight& c : v.inflight) {
      if (!WaitsLong(c)) continue;
      for (const PeerInfo& p : v.peers) {
        if (p.peer == c.peer) add(p.address);
      }
    }
  }
  return hosts;
}

v1::Header WithNode(const v1::Header& h, const std::string& node) {
  v1::Header copy = h;
  copy.set_node(node);
  return copy;
}

}  // namespace

ExchangeCore::ExchangeCore(ExchangeOptions options, uint64_t generation, Now now)
    : options_(std::move(options)),
      membership_(options_.self, options_.hostname, generation, options_.peers, options_.membership,
                  now.s, options_.seed != 0 ? options_.seed : generation),
      own_(options_.self, options_.hostname, generation, options_.reason_refresh_s) {
  stats_.authenticated = options_.keys != nullptr || options_.mutual_tls;
}

bool ExchangeCore::UpdateOwn(const std::vector<TaskView>& views, Now now) {
  for (const std::string& host : HostsInTrouble(views)) membership_.ProbeSoon(host, now.s);
  const bool isolated = membership_.IsolatedSince(now.s).has_value();
  auto record = own_.Update(views, membership_.UnreachableDirectly(), isolated, now.unix);
  if (!record) return false;
  std::string why;
  records_.Apply(*record, now.unix, &why);
  queue_.Put(*record);
  dirty_ = true;
  return true;
}

std::vector<std::string> ExchangeCore::NewsTargets() {
  return membership_.GossipTargets(options_.gossip_fanout);
}

ExchangeCore::Period ExchangeCore::OnPeriod(Now now, bool sync_due) {
  Period p;
  membership_.Tick(now.s);
  Drain();
  p.probe = membership_.NextProbeTarget();
  if (p.probe) probe_sent_s_[*p.probe] = now.s;
  if (!queue_.empty()) p.gossip = membership_.GossipTargets(options_.gossip_fanout);
  if (sync_due || !joined_) {
    auto targets = membership_.GossipTargets(1);
    if (!targets.empty()) p.sync = targets[0];
  }
  return p;
}

std::optional<std::string> ExchangeCore::UrgentProbe(Now now) {
  std::optional<std::string> target = membership_.TakeSoonTarget();
  if (target) probe_sent_s_[*target] = now.s;
  return target;
}

bool ExchangeCore::HeardSince(const std::string& id, double since_s) const {
  const Member* m = membership_.Find(id);
  return m != nullptr && m->last_contact >= since_s;
}

int ExchangeCore::ProbeTimeoutMs(const std::string& target) const {
  int ms = options_.probe_timeout_ms * membership_.HealthMultiplier();
  const Member* m = membership_.Find(target);
  if (m == nullptr || !m->heard) ms = std::max(ms, 1000);
  return ms;
}

double ExchangeCore::PeriodSeconds() const {
  return options_.membership.period_s * membership_.HealthMultiplier();
}

void ExchangeCore::FillHeader(v1::Header* h) const {
  h->set_protocol_version(kExchangeProtocolVersion);
  h->set_cluster(options_.cluster);
  membership_.FillHeader(h);
}

void ExchangeCore::FillGossip(const std::string& target, v1::Gossip* gossip, bool fresh_only) {
  queue_.Fill(gossip, options_.gossip_budget_bytes, membership_.RetransmitLimit(), fresh_only);
  if (auto hint = membership_.HintFor(target)) *gossip->add_members() = *hint;
}

void ExchangeCore::FillPing(const std::string& target, v1::PingRequest* request, bool relay) {
  FillHeader(request->mutable_header());
  request->set_target(target);
  FillGossip(target, request->mutable_gossip(), relay);
  stats_.messages_sent++;
  stats_.bytes_sent += static_cast<int64_t>(request->ByteSizeLong());
}

std::vector<std::string> ExchangeCore::OnPingDone(const std::string& target, bool probe,
                                                  const std::string& error,
                                                  const v1::PingResponse& response, Now now,
                                                  bool other_answered) {
  std::string why = error.empty() ? CheckHeader(response.header(), now.unix) : error;
  if (why.empty()) {
    stats_.messages_received++;
    stats_.bytes_received += static_cast<int64_t>(response.ByteSizeLong());
    Contact(response.header(), target, now.s);
    ApplyGossip(response.gossip(), target, now);
    if (probe) membership_.OnProbeAnswered();
    return {};
  }
  stats_.errors++;
  NoteError(target, why);
  // A sidecar of another cluster or protocol (its header refused) answered too.
  other_answered |= error.empty();
  if (!probe) {
    // Refused by a member this node had reached before: its sidecar may be down. Probe it next,
    // not in its turn. (Never reached: it may not have started, and this node's channel may
    // still hold the refusal of an attempt from before it did.)
    const Member* m = membership_.Find(target);
    if (SaysRefused(why) && m != nullptr && m->reached()) {
      membership_.ProbeMemberSoon(target, now.s);
    }
    if (other_answered) {
      membership_.OnOtherAnswer(target, now.s, why);
    } else {
      membership_.OnUnanswered(target, why);
    }
    return {};
  }
  // Heard from it directly since this probe went out (a message of its own came in): it is
  // alive, and what failed may be this node's connection to it, whose attempt began while the
  // network was down (a lost SYN is sent again only after 1 s). Excused once (Membership::Excuse):
  // if the next probe fails too, this node's messages do not get through (a one-way cut).
  auto sent = probe_sent_s_.find(target);
  if (sent != probe_sent_s_.end() && HeardSince(target, sent->second) &&
      membership_.Excuse(target)) {
    return {};
  }
  // A failed probe alone says nothing of this node's health (the target may be down): local
  // health falls when the helpers do not answer either (Lifeguard's missed nacks), below.
  const Member* m = membership_.Find(target);
  const bool heard = m != nullptr && m->heard;
  membership_.OnDirectFailure(target, why, now.s);
  if (other_answered) membership_.OnOtherAnswer(target, now.s, why);
  std::vector<std::string> helpers =
      membership_.IndirectHelpers(target, options_.membership.indirect_probes);
  if (helpers.empty()) {
    if (heard && !other_answered) membership_.OnProbeMissed();
    membership_.OnIndirectResult(target, false, now.s);
    Drain();
  } else {
    indirect_[target].outstanding += static_cast<int>(helpers.size());
  }
  return helpers;
}

void ExchangeCore::FillPingReq(const std::string& target, v1::PingReqRequest* request) {
  FillHeader(request->mutable_header());
  request->set_target(target);
  request->set_timeout_ms(options_.indirect_timeout_ms);
  queue_.Fill(request->mutable_gossip(), options_.gossip_budget_bytes,
              membership_.RetransmitLimit());
  stats_.messages_sent++;
  stats_.bytes_sent += static_cast<int64_t>(request->ByteSizeLong());
}

void ExchangeCore::OnPingReqDone(const std::string& helper, const std::string& target,
                                 const std::string& error, const v1::PingReqResponse& response,
                                 Now now, bool other_answered) {
  std::string why = error.empty() ? CheckHeader(response.header(), now.unix) : error;
  if (why.empty()) {
    stats_.messages_received++;
    stats_.bytes_received += static_cast<int64_t>(response.ByteSizeLong());
    Contact(response.header(), helper, now.s);
    ApplyGossip(response.gossip(), helper, now);
  } else {
    stats_.errors++;
    if (other_answered || error.empty()) {
      membership_.OnOtherAnswer(helper, now.s, why);
    } else {
      membership_.OnUnanswered(helper, why);
    }
  }
  Indirect& probe = indirect_[target];
  probe.reached |= why.empty() && response.reached();
  probe.helper_answered |= why.empty();
  if (--probe.outstanding <= 0) {
    if (probe.helper_answered) {
      membership_.OnProbeAnswered();
    } else {
      membership_.OnProbeMissed();  // Nobody answers this node: the trouble may be its own.
    }
    membership_.OnIndirectResult(target, probe.reached, now.s);
    indirect_.erase(target);
    Drain();
  }
}

void ExchangeCore::FillSync(v1::SyncRequest* request) {
  FillHeader(request->mutable_header());
  if (!joined_) {
    // A full pull in pages: this node has just started and knows nothing yet.
    request->set_all(true);
    request->set_after(join_cursor_);
    request->set_max_records(512);
  } else {
    sync_cursor_ = records_.FillSlice(sync_cursor_, options_.sync_slice, request);
  }
  stats_.messages_sent++;
  stats_.bytes_sent += static_cast<int64_t>(request->ByteSizeLong());
}

void ExchangeCore::OnSyncDone(const std::string& target, const v1::SyncRequest& request,
                              const std::string& error, const v1::SyncResponse& response, Now now) {
  std::string why = error.empty() ? CheckHeader(response.header(), now.unix) : error;
  if (!why.empty()) {
    stats_.errors++;
    return;
  }
  stats_.messages_received++;
  stats_.bytes_received += static_cast<int64_t>(response.ByteSizeLong());
  Contact(response.header(), target, now.s);
  v1::Gossip records;
  for (int i = 0; i < std::min(response.records_size(), kMaxGossipItems); ++i) {
    *records.add_records() = response.records(i);
  }
  ApplyGossip(records, target, now);
  if (request.all()) {
    if (response.more() && response.records_size() > 0) {
      join_cursor_ = response.records(response.records_size() - 1).node();
    } else {
      joined_ = true;
    }
  }
}

std::string ExchangeCore::OnPing(const v1::PingRequest& request, v1::PingResponse* response,
                                 Now now) {
  stats_.messages_received++;
  stats_.bytes_received += static_cast<int64_t>(request.ByteSizeLong());
  if (std::string why = Refuse(request.header(), request.ByteSizeLong(), now); !why.empty())
    return why;
  const std::string from = Canonical(request.header().node());
  membership_.OnContact(WithNode(request.header(), from), now.s, /*reply=*/false);
  ApplyGossip(request.gossip(), from, now);
  FillHeader(response->mutable_header());
  FillGossip(from, response->mutable_gossip());
  stats_.messages_sent++;
  stats_.bytes_sent += static_cast<int64_t>(response->ByteSizeLong());
  return "";
}

std::string ExchangeCore::OnPingReq(const v1::PingReqRequest& request, Now now, std::string* dial) {
  stats_.messages_received++;
  stats_.bytes_received += static_cast<int64_t>(request.ByteSizeLong());
  if (std::string why = Refuse(request.header(), request.ByteSizeLong(), now); !why.empty())
    return why;
  if (request.target().empty() || request.target().size() > 256) return "sent no probe target";
  // Only members are probed on another's behalf: a PingReq cannot make this node dial anywhere.
  const Member* target = membership_.Find(Canonical(request.target()));
  if (target == nullptr) {
    return absl::StrCat("sidecar ", options_.self, " probes only members of its cluster, and ",
                        CleanText(request.target(), 80), " is not one");
  }
  if (dial != nullptr) *dial = target->id;
  const std::string from = Canonical(request.header().node());
  membership_.OnContact(WithNode(request.header(), from), now.s, /*reply=*/false);
  ApplyGossip(request.gossip(), from, now);
  return "";
}

void ExchangeCore::FillPingReqAnswer(bool reached, const std::string& error,
                                     v1::PingReqResponse* response) {
  FillHeader(response->mutable_header());
  response->set_reached(reached);
  if (!reached) response->set_error(error);
  stats_.messages_sent++;
  stats_.bytes_sent += static_cast<int64_t>(response->ByteSizeLong());
}

std::string ExchangeCore::OnSync(const v1::SyncRequest& request, v1::SyncResponse* response,
                                 Now now) {
  stats_.messages_received++;
  stats_.bytes_received += static_cast<int64_t>(request.ByteSizeLong());
  if (std::string why = Refuse(request.header(), request.ByteSizeLong(), now); !why.empty())
    return why;
  if (request.known_size() > kMaxGossipItems) return "sent too many digests";
  membership_.OnContact(WithNode(request.header(), Canonical(request.header().node())), now.s,
                        /*reply=*/false);
  FillHeader(response->mutable_header());
  records_.Answer(request, kSyncAnswerBytes, response);
  stats_.messages_sent++;
  stats_.bytes_sent += static_cast<int64_t>(response->ByteSizeLong());
  return "";
}

std::string ExchangeCore::CheckHeader(const v1::Header& h, double now_unix) const {
  if (h.protocol_version() != kExchangeProtocolVersion) {
    return absl::StrCat("speaks exchange protocol ", h.protocol_version(), ", this sidecar ",
                        kExchangeProtocolVersion, ": run the same trainscope version");
  }
  if (h.cluster() != options_.cluster) {
    return "belongs to another cluster (--cluster_name differs)";
  }
  if (h.node().empty() || h.node().size() > 256) return "sent no node id";
  // A generation is a sidecar's start time: one from the future is a lie (or a clock far off),
  // and would outrank the node's real one.
  if (static_cast<double>(h.generation()) / 1e9 > now_unix + kMaxClockAheadS) {
    return "claims a start time in the future (its clock is off, or the message is forged)";
  }
  return "";
}

std::string ExchangeCore::Refuse(const v1::Header& h, size_t bytes, Now now) {
  std::string why = CheckHeader(h, now.unix);
  if (why.empty() && bytes > options_.max_message_bytes) {
    why = absl::StrCat("sent ", bytes, " bytes (at most ", options_.max_message_bytes, ")");
  }
  if (why.empty()) return "";
  stats_.errors++;
  stats_.refused[static_cast<size_t>(Refusal::kHeader)]++;
  NoteError(CleanText(h.node(), 256), why);
  return absl::StrCat("sidecar ", options_.self, " refuses ", CleanText(h.node(), 80), ": it ",
                      why);
}

void ExchangeCore::NoteRefusal(Refusal refusal, const std::string& address, const std::string& why,
                               Now now) {
  stats_.errors++;
  stats_.refused[static_cast<size_t>(refusal)]++;
  // The address without its port (a new connection, a new port), and the reason.
  std::string key =
      absl::StrCat(address.substr(0, address.rfind(':')), " ", std::string(RefusalName(refusal)));
  auto it = refusal_logged_.find(key);
  if (it != refusal_logged_.end() && now.unix - it->second < 60) return;
  if (refusal_logged_.size() >= 1024) refusal_logged_.clear();
  refusal_logged_[key] = now.unix;
  log_.push_back(absl::StrCat("refused an exchange message from ", CleanText(address, 80), ": it ",
                              why, " (", std::string(RefusalName(refusal)),
                              "; told once a minute)"));
}

std::string ExchangeCore::Canonical(const std::string& node) const {
  auto it = aliases_.find(node);
  return it == aliases_.end() ? node : it->second;
}

void ExchangeCore::Contact(const v1::Header& h, const std::string& target, double now_s) {
  if (h.node() != target && !aliases_.count(h.node())) {
    log_.push_back(absl::StrCat(
        "peer sidecar at ", target, " calls itself ", CleanText(h.node(), 80), ": using ", target,
        " (start it with --advertise_address ", target, " or list it by its own name)"));
    // One name per member (a peer that keeps renaming itself replaces its alias, it cannot
    // grow the map), and no more names than members.
    std::erase_if(aliases_, [&](const auto& a) { return a.second == target; });
    if (aliases_.size() < membership_.members().size() + 1) aliases_[h.node()] = target;
  }
  membership_.OnContact(WithNode(h, target), now_s);
}

void ExchangeCore::ApplyGossip(const v1::Gossip& g, const std::string& from, Now now) {
  int n = 0;
  for (const v1::NodeRecord& r : g.records()) {
    if (++n > kMaxGossipItems) break;
    if (r.node() == options_.self) continue;  // Only this node writes its own record.
    v1::NodeRecord copy = r;
    copy.set_node(Canonical(r.node()));
    std::string why = Implausible(copy, now);
    const NodeRecords::Applied applied =
        why.empty() ? records_.Apply(copy, now.unix, &why) : NodeRecords::Applied::kRefused;
    switch (applied) {
      case NodeRecords::Applied::kNewer:
        stats_.records_learned++;
        queue_.Put(copy);  // Spread it further (epidemic).
        dirty_ = true;
        break;
      case NodeRecords::Applied::kRefused:
        stats_.records_refused++;
        NoteError(from, absl::StrCat("sent ", why));
        break;
      case NodeRecords::Applied::kNotNewer:
        break;
    }
  }
  n = 0;
  for (const v1::MemberUpdate& u : g.members()) {
    if (++n > kMaxGossipItems) break;
    v1::MemberUpdate copy = u;
    copy.set_node(Canonical(u.node()));
    if (!Plausible(copy, now)) continue;
    membership_.OnUpdate(copy, now.s, from);
  }
  Drain();
}

std::string ExchangeCore::Implausible(const v1::NodeRecord& r, Now now) const {
  if (membership_.Find(r.node()) == nullptr) {
    return absl::StrCat("a record of ", CleanText(r.node(), 80), ", which is not a member");
  }
  if (static_cast<double>(r.generation()) / 1e9 > now.unix + kMaxClockAheadS ||
      r.made_at() > now.unix + kMaxClockAheadS) {
    return absl::StrCat("a record of ", r.node(), " dated in the future");
  }
  return "";
}

bool ExchangeCore::Plausible(const v1::MemberUpdate& u, Now now) const {
  // Members come from the spec and --peer_sidecars only; a start time from the future, or an
  // incarnation no refutation count reaches, is a lie that would outrank the truth.
  const bool member = u.node() == options_.self || membership_.Find(u.node()) != nullptr;
  return member && static_cast<double>(u.generation()) / 1e9 <= now.unix + kMaxClockAheadS &&
         u.incarnation() < kMaxIncarnation;
}

void ExchangeCore::Drain() {
  for (const v1::MemberUpdate& u : membership_.TakeUpdates()) queue_.Put(u);
  for (std::string& e : membership_.TakeEvents()) {
    log_.push_back("peer sidecar " + e);
    dirty_ = true;
  }
}

void ExchangeCore::NoteError(const std::string& peer, const std::string& error) {
  if (last_error_.size() >= 1024 && !last_error_.count(peer)) last_error_.clear();
  std::string& last = last_error_[peer];
  if (last == error) return;
  last = error;
  log_.push_back(absl::StrCat("peer sidecar ", peer, ": ", error));
}

std::vector<std::string> ExchangeCore::TakeLog() {
  std::vector<std::string> out;
  out.swap(log_);
  return out;
}

void ExchangeCore::Leave() {
  membership_.Leave();
  Drain();
}

std::shared_ptr<ExchangeSnapshot> ExchangeCore::Snapshot(Now now) {
  auto s = std::make_shared<ExchangeSnapshot>();
  s->self = options_.self;
  s->hostname = options_.hostname;
  s->members.reserve(membership_.members().size());
  const double to_unix = now.unix - now.s;
  for (const auto& [id, m] : membership_.members()) {
    Member copy = m;
    copy.status_since += to_unix;
    if (copy.last_contact >= 0) copy.last_contact += to_unix;
    if (copy.back_since >= 0) copy.back_since += to_unix;
    s->members.push_back(std::move(copy));
  }
  s->records = records_.all();
  if (auto since = membership_.IsolatedSince(now.s)) s->isolated_since_unix = *since + to_unix;
  s->ever_contacted = membership_.ever_contacted();
  if (membership_.back_since() >= 0) s->back_since_unix = membership_.back_since() + to_unix;
  s->made_at_unix = now.unix;
  s->stats = stats_;
  dirty_ = false;
  return s;
}

}  // namespace trainscope::sidecar
