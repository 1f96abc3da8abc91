// The gossip exchange between sidecars; see peer_exchange.h.
#include "peer_exchange.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "grpcpp/grpcpp.h"
#include "spdlog/spdlog.h"
#include "trainscope/common/clock.h"
#include "trainscope/common/grpc_channel.h"
#include "trainscope/common/rpc_error.h"
#include "trainscope/sidecar/api.h"
#include "trainscope/sidecar/v1/sidecar.grpc.pb.h"

namespace trainscope::sidecar {
namespace {

using std::chrono::milliseconds;

constexpr int kMaxConcurrentIndirect = 64;  // PingReq calls served at once.
constexpr int kMaxGossipItems = 4096;       // Records or member updates in one message.
constexpr size_t kSyncAnswerBytes = 1 << 20;

std::chrono::system_clock::time_point After(int ms) {
  return std::chrono::system_clock::now() + milliseconds(ms);
}

uint64_t NowNanos() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

}  // namespace

class PeerExchange::Impl {
 public:
  Impl(ExchangeOptions options, LocalViews local)
      : options_(std::move(options)),
        local_(std::move(local)),
        generation_(NowNanos()),
        membership_(options_.self, options_.hostname, generation_, options_.peers,
                    options_.membership, MonotonicSeconds(),
                    options_.seed != 0 ? options_.seed : generation_),
        own_(options_.self, options_.hostname, generation_, options_.reason_refresh_s),
        service_(this) {
    Publish(MonotonicSeconds());
  }

  grpc::Service* service() { return &service_; }

  void Start() {
    thread_ = std::thread([this] { Loop(); });
  }

  void Stop() {
    {
      std::lock_guard lock(wake_mu_);
      if (stop_) return;
      stop_ = true;
    }
    wake_cv_.notify_all();
    if (thread_.joinable()) thread_.join();
    // Goodbye: a few members hear that this node leaves (so it is not taken for silent).
    std::vector<std::string> targets;
    {
      std::lock_guard lock(mu_);
      membership_.Leave();
      DrainMembership();
      targets = membership_.GossipTargets(options_.gossip_fanout);
    }
    for (const std::string& t : targets) SendPing(t, Kind::kGoodbye, 200);
    WaitIdle(milliseconds(300));
    {
      std::lock_guard lock(mu_);
      closing_ = true;
      for (grpc::ClientContext* c : inflight_) c->TryCancel();
    }
    WaitIdle(milliseconds(700));
  }

  void Poke() {
    {
      std::lock_guard lock(wake_mu_);
      poked_ = true;
    }
    wake_cv_.notify_all();
  }

  std::shared_ptr<const ExchangeSnapshot> snapshot() const {
    std::lock_guard lock(snapshot_mu_);
    return snapshot_;
  }

  ExchangeStats stats() const {
    std::lock_guard lock(mu_);
    return stats_;
  }

 private:
  enum class Kind { kProbe, kGossip, kGoodbye, kForIndirect };

  struct PingCall {
    grpc::ClientContext ctx;
    v1::PingRequest req;
    v1::PingResponse resp;
    std::string target;
    Kind kind = Kind::kGossip;
    // kForIndirect: the PingReq being served, answered when this call ends.
    grpc::ServerUnaryReactor* reactor = nullptr;
    v1::PingReqResponse* reply = nullptr;
  };
  struct PingReqCall {
    grpc::ClientContext ctx;
    v1::PingReqRequest req;
    v1::PingReqResponse resp;
    std::string helper;
  };
  struct SyncCall {
    grpc::ClientContext ctx;
    v1::SyncRequest req;
    v1::SyncResponse resp;
    std::string target;
  };
  struct Indirect {
    int outstanding = 0;
    bool reached = false;
  };

