#pragma once
// Many sidecars' exchange protocol (the real ExchangeCore) in one process, over a simulated
// network that delivers every message at once unless the link is cut: for the unit tests of the
// protocol and for the scale bench's 1,100-node figures. Each Step() is one period of every
// node, in a random order. Not thread-safe.

#include <algorithm>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "trainscope/sidecar/exchange_core.h"

namespace trainscope::sidecar {

class SimCluster {
 public:
  // `n` nodes "n0:1" ... each watching one task worker:<i>, up.
  SimCluster(int n, MembershipOptions membership, uint64_t seed) : rng_(seed) {
    std::vector<std::string> ids;
    for (int i = 0; i < n; ++i) ids.push_back(Id(i));
    for (int i = 0; i < n; ++i) {
      ExchangeOptions o;
      o.cluster = "sim";
      o.self = ids[i];
      o.hostname = "n" + std::to_string(i);
      o.peers = ids;
      o.membership = membership;
      o.seed = seed * 1000003 + static_cast<uint64_t>(i) + 1;
      nodes_.push_back(std::make_unique<ExchangeCore>(o, 1, Now{now_, now_ + kEpoch}));
      TaskView v;
      v.cluster = "sim";
      v.task = {"worker", i};
      v.state = TaskState::kUp;
      v.phase = "training";
      views_.push_back({v});
    }
  }

  static std::string Id(int i) { return "n" + std::to_string(i) + ":1"; }
  int size() const { return static_cast<int>(nodes_.size()); }
  double now() const { return now_; }
  ExchangeCore& core(int i) { return *nodes_[i]; }
  void SetState(int i, TaskState s) { views_[i][0].state = s; }

  // Links: a cut pair drops every message between the two; a node down drops all of its own.
  void Cut(int a, int b) { cut_.insert({std::min(a, b), std::max(a, b)}); }
  void Heal(int a, int b) { cut_.erase({std::min(a, b), std::max(a, b)}); }
  void Down(int i) { down_.insert(i); }
  void Up(int i) { down_.erase(i); }
  bool Linked(int a, int b) const {
    return !down_.count(a) && !down_.count(b) && !cut_.count({std::min(a, b), std::max(a, b)});
  }

  // One period of every node.
  void Step() {
    now_ += period_;
    std::vector<int> order(nodes_.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
    std::shuffle(order.begin(), order.end(), rng_);
    for (int i : order) {
      ExchangeCore& c = *nodes_[i];
      const Now now = Clock();
      if (c.UpdateOwn(views_[i], now)) {
        for (const std::string& t : c.NewsTargets()) Ping(i, Index(t), false);
      }
      ExchangeCore::Period p = c.OnPeriod(now, steps_ % sync_every_ == 0);
      if (p.probe) Ping(i, Index(*p.probe), true);
      for (const std::string& t : p.gossip) Ping(i, Index(t), false);
      if (p.sync) Sync(i, Index(*p.sync));
      c.TakeLog();
    }
    ++steps_;
  }

  // Nodes whose record of node `of` has at least `version`.
  int Knowing(int of, uint64_t version) {
    int n = 0;
    for (auto& c : nodes_) {
      auto r = c->records().Find(Id(of));
      n += r != nullptr && r->record.version() >= version;
    }
    return n;
  }
  uint64_t OwnVersion(int i) {
    auto r = nodes_[i]->records().Find(Id(i));
    return r ? r->record.version() : 0;
  }
  // Nodes (other than `of`) that hold `of` as `status`.
  int Holding(int of, MemberStatus status) {
    int n = 0;
    for (int i = 0; i < size(); ++i) {
      if (i == of) continue;
      const Member* m = nodes_[i]->membership().Find(Id(of));
      n += m != nullptr && m->status == status;
    }
    return n;
  }
  void set_period(double s) { period_ = s; }
  void set_sync_every(int steps) { sync_every_ = std::max(1, steps); }

 private:
  static constexpr double kEpoch = 1.7e9;
  Now Clock() const { return {now_, now_ + kEpoch}; }
  static int Index(const std::string& id) { return std::stoi(id.substr(1, id.find(':') - 1)); }

  void Ping(int from, int to, bool probe) {
    ExchangeCore& a = *nodes_[from];
    v1::PingRequest req;
    a.FillPing(Id(to), &req);
    v1::PingResponse resp;
    std::string error = "no answer within 250 ms";
    if (Linked(from, to)) error = nodes_[to]->OnPing(req, &resp, Clock());
    for (const std::string& h : a.OnPingDone(Id(to), probe, error, resp, Clock())) {
      Indirect(from, Index(h), to);
    }
  }

  void Indirect(int from, int helper, int target) {
    ExchangeCore& a = *nodes_[from];
    v1::PingReqRequest req;
    a.FillPingReq(Id(target), &req);
    v1::PingReqResponse resp;
    std::string error = "no answer within 600 ms";
    if (Linked(from, helper)) {
      ExchangeCore& h = *nodes_[helper];
      error = h.OnPingReq(req, Clock());
      if (error.empty()) {
        v1::PingRequest ping;
        h.FillPing(Id(target), &ping);
        v1::PingResponse pong;
        std::string e = "no answer within 500 ms";
        if (Linked(helper, target)) e = nodes_[target]->OnPing(ping, &pong, Clock());
        h.OnPingDone(Id(target), false, e, pong, Clock());
        h.FillPingReqAnswer(e.empty(), e, &resp);
      }
    }
    a.OnPingReqDone(Id(helper), Id(target), error, resp, Clock());
  }

  void Sync(int from, int to) {
    v1::SyncRequest req;
    nodes_[from]->FillSync(&req);
    v1::SyncResponse resp;
    std::string error = "no answer within 2000 ms";
    if (Linked(from, to)) error = nodes_[to]->OnSync(req, &resp, Clock());
    nodes_[from]->OnSyncDone(Id(to), req, error, resp, Clock());
  }

  std::mt19937_64 rng_;
  std::vector<std::unique_ptr<ExchangeCore>> nodes_;
  std::vector<std::vector<TaskView>> views_;
  std::set<std::pair<int, int>> cut_;
  std::set<int> down_;
  double now_ = 0;
  double period_ = 0.2;
  int sync_every_ = 10;
  int steps_ = 0;
};

}  // namespace trainscope::sidecar
