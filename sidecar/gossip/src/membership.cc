// SWIM membership as a pure state machine; see membership.h.
#include "trainscope/sidecar/membership.h"

#include <algorithm>
#include <cmath>

#include "trainscope/common/cluster_spec.h"

namespace trainscope::sidecar {
namespace {

using v1::MemberUpdate;

// More members than any cluster we design for; past it, strangers are not added.
// How long before its last contact a node's doubts are forgiven with those of its silence.
constexpr double kDoubtsBeforeSilenceS = 2.0;

MemberUpdate::Status ToWire(MemberStatus s) {
  switch (s) {
    case MemberStatus::kAlive:
      return MemberUpdate::ALIVE;
    case MemberStatus::kSuspect:
      return MemberUpdate::SUSPECT;
    case MemberStatus::kSilent:
      return MemberUpdate::SILENT;
    case MemberStatus::kLeft:
      return MemberUpdate::LEFT;
  }
  return MemberUpdate::STATUS_UNSPECIFIED;
}

}  // namespace

bool SaysRefused(std::string_view error) { return error.find("refused") != std::string_view::npos; }

std::string_view MemberStatusName(MemberStatus status) {
  switch (status) {
    case MemberStatus::kAlive:
      return "alive";
    case MemberStatus::kSuspect:
      return "suspect";
    case MemberStatus::kSilent:
      return "silent";
    case MemberStatus::kLeft:
      return "left";
  }
  return "";
}

Membership::Membership(std::string self, std::string hostname, uint64_t generation,
                       std::vector<std::string> peers, MembershipOptions options, double now_s,
                       uint64_t seed)
    : self_(std::move(self)),
      hostname_(std::move(hostname)),
      generation_(generation),
      options_(options),
      rng_(seed),
      last_any_contact_(now_s),
      started_s_(now_s) {
  for (std::string& id : peers) {
    if (id == self_ || members_.count(id)) continue;
    Member m;
    m.id = id;
    m.status_since = now_s;
    members_.emplace(id, std::move(m));
  }
}

const Member* Membership::Find(const std::string& id) const {
  auto it = members_.find(id);
  return it == members_.end() ? nullptr : &it->second;
}

Member& Membership::Get(const std::string& id) {
  auto it = members_.find(id);
  if (it != members_.end()) return it->second;
  // Members come from the spec and --peer_sidecars only: what others say of anyone else, or a
  // message from a node of no list, lands in a sink that is never probed nor shown.
  sink_ = Member{};
  return sink_;
}

int Membership::RetransmitLimit() const {
  double n = static_cast<double>(members_.size() + 1);
  return std::max(3, options_.retransmit_mult * static_cast<int>(std::ceil(std::log10(n + 1))));
}

double Membership::SuspicionTimeout() const {
  double n = static_cast<double>(members_.size() + 1);
  return std::max(options_.suspicion_min_s,
                  options_.suspicion_mult * std::log10(n + 1) * options_.period_s);
}

void Membership::FillHeader(v1::Header* header) const {
  header->set_node(self_);
  header->set_generation(generation_);
  header->set_incarnation(incarnation_);
  header->set_hostname(hostname_);
}

void Membership::ProbeSoon(const std::string& host, double now_s, double min_gap_s) {
  for (const auto& [id, m] : members_) {
    auto hp = ParseHostPort(id);
    if (!hp.ok() || hp->host != host || m.status == MemberStatus::kLeft) continue;
    ProbeMemberSoon(id, now_s, min_gap_s);
    return;
  }
}

void Membership::ProbeMemberSoon(const std::string& id, double now_s, double min_gap_s) {
  auto it = members_.find(id);
  if (it == members_.end() || it->second.status == MemberStatus::kLeft) return;
  auto [at, fresh] = soon_at_.try_emplace(id, now_s);
  if (!fresh && now_s - at->second < min_gap_s) return;
  at->second = now_s;
  if (std::find(soon_.begin(), soon_.end(), id) == soon_.end()) soon_.push_back(id);
}

std::optional<std::string> Membership::TakeSoonTarget() {
  while (!soon_.empty()) {
    std::string id = std::move(soon_.front());
    soon_.erase(soon_.begin());
    auto it = members_.find(id);
    if (it != members_.end() && it->second.status != MemberStatus::kLeft) return id;
  }
  return std::nullopt;
}

std::optional<std::string> Membership::NextProbeTarget() {
  if (auto soon = TakeSoonTarget()) return soon;
  for (int pass = 0; pass < 2; ++pass) {
    while (next_ < order_.size()) {
      const std::string& id = order_[next_++];
      auto it = members_.find(id);
      if (it != members_.end() && it->second.status != MemberStatus::kLeft) return id;
    }
    // A new round: every member once, in a new random order (SWIM's round-robin probing, so
    // each member is probed within a bounded time).
    order_.clear();
    for (const auto& [id, m] : members_) {
      if (m.status != MemberStatus::kLeft) order_.push_back(id);
    }
    std::shuffle(order_.begin(), order_.end(), rng_);
    next_ = 0;
  }
  return std::nullopt;
}

std::vector<std::string> Membership::IndirectHelpers(const std::string& target, int k) {
  std::vector<std::string> candidates;
  for (const auto& [id, m] : members_) {
    if (id != target && m.status == MemberStatus::kAlive && m.heard) candidates.push_back(id);
  }
  std::shuffle(candidates.begin(), candidates.end(), rng_);
  if (static_cast<int>(candidates.size()) > k) candidates.resize(k);
  return candidates;
}

std::vector<std::string> Membership::GossipTargets(int k) {
  std::vector<std::string> candidates;
  for (const auto& [id, m] : members_) {
    if (m.status == MemberStatus::kAlive || m.status == MemberStatus::kSuspect) {
      candidates.push_back(id);
    }
  }
  std::shuffle(candidates.begin(), candidates.end(), rng_);
  if (static_cast<int>(candidates.size()) > k) candidates.resize(k);
  return candidates;
}

void Membership::OnContact(const v1::Header& header, double now_s, bool reply) {
  if (header.node().empty() || header.node() == self_) return;
  Member& m = Get(header.node());
  if (m.id.empty()) return;
  if (header.generation() > m.generation) {
    m.generation = header.generation();
    m.incarnation = header.incarnation();
  } else if (header.generation() == m.generation) {
    m.incarnation = std::max(m.incarnation, header.incarnation());
  }
  if (!header.hostname().empty()) m.hostname = header.hostname();
  // Back after a silence longer than a few periods (this node was cut off, or its link flapped):
  // its doubts from that silence, and from just before it (its link may have been failing
  // already), get a fresh start.
  // (Not scaled by local health: a node that heard nothing has raised it to the top.)
  if (now_s - last_any_contact_ >= 3 * options_.period_s) {
    ForgiveDoubtsSince(last_any_contact_ - kDoubtsBeforeSilenceS, now_s);
    if (ever_contacted_) back_since_ = now_s;  // Not the first contact: back, not new.
  }
  m.heard = true;
  m.last_contact = now_s;
  if (reply) {
    m.direct_failures = 0;
    m.reached_indirectly = false;
    m.excused = false;
    m.last_error.clear();
  }
  // Direct evidence: it is alive for this node. (Others learn it when it refutes; the
  // exchange tells it what this node held, see HintFor.)
  SetStatus(m, MemberStatus::kAlive, now_s, /*announce=*/false);
  last_any_contact_ = now_s;
  ever_contacted_ = true;
  tried_since_contact_.clear();
}

void Membership::ForgiveDoubtsSince(double since_s, double now_s) {
  for (auto& [id, other] : members_) {
    const bool doubted =
        other.status == MemberStatus::kSuspect || other.status == MemberStatus::kSilent;
    if (!doubted || other.status_since < since_s) continue;
    other.direct_failures = 0;
    const double back_since = other.back_since;  // Forgiven, not back: this node was away.
    SetStatus(other, MemberStatus::kAlive, now_s, /*announce=*/false);
    other.back_since = back_since;
  }
}

void Membership::NoteLaterError(const std::string& id, const std::string& error) {
  auto it = members_.find(id);
  if (it == members_.end() || error.empty()) return;
  Member& m = it->second;
  if (m.direct_failures > 0 || m.status == MemberStatus::kSuspect ||
      m.status == MemberStatus::kSilent) {
    m.last_error = error;
  }
}

void Membership::OnUnanswered(const std::string& id, const std::string& error) {
  if (members_.count(id)) tried_since_contact_[id] = true;
  NoteLaterError(id, error);
}

void Membership::OnOtherAnswer(const std::string& id, double now_s, const std::string& error) {
  tried_since_contact_.erase(id);
  last_other_answer_ = std::max(last_other_answer_, now_s);
  NoteLaterError(id, error);
}

void Membership::OnDirectFailure(const std::string& id, const std::string& error, double now_s) {
  auto it = members_.find(id);
  if (it == members_.end()) return;
  it->second.direct_failures++;
  it->second.failed_at = now_s;
  it->second.last_error = error;
  tried_since_contact_[id] = true;
}

bool Membership::Excuse(const std::string& id) {
  auto it = members_.find(id);
  if (it == members_.end() || it->second.excused) return false;
  it->second.excused = true;
  return true;
}

void Membership::OnIndirectResult(const std::string& id, bool reached, double now_s) {
  auto it = members_.find(id);
  if (it == members_.end()) return;
  Member& m = it->second;
  if (reached) {
    m.heard = true;
    m.reached_indirectly = true;
    SetStatus(m, MemberStatus::kAlive, now_s, /*announce=*/false);
    return;
  }
  // Heard from it since the direct probe failed (it started again, or a flapping link came back
  // while the helpers' probes were out): the helpers' "no" is older than that.
  if (m.direct_failures == 0 || m.last_contact > m.failed_at) return;
  m.reached_indirectly = false;
  // A member never heard from is not suspected: it may not have started yet (its view says
  // "never answered"). Suspicion is for members that were alive.
  if (!m.heard) return;
  const bool announce = !IsolatedSince(now_s).has_value();
  // Refused, and nobody else gets through: its sidecar is down, unless this node never reached
  // it (heard of it only by the news: its channel may hold a refusal from before it started).
  if (SaysRefused(m.last_error) && m.reached() &&
      (m.status == MemberStatus::kAlive || m.status == MemberStatus::kSuspect)) {
    SetStatus(m, MemberStatus::kSilent, now_s, announce);
  } else if (m.status == MemberStatus::kAlive) {
    SetStatus(m, MemberStatus::kSuspect, now_s, announce);
  }
}

void Membership::OnUpdateOfSelf(const MemberUpdate& u) {
  const bool doubted = u.status() == MemberUpdate::SUSPECT || u.status() == MemberUpdate::SILENT;
  // Refuted whatever generation the doubt names: only this node says what it is.
  if (doubted && u.generation() >= generation_ && u.incarnation() >= incarnation_) {
    Refute(u.incarnation() + 1);
  }
}

void Membership::OnUpdate(const MemberUpdate& u, double now_s, const std::string& from) {
  if (u.node().empty()) return;
  if (u.node() == self_) {
    OnUpdateOfSelf(u);
    return;
  }
  Member& m = Get(u.node());
  if (m.id.empty() || u.generation() < m.generation) return;
  // A generation becomes known from the node itself (its messages, its ALIVE): a doubt or a
  // goodbye naming one this node has not seen alive is not taken from others.
  if (u.generation() > m.generation && m.heard && u.status() != MemberUpdate::ALIVE) return;
  if (!u.hostname().empty()) m.hostname = u.hostname();
  // Another node's probe error, kept until this node has one of its own; a refusal (its sidecar
  // is down, the machine answers) is the more telling word.
  if (!u.error().empty() &&
      (m.last_error.empty() || (u.status() == MemberUpdate::SILENT && SaysRefused(u.error())))) {
    m.last_error = u.error().substr(0, 200);
  }
  const bool newer_generation = u.generation() > m.generation;
  if (newer_generation) {
    m.generation = u.generation();
    m.incarnation = u.incarnation();
  }
  switch (u.status()) {
    case MemberUpdate::ALIVE:
      if (newer_generation || u.incarnation() > m.incarnation) {
        m.incarnation = u.incarnation();
        m.heard = true;
        SetStatus(m, MemberStatus::kAlive, now_s, /*announce=*/true);
      }
      break;
    case MemberUpdate::SUSPECT:
      if ((newer_generation || u.incarnation() >= m.incarnation) &&
          m.status == MemberStatus::kAlive) {
        m.incarnation = u.incarnation();
        SetStatus(m, MemberStatus::kSuspect, now_s, /*announce=*/true);
      } else if (m.status == MemberStatus::kSuspect && u.incarnation() == m.incarnation &&
                 !from.empty() && from != m.id &&
                 std::find(m.confirmations.begin(), m.confirmations.end(), from) ==
                     m.confirmations.end()) {
        m.confirmations.push_back(from);  // An independent suspicion: confirm sooner.
      }
      break;
    case MemberUpdate::SILENT:
      if ((newer_generation || u.incarnation() >= m.incarnation) &&
          m.status != MemberStatus::kSilent && m.status != MemberStatus::kLeft) {
        m.incarnation = u.incarnation();
        SetStatus(m, MemberStatus::kSilent, now_s, /*announce=*/true);
      }
      break;
    case MemberUpdate::LEFT:
      SetStatus(m, MemberStatus::kLeft, now_s, /*announce=*/true);
      break;
    default:
      break;
  }
}

void Membership::Tick(double now_s) {
  const bool isolated = IsolatedSince(now_s).has_value();
  if (isolated) {
    // This node's doubts about others say nothing about them: keep them to itself.
    for (auto it = pending_.begin(); it != pending_.end();) {
      bool doubt = it->second.status() == MemberUpdate::SUSPECT ||
                   it->second.status() == MemberUpdate::SILENT;
      it = it->first != self_ && doubt ? pending_.erase(it) : std::next(it);
    }
  }
  for (auto& [id, m] : members_) {
    const double timeout =
        std::max(options_.suspicion_floor_s,
                 SuspicionTimeout() / (1.0 + static_cast<double>(m.confirmations.size())));
    // Confirmed only by a node that has heard from someone since it began to suspect: a node that
    // hears from nobody may be the one cut off, and its doubts say nothing about the others.
    const bool heard_since = last_any_contact_ > m.status_since;
    if (m.status == MemberStatus::kSuspect && heard_since && now_s - m.status_since >= timeout) {
      SetStatus(m, MemberStatus::kSilent, now_s, /*announce=*/!isolated);
    }
  }
}

void Membership::OnProbeAnswered() { local_health_ = std::max(0, local_health_ - 1); }

void Membership::OnProbeMissed() {
  local_health_ = std::min(options_.max_local_health, local_health_ + 1);
}

void Membership::Leave() {
  MemberUpdate u;
  u.set_node(self_);
  u.set_generation(generation_);
  u.set_incarnation(incarnation_);
  u.set_status(MemberUpdate::LEFT);
  u.set_hostname(hostname_);
  pending_[self_] = u;
}

std::vector<MemberUpdate> Membership::TakeUpdates() {
  std::vector<MemberUpdate> out;
  out.reserve(pending_.size());
  for (auto& [id, u] : pending_) out.push_back(std::move(u));
  pending_.clear();
  return out;
}

std::optional<MemberUpdate> Membership::HintFor(const std::string& id) const {
  auto it = members_.find(id);
  if (it == members_.end()) return std::nullopt;
  const Member& m = it->second;
  if (m.status != MemberStatus::kSuspect && m.status != MemberStatus::kSilent) return std::nullopt;
  MemberUpdate u;
  u.set_node(m.id);
  u.set_generation(m.generation);
  u.set_incarnation(m.incarnation);
  u.set_status(ToWire(m.status));
  return u;
}

std::optional<double> Membership::IsolatedSince(double now_s) const {
  if (!ever_contacted_) return std::nullopt;
  size_t candidates = 0;
  for (const auto& [id, m] : members_) candidates += m.status != MemberStatus::kLeft;
  if (candidates == 0) return std::nullopt;
  const double last_answer = std::max(last_any_contact_, last_other_answer_);
  if (now_s - last_answer < options_.isolation_after_s) return std::nullopt;
  if (tried_since_contact_.size() < std::min<size_t>(3, candidates)) return std::nullopt;
  return last_answer;
}

std::vector<std::string> Membership::UnreachableDirectly() const {
  std::vector<std::string> out;
  for (const auto& [id, m] : members_) {
    if (m.status == MemberStatus::kAlive && m.reached_indirectly &&
        m.direct_failures >= options_.link_cut_after) {
      out.push_back(id);
    }
  }
  return out;
}

std::vector<std::string> Membership::TakeEvents() {
  std::vector<std::string> out;
  out.swap(events_);
  return out;
}

void Membership::SetStatus(Member& m, MemberStatus status, double now_s, bool announce) {
  if (m.status == status) return;
  m.confirmations.clear();
  std::string event = m.id;
  if (!m.hostname.empty()) event += " (" + m.hostname + ")";
  event += ": ";
  event += MemberStatusName(m.status);
  event += " -> ";
  event += MemberStatusName(status);
  if (status != MemberStatus::kAlive && !m.last_error.empty()) event += " (" + m.last_error + ")";
  events_.push_back(std::move(event));
  if (status == MemberStatus::kAlive &&
      (m.status == MemberStatus::kSuspect || m.status == MemberStatus::kSilent)) {
    m.back_since = now_s;
  }
  m.status = status;
  m.status_since = now_s;
  if (announce) Announce(m);
}

void Membership::Announce(const Member& m) {
  MemberUpdate u;
  u.set_node(m.id);
  u.set_generation(m.generation);
  u.set_incarnation(m.incarnation);
  u.set_status(ToWire(m.status));
  u.set_hostname(m.hostname);
  if (m.status == MemberStatus::kSuspect || m.status == MemberStatus::kSilent) {
    u.set_error(m.last_error);
  }
  pending_[m.id] = std::move(u);
}

void Membership::Refute(uint64_t at_least) {
  // Being suspected while alive says this node answers late: slow down too.
  OnProbeMissed();
  incarnation_ = std::max(incarnation_ + 1, at_least);
  MemberUpdate u;
  u.set_node(self_);
  u.set_generation(generation_);
  u.set_incarnation(incarnation_);
  u.set_status(MemberUpdate::ALIVE);
  u.set_hostname(hostname_);
  pending_[self_] = std::move(u);
}

}  // namespace trainscope::sidecar