  class Service final : public v1::Exchange::CallbackService {
   public:
    explicit Service(Impl* impl) : impl_(impl) {}
    grpc::ServerUnaryReactor* Ping(grpc::CallbackServerContext* ctx, const v1::PingRequest* req,
                                   v1::PingResponse* resp) override {
      auto* reactor = ctx->DefaultReactor();
      reactor->Finish(impl_->HandlePing(*req, resp));
      return reactor;
    }
    grpc::ServerUnaryReactor* PingReq(grpc::CallbackServerContext* ctx,
                                      const v1::PingReqRequest* req,
                                      v1::PingReqResponse* resp) override {
      auto* reactor = ctx->DefaultReactor();
      impl_->HandlePingReq(*req, resp, reactor);
      return reactor;
    }
    grpc::ServerUnaryReactor* Sync(grpc::CallbackServerContext* ctx, const v1::SyncRequest* req,
                                   v1::SyncResponse* resp) override {
      auto* reactor = ctx->DefaultReactor();
      reactor->Finish(impl_->HandleSync(*req, resp));
      return reactor;
    }

   private:
    Impl* impl_;
  };

  // ---- The timer thread. ----

  void Loop() {
    double next_period = MonotonicSeconds();
    double next_sync = next_period + options_.sync_interval_s;
    while (true) {
      {
        std::unique_lock lock(wake_mu_);
        double wait = std::max(0.0, next_period - MonotonicSeconds());
        wake_cv_.wait_for(lock, std::chrono::duration<double>(wait),
                          [&] { return stop_ || poked_; });
        if (stop_) return;
        poked_ = false;
      }
      const double now = MonotonicSeconds();
      const bool period = now >= next_period;
      if (period) next_period = std::max(next_period + options_.membership.period_s, now);
      const bool sync = period && now >= next_sync;
      if (sync) next_sync = now + options_.sync_interval_s;
      RunOnce(now, period, sync);
    }
  }

  // One wake-up: refresh this node's record; on a period, probe, gossip and sync.
  void RunOnce(double now, bool period, bool sync) {
    std::vector<TaskView> views = local_();
    std::vector<std::pair<std::string, Kind>> pings;
    std::string sync_target;
    {
      std::lock_guard lock(mu_);
      const double now_unix = UnixSeconds();
      const bool isolated = membership_.IsolatedSince(now).has_value();
      if (auto record = own_.Update(views, membership_.UnreachableDirectly(), isolated, now_unix)) {
        std::string why;
        records_.Apply(*record, now_unix, &why);
        queue_.Put(*record);
        dirty_ = true;
        // Own news goes out at once, not at the next period.
        if (!period) {
          for (const std::string& t : membership_.GossipTargets(options_.gossip_fanout)) {
            pings.push_back({t, Kind::kGossip});
          }
        }
      }
      if (period) {
        membership_.Tick(now);
        DrainMembership();
        if (auto target = membership_.NextProbeTarget()) pings.push_back({*target, Kind::kProbe});
        if (!queue_.empty()) {
          for (const std::string& t : membership_.GossipTargets(options_.gossip_fanout)) {
            pings.push_back({t, Kind::kGossip});
          }
        }
        if (sync || !joined_) {
          auto targets = membership_.GossipTargets(1);
          if (!targets.empty()) sync_target = targets[0];
        }
      }
      if (dirty_ || now - published_at_ >= 1.0) Publish(now);
    }
    for (const auto& [target, kind] : pings) SendPing(target, kind, options_.probe_timeout_ms);
    if (!sync_target.empty()) SendSync(sync_target);
  }

  // Member updates become news. Caller holds mu_.
  void DrainMembership() {
    for (const v1::MemberUpdate& u : membership_.TakeUpdates()) queue_.Put(u);
    for (const std::string& e : membership_.TakeEvents()) {
      spdlog::info("peer sidecar {}", e);
      dirty_ = true;
    }
  }

  // Publishes a snapshot for readers. Caller holds mu_.
  void Publish(double now) {
    auto s = std::make_shared<ExchangeSnapshot>();
    s->self = options_.self;
    s->hostname = options_.hostname;
    s->members.reserve(membership_.members().size());
    const double to_unix = UnixSeconds() - now;
    for (const auto& [id, m] : membership_.members()) {
      Member copy = m;
      copy.status_since += to_unix;
      if (copy.last_contact >= 0) copy.last_contact += to_unix;
      s->members.push_back(std::move(copy));
    }
    s->records = records_.all();
    if (auto since = membership_.IsolatedSince(now)) {
      s->isolated_since_unix = UnixSeconds() - (now - *since);
    }
    s->ever_contacted = membership_.ever_contacted();
    s->made_at_unix = UnixSeconds();
    s->stats = stats_;
    published_at_ = now;
    dirty_ = false;
    std::lock_guard lock(snapshot_mu_);
    snapshot_ = std::move(s);
  }

