// Node records, the broadcast queue and the own record; see node_records.h.
#include "trainscope/sidecar/node_records.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "trainscope/sidecar/api.h"
#include "trainscope/sidecar/task_view.h"

namespace trainscope::sidecar {
namespace {

constexpr size_t kMaxRecordBytes = 1 << 20;
constexpr size_t kMaxNodeIdBytes = 256;
// A task's recent pace that moved by this factor since its record last told it is news, at most
// every kPaceNewsEveryS (PaceMoved).
constexpr double kPaceNewsFactor = 1.25;
constexpr double kPaceNewsEveryS = 1;

bool Newer(const v1::NodeRecord& a, const v1::NodeRecord& b) {
  if (a.generation() != b.generation()) return a.generation() > b.generation();
  return a.version() > b.version();
}

// What about a view is worth telling the cluster: its state and the facts behind the state,
// never the numbers that move every step.
void AppendKey(const TaskView& v, std::string* key) {
  absl::StrAppend(key, v.task.ShortName(), "|", std::string(StateName(v.state)), "|", v.phase, "|",
                  v.incarnation, "|", v.restarts, "|", v.pid, "|", v.listen_address, "|",
                  v.metrics_address, "|");
  // A failure that has lasted long enough to be a partition is news (kPartitionAfterS).
  for (const BlockedPeer& b : v.blocked_on) {
    absl::StrAppend(key, "b", b.peer.ShortName(), b.seconds >= kPartitionAfterS ? "L" : "", ",");
  }
  // Where a stuck task is stuck, in words: "waiting 2.1 s" and "waiting 3.4 s" are the same news.
  for (char c : v.stuck_where) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c)) && c != '.') key->push_back(c);
  }
  for (const PeerInfo& p : v.peers) {
    if (!p.connected) {
      absl::StrAppend(key, "f", p.peer.ShortName(), p.network_failure,
                      FailingSeconds(p) >= kPartitionAfterS ? "L" : "", ",");
    }
    if (p.step_share >= 0.5) absl::StrAppend(key, "s", p.peer.ShortName(), ",");
    // An edge's usual learned (once), and a raise held (worker_ps_map.h): the record then
    // carries the worker's row as it was at that moment.
    if (p.usual_latency_seconds > 0) absl::StrAppend(key, "u", p.peer.ShortName(), ",");
    if (p.raised_seconds >= kHeldRaiseS) absl::StrAppend(key, "r", p.peer.ShortName(), ",");
  }
  // The same for its pace (stragglers.h): learned, a raise held, and a quota that holds it back
  // (a straggler's cause, which needs no raise). A pace that moved is news too (PaceMoved).
  if (v.usual_step_seconds > 0) key->push_back('U');
  if (v.step_raised_seconds >= kHeldRaiseS) key->push_back('R');
  if (HeldByItsCpuQuota(v.cgroup)) key->push_back('Q');
  key->push_back(';');
}

// Whether a task's recent pace moved by a factor of kPaceNewsFactor or more, up or down, from
// the one `told` last said. Other views judge a straggler against its peers on these figures
// (stragglers.h): a straggler at 1.8x its usual pace, or a peer back to its pace after one, is
// otherwise told only with the next other news, and judged on stale figures until then.
bool PaceMoved(const std::vector<TaskView>& views, const v1::NodeRecord& told) {
  for (const TaskView& v : views) {
    for (const v1::TaskView& t : told.tasks()) {
      if (t.role() != v.task.role || t.task() != v.task.index) continue;
      const double was = t.recent_step_seconds();
      const double now = v.recent_step_seconds;
      if (was > 0 && now > 0 && std::max(now / was, was / now) >= kPaceNewsFactor) return true;
    }
  }
  return false;
}

}  // namespace

