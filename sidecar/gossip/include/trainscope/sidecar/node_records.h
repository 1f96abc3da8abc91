#pragma once
// The cluster state that sidecars gossip: each node's first-hand report of its tasks (a
// versioned NodeRecord that only that node writes), the newest version of each kept here; the
// queue of news the gossip piggybacks on every message; and the building of this node's own
// record from its trackers' views, whose version rises only on a change worth telling (a state,
// an incarnation, a peer that fails), so that a healthy cluster gossips nothing.
// Not thread-safe: the peer exchange owns them under its lock.

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "trainscope/sidecar/node_load.h"
#include "trainscope/sidecar/task_view.h"
#include "trainscope/sidecar/v1/sidecar.pb.h"

namespace trainscope::sidecar {

// A record as held: what the node said, and when this sidecar learned it.
struct RecordEntry {
  v1::NodeRecord record;
  double learned_at = 0;  // Unix seconds.
};

class NodeRecords {
 public:
  enum class Applied { kNewer, kNotNewer, kRefused };
  // Keeps `record` when it is newer than the one held for its node (a later generation, or the
  // same generation and a higher version). Refused, with `why`, when it is not a sane record:
  // no node, too many tasks, too large, a task that is not a task.
  Applied Apply(v1::NodeRecord record, double now_unix, std::string* why);
  std::shared_ptr<const RecordEntry> Find(const std::string& node) const;
  // Every record held, by node; entries are immutable and shared, so copying this is cheap.
  const std::map<std::string, std::shared_ptr<const RecordEntry>>& all() const { return all_; }

  // Fills `request` for anti-entropy over the next slice of node ids: the versions held for up
  // to `max` nodes after `after` in id order, and the range they cover (after, until]; returns
  // the id to continue after next time ("" once the end is reached). Comparing a slice per
  // round keeps the cost flat however large the cluster.
  std::string FillSlice(const std::string& after, size_t max, v1::SyncRequest* request) const;
  // Fills `response`: the records newer than those `request` lists, and those in its range that
  // it does not list at all (or, with request.all, every record after request.after), within
  // `max_bytes`.
  void Answer(const v1::SyncRequest& request, size_t max_bytes, v1::SyncResponse* response) const;

 private:
  std::map<std::string, std::shared_ptr<const RecordEntry>> all_;
};

// News to spread, each sent a bounded number of times (SWIM's infection-style dissemination):
// the least-sent first, newer news about the same node replacing older.
class BroadcastQueue {
 public:
  void Put(const v1::NodeRecord& record);
  void Put(const v1::MemberUpdate& update);
  // Adds to `gossip` the least-sent items that fit in `budget` bytes, counting a transmission
  // for each; items sent `limit` times are dropped. `fresh_only`: only items never sent yet (a
  // relay of news just learned, which leaves the rest of each item's transmissions to the
  // periods: spread over time, they also reach the members that start or come back meanwhile).
  void Fill(v1::Gossip* gossip, size_t budget, int limit, bool fresh_only = false);
  bool empty() const { return items_.empty(); }
  size_t size() const { return items_.size(); }
  // Items not sent yet: news that just came in, worth passing on at once.
  bool HasUnsent() const { return unsent_ > 0; }

 private:
  struct Item {
    std::shared_ptr<const v1::NodeRecord> record;  // One of record or member.
    std::optional<v1::MemberUpdate> member;
    int sent = 0;
    uint64_t seq = 0;  // Newer items first among equally sent ones.
    size_t bytes = 0;
  };
  std::map<std::string, Item> items_;  // Key: "r:" + node or "m:" + node.
  uint64_t seq_ = 0;
  size_t unsent_ = 0;  // Items with sent == 0.
};

// This node's own record.
class OwnRecord {
 public:
  OwnRecord(std::string node, std::string hostname, uint64_t generation, double refresh_s);
  // The record for these first-hand views and link facts; its version rises when something
  // worth telling changed, when a problem's reason changed and the last version is at least
  // `refresh_s` old, or when a task's recent pace moved by a quarter or more and the last version
  // is at least a second old. Returns the new record when the version rose, else nullopt.
  std::optional<v1::NodeRecord> Update(const std::vector<TaskView>& views,
                                       std::vector<std::string> unreachable_nodes, bool isolated,
                                       double now_unix);
  const v1::NodeRecord& current() const { return record_; }
  // This node's load, carried in every version from now on; news when it turns strained or
  // back (NodeStrainWords), its figures otherwise ride with the next version.
  void SetLoad(const NodeLoad& load) { load_ = load; }
  // The incidents this node owns (open, or closed a moment ago), carried in every version from
  // now on; a change of their ids is news.
  void SetIncidents(std::vector<v1::OwnedIncident> incidents) { incidents_ = std::move(incidents); }

 private:
  v1::NodeRecord record_;
  NodeLoad load_;
  std::vector<v1::OwnedIncident> incidents_;
  std::string key_;
  std::string reasons_;
  double made_at_ = -1;
  double refresh_s_;
};

// The words an up task is described with in the gossip (its detailed reason changes every
// step and would be news every time): its phase, on time.
std::string StableUpReason(const TaskView& view);

}  // namespace trainscope::sidecar