  // ---- Client side. ----

  v1::Exchange::Stub* StubFor(const std::string& target) {
    auto it = stubs_.find(target);
    if (it != stubs_.end()) return it->second.get();
    ChannelOptions channel;
    channel.max_receive_bytes = static_cast<int>(options_.max_message_bytes);
    auto stub = v1::Exchange::NewStub(MakeChannel(target, channel));
    return stubs_.emplace(target, std::move(stub)).first->second.get();
  }

  void FillHeader(v1::Header* h) const {
    h->set_protocol_version(kExchangeProtocolVersion);
    h->set_cluster(options_.cluster);
    membership_.FillHeader(h);
  }

  // Starts a call: registers it for cancellation. Caller holds mu_. False when closing.
  bool Begin(grpc::ClientContext* ctx) {
    if (closing_) return false;
    inflight_.insert(ctx);
    return true;
  }
  void End(grpc::ClientContext* ctx) {
    std::lock_guard lock(mu_);
    inflight_.erase(ctx);
    if (inflight_.empty()) idle_cv_.notify_all();
  }
  void WaitIdle(milliseconds bound) {
    std::unique_lock lock(mu_);
    idle_cv_.wait_for(lock, bound, [&] { return inflight_.empty(); });
  }

  void SendPing(const std::string& target, Kind kind, int timeout_ms,
                grpc::ServerUnaryReactor* reactor = nullptr, v1::PingReqResponse* reply = nullptr) {
    auto call = std::make_unique<PingCall>();
    call->target = target;
    call->kind = kind;
    call->reactor = reactor;
    call->reply = reply;
    call->ctx.set_deadline(After(timeout_ms));
    v1::Exchange::Stub* stub = nullptr;
    {
      std::unique_lock lock(mu_);
      if (!Begin(&call->ctx)) {
        if (reactor) {
          --indirect_serving_;
          lock.unlock();
          reply->set_error("the sidecar asked to probe is stopping");
          reactor->Finish(grpc::Status::OK);
        }
        return;
      }
      FillHeader(call->req.mutable_header());
      call->req.set_target(target);
      queue_.Fill(call->req.mutable_gossip(), options_.gossip_budget_bytes,
                  membership_.RetransmitLimit());
      if (auto hint = membership_.HintFor(target))
        *call->req.mutable_gossip()->add_members() = *hint;
      stats_.messages_sent++;
      stats_.bytes_sent += static_cast<int64_t>(call->req.ByteSizeLong());
      stub = StubFor(target);
    }
    PingCall* c = call.release();
    stub->async()->Ping(&c->ctx, &c->req, &c->resp, [this, c](grpc::Status s) { OnPing(c, s); });
  }

  void OnPing(PingCall* c, const grpc::Status& s) {
    std::unique_ptr<PingCall> call(c);
    std::vector<std::string> helpers;
    std::string error;
    {
      std::lock_guard lock(mu_);
      const double now = MonotonicSeconds();
      if (s.ok()) error = CheckHeader(call->resp.header());
      if (s.ok() && error.empty()) {
        stats_.messages_received++;
        stats_.bytes_received += static_cast<int64_t>(call->resp.ByteSizeLong());
        Contact(call->resp.header(), call->target, now);
        ApplyGossip(call->resp.gossip(), call->target, now);
      } else {
        stats_.errors++;
        if (error.empty()) {
          error = SummarizeRpcError(static_cast<int>(s.error_code()), s.error_message(),
                                    options_.probe_timeout_ms);
        }
        NoteError(call->target, error);
        if (call->kind == Kind::kProbe) {
          membership_.OnDirectFailure(call->target, error, now);
          helpers = membership_.IndirectHelpers(call->target, options_.membership.indirect_probes);
          if (helpers.empty()) {
            membership_.OnIndirectResult(call->target, false, now);
            DrainMembership();
          } else {
            indirect_[call->target].outstanding += static_cast<int>(helpers.size());
          }
        }
      }
    }
    if (call->reactor != nullptr) {
      call->reply->set_reached(s.ok() && error.empty());
      if (!call->reply->reached()) call->reply->set_error(error);
      {
        std::lock_guard lock(mu_);
        FillHeader(call->reply->mutable_header());
        --indirect_serving_;
      }
      call->reactor->Finish(grpc::Status::OK);
    }
    for (const std::string& h : helpers) SendPingReq(h, call->target);
    End(&call->ctx);
  }