std::string StableUpReason(const TaskView& v) {
  if (absl::StartsWith(v.reason, kOutsideReasonPrefix)) {
    std::string out = absl::StrCat(kOutsideReasonPrefix, "gRPC answers on time");
    if (v.pid > 0) absl::StrAppend(&out, " (pid ", v.pid, ")");
    if (v.restarts > 0) absl::StrAppend(&out, "; restarted ", v.restarts, "x");
    return out;
  }
  std::string out = absl::StrCat(v.phase.empty() ? "answering" : v.phase, ", answers on time");
  if (v.restarts > 0) absl::StrAppend(&out, "; restarted ", v.restarts, "x");
  return out;
}

NodeRecords::Applied NodeRecords::Apply(v1::NodeRecord record, double now_unix, std::string* why) {
  if (record.node().empty() || record.node().size() > kMaxNodeIdBytes) {
    *why = "a record without a valid node id";
    return Applied::kRefused;
  }
  if (record.tasks_size() > kMaxTasksPerNode) {
    *why = absl::StrCat("a record of ", record.tasks_size(), " tasks (at most ", kMaxTasksPerNode,
                        ")");
    return Applied::kRefused;
  }
  if (record.ByteSizeLong() > kMaxRecordBytes) {
    *why = absl::StrCat("a record of ", record.ByteSizeLong(), " bytes");
    return Applied::kRefused;
  }
  auto held = all_.find(record.node());
  if (held != all_.end() && !Newer(record, held->second->record)) return Applied::kNotNewer;
  for (const v1::TaskView& t : record.tasks()) {
    auto view = FromProto(t);
    if (!view.ok()) {
      *why = absl::StrCat("a record whose ", view.status().message());
      return Applied::kRefused;
    }
  }
  auto entry = std::make_shared<RecordEntry>();
  entry->record = std::move(record);
  entry->learned_at = now_unix;
  all_[entry->record.node()] = std::move(entry);
  return Applied::kNewer;
}

std::shared_ptr<const RecordEntry> NodeRecords::Find(const std::string& node) const {
  auto it = all_.find(node);
  return it == all_.end() ? nullptr : it->second;
}

std::string NodeRecords::FillSlice(const std::string& after, size_t max,
                                   v1::SyncRequest* request) const {
  request->set_after(after);
  auto it = all_.upper_bound(after);
  for (size_t n = 0; n < max && it != all_.end(); ++n, ++it) {
    v1::Digest* d = request->add_known();
    d->set_node(it->first);
    d->set_generation(it->second->record.generation());
    d->set_version(it->second->record.version());
  }
  if (it == all_.end()) {
    request->set_until("");  // To the end; the next slice starts over.
    return "";
  }
  request->set_until(request->known(request->known_size() - 1).node());
  return request->until();
}

void NodeRecords::Answer(const v1::SyncRequest& request, size_t max_bytes,
                         v1::SyncResponse* response) const {
  size_t bytes = 0;
  auto add = [&](const v1::NodeRecord& r) {
    size_t size = r.ByteSizeLong();
    if (bytes + size > max_bytes && response->records_size() > 0) return false;
    *response->add_records() = r;
    bytes += size;
    return true;
  };
  std::map<std::string, const v1::Digest*> known;
  for (const v1::Digest& d : request.known()) known[d.node()] = &d;
  for (const auto& [node, d] : known) {
    auto it = all_.find(node);
    if (it == all_.end()) continue;
    const v1::NodeRecord& r = it->second->record;
    bool newer = r.generation() != d->generation() ? r.generation() > d->generation()
                                                   : r.version() > d->version();
    if (newer && !add(r)) return;
  }
  // Records in the range the requester does not hold at all.
  const size_t max_records = request.max_records() == 0 ? 512 : request.max_records();
  size_t sent = 0;
  for (auto it = all_.upper_bound(request.after()); it != all_.end(); ++it) {
    if (!request.all() && !request.until().empty() && it->first > request.until()) break;
    if (known.count(it->first)) continue;
    if (sent >= max_records || !add(it->second->record)) {
      response->set_more(true);
      return;
    }
    ++sent;
  }
}