  void SendPingReq(const std::string& helper, const std::string& target) {
    auto call = std::make_unique<PingReqCall>();
    call->helper = helper;
    call->ctx.set_deadline(After(options_.indirect_timeout_ms + 100));
    v1::Exchange::Stub* stub = nullptr;
    {
      std::lock_guard lock(mu_);
      if (!Begin(&call->ctx)) return;
      FillHeader(call->req.mutable_header());
      call->req.set_target(target);
      call->req.set_timeout_ms(options_.indirect_timeout_ms);
      queue_.Fill(call->req.mutable_gossip(), options_.gossip_budget_bytes,
                  membership_.RetransmitLimit());
      stats_.messages_sent++;
      stats_.bytes_sent += static_cast<int64_t>(call->req.ByteSizeLong());
      stub = StubFor(helper);
    }
    PingReqCall* c = call.release();
    stub->async()->PingReq(&c->ctx, &c->req, &c->resp,
                           [this, c](grpc::Status s) { OnPingReq(c, s); });
  }

  void OnPingReq(PingReqCall* c, const grpc::Status& s) {
    std::unique_ptr<PingReqCall> call(c);
    {
      std::lock_guard lock(mu_);
      const double now = MonotonicSeconds();
      const std::string& target = call->req.target();
      std::string error = s.ok() ? CheckHeader(call->resp.header()) : "";
      if (s.ok() && error.empty()) {
        stats_.messages_received++;
        stats_.bytes_received += static_cast<int64_t>(call->resp.ByteSizeLong());
        Contact(call->resp.header(), call->helper, now);
        ApplyGossip(call->resp.gossip(), call->helper, now);
      } else {
        stats_.errors++;
      }
      Indirect& probe = indirect_[target];
      probe.reached |= s.ok() && error.empty() && call->resp.reached();
      if (--probe.outstanding <= 0) {
        membership_.OnIndirectResult(target, probe.reached, now);
        indirect_.erase(target);
        DrainMembership();
      }
    }
    End(&call->ctx);
  }

  void SendSync(const std::string& target) {
    auto call = std::make_unique<SyncCall>();
    call->target = target;
    call->ctx.set_deadline(After(2000));
    v1::Exchange::Stub* stub = nullptr;
    {
      std::lock_guard lock(mu_);
      if (!Begin(&call->ctx)) return;
      FillHeader(call->req.mutable_header());
      std::string next;
      if (!joined_) {
        // A full pull in pages: this node has just started and knows nothing yet.
        call->req.set_all(true);
        call->req.set_after(join_cursor_);
        call->req.set_max_records(512);
      } else {
        for (v1::Digest& d : records_.DigestSlice(sync_cursor_, options_.sync_slice, &next)) {
          *call->req.add_known() = std::move(d);
        }
        sync_cursor_ = next;
      }
      stats_.messages_sent++;
      stats_.bytes_sent += static_cast<int64_t>(call->req.ByteSizeLong());
      stub = StubFor(target);
    }
    SyncCall* c = call.release();
    stub->async()->Sync(&c->ctx, &c->req, &c->resp, [this, c](grpc::Status s) { OnSync(c, s); });
  }

  void OnSync(SyncCall* c, const grpc::Status& s) {
    std::unique_ptr<SyncCall> call(c);
    {
      std::lock_guard lock(mu_);
      std::string error = s.ok() ? CheckHeader(call->resp.header()) : "";
      if (s.ok() && error.empty()) {
        const double now = MonotonicSeconds();
        stats_.messages_received++;
        stats_.bytes_received += static_cast<int64_t>(call->resp.ByteSizeLong());
        Contact(call->resp.header(), call->target, now);
        v1::Gossip records;
        for (int i = 0; i < std::min(call->resp.records_size(), kMaxGossipItems); ++i) {
          *records.add_records() = call->resp.records(i);
        }
        ApplyGossip(records, call->target, now);
        if (call->req.all()) {
          if (call->resp.more() && call->resp.records_size() > 0) {
            join_cursor_ = call->resp.records(call->resp.records_size() - 1).node();
          } else {
            joined_ = true;
          }
        }
      } else {
        stats_.errors++;
      }
    }
    End(&call->ctx);
  }

  // ---- Server side. ----

  grpc::Status HandlePing(const v1::PingRequest& req, v1::PingResponse* resp) {
    std::lock_guard lock(mu_);
    stats_.messages_received++;
    stats_.bytes_received += static_cast<int64_t>(req.ByteSizeLong());
    if (grpc::Status bad = Refuse(req.header(), req.ByteSizeLong()); !bad.ok()) return bad;
    const double now = MonotonicSeconds();
    const std::string from = Canonical(req.header().node());
    membership_.OnContact(WithNode(req.header(), from), now);
    ApplyGossip(req.gossip(), from, now);
    FillHeader(resp->mutable_header());
    queue_.Fill(resp->mutable_gossip(), options_.gossip_budget_bytes,
                membership_.RetransmitLimit());
    if (auto hint = membership_.HintFor(from)) *resp->mutable_gossip()->add_members() = *hint;
    stats_.messages_sent++;
    stats_.bytes_sent += static_cast<int64_t>(resp->ByteSizeLong());
    return grpc::Status::OK;
  }

  void HandlePingReq(const v1::PingReqRequest& req, v1::PingReqResponse* resp,
                     grpc::ServerUnaryReactor* reactor) {
    int timeout_ms = 0;
    {
      std::lock_guard lock(mu_);
      stats_.messages_received++;
      stats_.bytes_received += static_cast<int64_t>(req.ByteSizeLong());
      if (grpc::Status bad = Refuse(req.header(), req.ByteSizeLong()); !bad.ok()) {
        reactor->Finish(bad);
        return;
      }
      if (req.target().empty() || req.target().size() > 256) {
        reactor->Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "PingReq without target"));
        return;
      }
      if (indirect_serving_ >= kMaxConcurrentIndirect) {
        reactor->Finish(
            grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "too many indirect probes at once"));
        return;
      }
      const double now = MonotonicSeconds();
      const std::string from = Canonical(req.header().node());
      membership_.OnContact(WithNode(req.header(), from), now);
      ApplyGossip(req.gossip(), from, now);
      ++indirect_serving_;
      timeout_ms = std::clamp<int>(static_cast<int>(req.timeout_ms()), 50, 2000);
    }
    SendPing(req.target(), Kind::kForIndirect, timeout_ms, reactor, resp);
  }

  grpc::Status HandleSync(const v1::SyncRequest& req, v1::SyncResponse* resp) {
    std::lock_guard lock(mu_);
    stats_.messages_received++;
    stats_.bytes_received += static_cast<int64_t>(req.ByteSizeLong());
    if (grpc::Status bad = Refuse(req.header(), req.ByteSizeLong()); !bad.ok()) return bad;
    if (req.known_size() > kMaxGossipItems) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "Sync with too many digests");
    }
    membership_.OnContact(WithNode(req.header(), Canonical(req.header().node())),
                          MonotonicSeconds());
    FillHeader(resp->mutable_header());
    records_.Answer(req, kSyncAnswerBytes, resp);
    stats_.messages_sent++;
    stats_.bytes_sent += static_cast<int64_t>(resp->ByteSizeLong());
    return grpc::Status::OK;
  }

  // ---- Shared by both sides (caller holds mu_). ----

  // Why a peer's message is not for this node, in words; "" when it is.
  std::string CheckHeader(const v1::Header& h) const {
    if (h.protocol_version() != kExchangeProtocolVersion) {
      return absl::StrCat("speaks exchange protocol ", h.protocol_version(), ", this sidecar ",
                          kExchangeProtocolVersion, ": run the same trainscope version");
    }
    if (h.cluster() != options_.cluster) {
      return absl::StrCat("belongs to cluster \"", CleanText(h.cluster(), 80), "\", not \"",
                          options_.cluster, "\"");
    }
    if (h.node().empty() || h.node().size() > 256) return "sent no node id";
    return "";
  }

  grpc::Status Refuse(const v1::Header& h, size_t bytes) {
    std::string why = CheckHeader(h);
    if (why.empty() && bytes > options_.max_message_bytes) {
      why = absl::StrCat("sent ", bytes, " bytes (at most ", options_.max_message_bytes, ")");
    }
    if (why.empty()) return grpc::Status::OK;
    stats_.errors++;
    NoteError(CleanText(h.node(), 256), why);
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        absl::StrCat("sidecar ", options_.self, " refuses ",
                                     CleanText(h.node(), 80), ": it ", why));
  }

  // The id a peer is known by here: the address this node reaches it at, when it calls itself
  // otherwise.
  std::string Canonical(const std::string& node) const {
    auto it = aliases_.find(node);
    return it == aliases_.end() ? node : it->second;
  }
  static v1::Header WithNode(const v1::Header& h, const std::string& node) {
    v1::Header copy = h;
    copy.set_node(node);
    return copy;
  }

  // A direct answer from `target`.
  void Contact(const v1::Header& h, const std::string& target, double now) {
    if (h.node() != target && !aliases_.count(h.node())) {
      spdlog::warn(
          "peer sidecar at {} calls itself {}: using {} (start it with --advertise_address {} "
          "or list it by its own name)",
          target, CleanText(h.node(), 80), target, target);
      aliases_[h.node()] = target;
    }
    membership_.OnContact(WithNode(h, target), now);
  }

  void ApplyGossip(const v1::Gossip& g, const std::string& from, double now) {
    const double now_unix = UnixSeconds();
    int n = 0;
    for (const v1::NodeRecord& r : g.records()) {
      if (++n > kMaxGossipItems) break;
      if (r.node() == options_.self) continue;  // Only this node writes its own record.
      v1::NodeRecord copy = r;
      copy.set_node(Canonical(r.node()));
      std::string why;
      switch (records_.Apply(copy, now_unix, &why)) {
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
      membership_.OnUpdate(copy, now);
    }
    DrainMembership();
  }

  // Logs a peer's error once per change of the error.
  void NoteError(const std::string& peer, const std::string& error) {
    std::string& last = last_error_[peer];
    if (last == error) return;
    last = error;
    spdlog::warn("peer sidecar {}: {}", peer, error);
  }

  const ExchangeOptions options_;
  const LocalViews local_;
  const uint64_t generation_;

  mutable std::mutex mu_;  // Guards everything below up to the thread's wake-up state.
  Membership membership_;
  NodeRecords records_;
  BroadcastQueue queue_;
  OwnRecord own_;
  ExchangeStats stats_;
  std::map<std::string, Indirect> indirect_;
  std::map<std::string, std::unique_ptr<v1::Exchange::Stub>> stubs_;
  std::map<std::string, std::string> aliases_;
  std::map<std::string, std::string> last_error_;
  std::set<grpc::ClientContext*> inflight_;
  std::condition_variable idle_cv_;
  int indirect_serving_ = 0;
  bool closing_ = false;
  bool joined_ = false;
  bool dirty_ = true;
  double published_at_ = 0;
  std::string join_cursor_;
  std::string sync_cursor_;

  mutable std::mutex snapshot_mu_;
  std::shared_ptr<const ExchangeSnapshot> snapshot_;  // Guarded by snapshot_mu_.

  std::mutex wake_mu_;  // Guards stop_ and poked_.
  std::condition_variable wake_cv_;
  bool stop_ = false;
  bool poked_ = false;
  std::thread thread_;

  Service service_;
};

PeerExchange::PeerExchange(ExchangeOptions options, LocalViews local)
    : impl_(std::make_unique<Impl>(std::move(options), std::move(local))) {}
PeerExchange::~PeerExchange() { Stop(); }
grpc::Service* PeerExchange::service() { return impl_->service(); }
void PeerExchange::Start() { impl_->Start(); }
void PeerExchange::Stop() { impl_->Stop(); }
void PeerExchange::Poke() { impl_->Poke(); }
std::shared_ptr<const ExchangeSnapshot> PeerExchange::snapshot() const { return impl_->snapshot(); }
ExchangeStats PeerExchange::stats() const { return impl_->stats(); }

}  // namespace trainscope::sidecar