void BroadcastQueue::Put(const v1::NodeRecord& record) {
  Item& item = items_["r:" + record.node()];
  if (item.seq == 0 || item.sent > 0) ++unsent_;  // A new item, or a sent one made new again.
  item = Item{};
  item.record = std::make_shared<const v1::NodeRecord>(record);
  item.seq = ++seq_;
  item.bytes = record.ByteSizeLong() + 8;
}

void BroadcastQueue::Put(const v1::MemberUpdate& update) {
  Item& item = items_["m:" + update.node()];
  if (item.seq == 0 || item.sent > 0) ++unsent_;
  item = Item{};
  item.member = update;
  item.seq = ++seq_;
  item.bytes = update.ByteSizeLong() + 8;
}

void BroadcastQueue::Fill(v1::Gossip* gossip, size_t budget, int limit, bool fresh_only) {
  std::vector<std::pair<const std::string*, Item*>> order;
  order.reserve(items_.size());
  for (auto& [key, item] : items_) order.push_back({&key, &item});
  std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    if (a.second->sent != b.second->sent) return a.second->sent < b.second->sent;
    return a.second->seq > b.second->seq;
  });
  size_t used = 0;
  std::vector<std::string> done;
  for (auto& [key, item] : order) {
    if (fresh_only && item->sent > 0) break;  // Sorted least-sent first.
    if (used + item->bytes > budget) continue;
    used += item->bytes;
    if (item->record) {
      *gossip->add_records() = *item->record;
    } else {
      *gossip->add_members() = *item->member;
    }
    if (item->sent++ == 0) --unsent_;
    if (item->sent >= limit) done.push_back(*key);
  }
  for (const std::string& key : done) items_.erase(key);
}

OwnRecord::OwnRecord(std::string node, std::string hostname, uint64_t generation, double refresh_s)
    : refresh_s_(refresh_s) {
  record_.set_node(std::move(node));
  record_.set_hostname(std::move(hostname));
  record_.set_generation(generation);
}

std::optional<v1::NodeRecord> OwnRecord::Update(const std::vector<TaskView>& views,
                                                std::vector<std::string> unreachable_nodes,
                                                bool isolated, double now_unix) {
  std::sort(unreachable_nodes.begin(), unreachable_nodes.end());
  std::string key;
  std::string reasons;
  for (const TaskView& v : views) {
    AppendKey(v, &key);
    if (v.state != TaskState::kUp) absl::StrAppend(&reasons, v.reason, ";");
  }
  for (const std::string& n : unreachable_nodes) absl::StrAppend(&key, "u", n, ",");
  absl::StrAppend(&key, isolated ? "I" : "", NodeStrainWords(load_).empty() ? "" : "S");
  for (const v1::OwnedIncident& in : incidents_) absl::StrAppend(&key, "i", in.id(), ",");
  const bool changed = key != key_ || made_at_ < 0;
  const bool refresh = reasons != reasons_ && now_unix - made_at_ >= refresh_s_;
  const bool paced = now_unix - made_at_ >= kPaceNewsEveryS && PaceMoved(views, record_);
  if (!changed && !refresh && !paced) return std::nullopt;
  key_ = std::move(key);
  reasons_ = std::move(reasons);
  made_at_ = now_unix;
  record_.set_version(record_.version() + 1);
  record_.set_made_at(now_unix);
  record_.clear_tasks();
  for (const TaskView& v : views) {
    v1::TaskView* t = record_.add_tasks();
    ToProto(v, /*full_peers=*/false, t);
    if (v.state == TaskState::kUp) t->set_reason(StableUpReason(v));
  }
  record_.clear_unreachable_nodes();
  for (std::string& n : unreachable_nodes) record_.add_unreachable_nodes(std::move(n));
  record_.set_isolated(isolated);
  ToProto(load_, record_.mutable_load());
  record_.clear_incidents();
  for (const v1::OwnedIncident& in : incidents_) *record_.add_incidents() = in;
  return record_;
}

}  // namespace trainscope::sidecar
