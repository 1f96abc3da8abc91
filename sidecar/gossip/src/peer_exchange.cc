// The gossip exchange between sidecars over gRPC; see peer_exchange.h.
#include "trainscope/sidecar/peer_exchange.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "grpcpp/grpcpp.h"
#include "spdlog/spdlog.h"
#include "trainscope/common/call_gate.h"
#include "trainscope/common/clock.h"
#include "trainscope/common/cluster_spec.h"
#include "trainscope/common/grpc_channel.h"
#include "trainscope/common/grpc_tls.h"
#include "trainscope/common/rpc_error.h"
#include "trainscope/sidecar/v1/sidecar.grpc.pb.h"

namespace trainscope::sidecar {
namespace {

// Snapshots.Stacks requests answered at once; more are refused.
constexpr int kMaxConcurrentStacks = 4;

using std::chrono::milliseconds;

constexpr int kMaxConcurrentIndirect = 64;  // PingReq calls served at once.

std::chrono::system_clock::time_point After(int ms) {
  return std::chrono::system_clock::now() + milliseconds(ms);
}

uint64_t NowNanos() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

Now Clock() { return {MonotonicSeconds(), UnixSeconds()}; }

std::string Words(const grpc::Status& s, int deadline_ms) {
  return s.ok()
             ? ""
             : SummarizeRpcError(static_cast<int>(s.error_code()), s.error_message(), deadline_ms);
}

// A failed call that something at the address answered (refused it, spoke another protocol or
// TLS, or gave an error of its own): the network reaches that address.
bool OtherAnswered(const grpc::Status& s) {
  if (s.ok()) return false;
  const RpcFailure kind =
      ClassifyRpcError(static_cast<int>(s.error_code()), s.error_message(), 0).kind;
  return kind == RpcFailure::kRefused || kind == RpcFailure::kTls ||
         kind == RpcFailure::kApplication;
}

}  // namespace

class PeerExchange::Impl {
 public:
  Impl(ExchangeOptions options, LocalViews local,
       std::shared_ptr<grpc::ChannelCredentials> credentials)
      : local_(std::move(local)),
        credentials_(std::move(credentials)),
        keys_(options.keys),
        core_(std::move(options), NowNanos(), Clock()),
        service_(this) {
    snapshot_ = core_.Snapshot(Clock());
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
      core_.Leave();
      targets = core_.NewsTargets();
    }
    for (const std::string& t : targets) SendPing(t, Kind::kGoodbye, 200);
    WaitIdle(milliseconds(300));
    {
      std::lock_guard lock(mu_);
      closing_ = true;
      for (grpc::ClientContext* c : inflight_) c->TryCancel();
    }
    // A cancelled call's callback runs promptly; each one uses this object, so wait for all.
    WaitIdle(std::nullopt);
  }

  // Waits for the handlers still running; the server serving service() must be shut down.
  void CloseService() { gate_.Close(); }

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
    return core_.stats();
  }

 private:
  enum class Kind { kProbe, kGossip, kRelay, kGoodbye, kForIndirect };

  struct PingCall {
    grpc::ClientContext ctx;
    v1::PingRequest req;
    v1::PingResponse resp;
    std::string target;
    Kind kind = Kind::kGossip;
    double sent_s = 0;  // Monotonic.
    // kForIndirect: the PingReq being served, answered when this call ends.
    grpc::ServerUnaryReactor* reactor = nullptr;
    v1::PingReqResponse* reply = nullptr;
  };
  struct PingReqCall {
    grpc::ClientContext ctx;
    v1::PingReqRequest req;
    v1::PingReqResponse resp;
    std::string helper;
    double sent_s = 0;  // Monotonic.
  };
  struct SyncCall {
    grpc::ClientContext ctx;
    v1::SyncRequest req;
    v1::SyncResponse resp;
    std::string target;
    double sent_s = 0;  // Monotonic.
  };

  class Service final : public v1::Exchange::CallbackService {
   public:
    explicit Service(Impl* impl) : impl_(impl) {}
    grpc::ServerUnaryReactor* Ping(grpc::CallbackServerContext* ctx, const v1::PingRequest* req,
                                   v1::PingResponse* resp) override {
      auto* reactor = ctx->DefaultReactor();
      CallGate::Pass pass = impl_->gate_.Enter();
      if (!pass) return Stopping(reactor);
      reactor->Finish(impl_->Serve(*req, resp, *ctx,
                                   [&](Now now) { return impl_->core_.OnPing(*req, resp, now); }));
      return reactor;
    }
    grpc::ServerUnaryReactor* PingReq(grpc::CallbackServerContext* ctx,
                                      const v1::PingReqRequest* req,
                                      v1::PingReqResponse* resp) override {
      auto* reactor = ctx->DefaultReactor();
      CallGate::Pass pass = impl_->gate_.Enter();
      if (!pass) return Stopping(reactor);
      impl_->ServePingReq(*req, resp, reactor, *ctx);
      return reactor;
    }
    grpc::ServerUnaryReactor* Sync(grpc::CallbackServerContext* ctx, const v1::SyncRequest* req,
                                   v1::SyncResponse* resp) override {
      auto* reactor = ctx->DefaultReactor();
      CallGate::Pass pass = impl_->gate_.Enter();
      if (!pass) return Stopping(reactor);
      reactor->Finish(impl_->Serve(*req, resp, *ctx,
                                   [&](Now now) { return impl_->core_.OnSync(*req, resp, now); }));
      return reactor;
    }

   private:
    static grpc::ServerUnaryReactor* Stopping(grpc::ServerUnaryReactor* reactor) {
      reactor->Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "this sidecar is stopping"));
      return reactor;
    }

    Impl* impl_;
  };

  // ---- The timer thread. ----

  // What one round of the timer thread sends once mu_ is released.
  struct Round {
    std::vector<std::pair<std::string, Kind>> pings;
    std::optional<std::string> sync_target;
    bool changed = false;  // The published snapshot changed: on_change_ runs.
  };

  void Loop() {
    double next_period = MonotonicSeconds();
    double next_sync = next_period + core_.options().sync_interval_s;
    double published_at = 0;
    double relayed_at = 0;
    while (true) {
      if (!WaitForWake(next_period)) return;
      const Now now = Clock();
      const bool tick = now.s >= next_period;
      if (tick) {
        double period = 0;
        {
          std::lock_guard lock(mu_);
          period = core_.PeriodSeconds();
        }
        next_period = std::max(next_period + period, now.s);
      }
      const bool sync = tick && now.s >= next_sync;
      if (sync) next_sync = now.s + core_.options().sync_interval_s;
      std::vector<TaskView> views = local_();
      if (load_) {
        std::lock_guard lock(mu_);
        core_.SetOwnLoad(load_());
      }
      if (incidents_) {
        std::vector<v1::OwnedIncident> owned = incidents_();
        std::lock_guard lock(mu_);
        core_.SetOwnIncidents(std::move(owned));
      }
      const Round round = PlanRound(views, now, tick, sync, published_at, relayed_at);
      SendRound(round);
    }
  }

  // Waits until `next_period` or a poke; false when asked to stop.
  bool WaitForWake(double next_period) {
    std::unique_lock lock(wake_mu_);
    double wait = std::max(0.0, next_period - MonotonicSeconds());
    wake_cv_.wait_for(lock, std::chrono::duration<double>(wait), [&] { return stop_ || poked_; });
    if (stop_) return false;
    poked_ = false;
    return true;
  }

  // Under mu_: takes this node's `views`, and says whom to ping and sync with this round (news,
  // the period's probe and gossip, urgent probes); publishes the snapshot when it changed or
  // every second, and logs.
  Round PlanRound(const std::vector<TaskView>& views, Now now, bool tick, bool sync,
                  double& published_at, double& relayed_at) {
    Round round;
    std::lock_guard lock(mu_);
    // This node's own news goes out at once; news just learned from others too (each hop of
    // the epidemic then costs a round trip, not a period), at most every 50 ms.
    const bool own_news = core_.UpdateOwn(views, now);
    const bool relay = core_.HasFreshNews() && now.s - relayed_at >= 0.05;
    if (!tick && (own_news || relay)) {
      relayed_at = now.s;
      const Kind kind = own_news ? Kind::kGossip : Kind::kRelay;
      for (std::string& t : core_.NewsTargets()) round.pings.push_back({std::move(t), kind});
    }
    if (tick) {
      ExchangeCore::Period p = core_.OnPeriod(now, sync);
      if (p.probe) round.pings.push_back({*p.probe, Kind::kProbe});
      for (std::string& t : p.gossip) round.pings.push_back({std::move(t), Kind::kGossip});
      round.sync_target = p.sync;
    }
    while (auto urgent = core_.UrgentProbe(now)) round.pings.push_back({*urgent, Kind::kProbe});
    if (core_.dirty() || now.s - published_at >= 1.0) {
      round.changed = core_.dirty();
      Publish(now);
      published_at = now.s;
    }
    Log();
    return round;
  }

  // Sends the round's pings (each with its target's probe timeout) and sync, then tells
  // on_change_ when the snapshot changed.
  void SendRound(const Round& round) {
    for (const auto& [target, kind] : round.pings) {
      int timeout_ms = 0;
      {
        std::lock_guard lock(mu_);
        timeout_ms = core_.ProbeTimeoutMs(target);
      }
      SendPing(target, kind, timeout_ms);
    }
    if (round.sync_target) SendSync(*round.sync_target);
    if (round.changed && on_change_) on_change_();
  }

  // Caller holds mu_.
  void Publish(Now now) {
    auto s = core_.Snapshot(now);
    std::lock_guard lock(snapshot_mu_);
    snapshot_ = std::move(s);
  }
  void Log() {
    for (const std::string& line : core_.TakeLog()) spdlog::info("{}", line);
  }

  // ---- The cluster key (exchange_keys.h). ----

  // Signs an outgoing message when this node has a key.
  void Sign(google::protobuf::Message* message, Now now) const {
    if (keys_) keys_->Sign(message, now.unix);
  }
  // Whether an incoming message is the cluster's: signed with its key, recent and new; or,
  // without a key, unsigned. Out of mu_ (ExchangeKeys guards its own replay window): the MAC of
  // a Sync answer, which holds every node's record, is worked out while the exchange goes on.
  Verdict Authenticate(const google::protobuf::Message& message, Now now) const {
    return keys_ ? keys_->Verify(message, now.unix) : ExchangeKeys::VerifyUnkeyed(message);
  }
  // "" when `v` (Authenticate's verdict on a message from `address`) passed and, for a request
  // served (`ctx`), its caller's certificate names the member it speaks as; else why not:
  // counted and logged. Caller holds mu_.
  std::string Admit(Verdict v, const v1::Header& header, const std::string& address, Now now,
                    const grpc::ServerContextBase* ctx = nullptr) {
    if (v.ok() && ctx != nullptr) v = CheckCertificate(*ctx, header);
    if (v.ok()) return "";
    core_.NoteRefusal(v.refusal, address, v.why, now);
    return absl::StrCat("sidecar ", core_.options().self, " refuses the message: it ", v.why);
  }

  // Under mutual TLS, the caller's certificate must name the host of the member it speaks as:
  // another node's certificate, or one of a host that runs no member sidecar (a task's), does
  // not speak for a sidecar. Caller holds mu_.
  Verdict CheckCertificate(const grpc::ServerContextBase& ctx, const v1::Header& header) const {
    const std::vector<std::string> names = PeerCertificateNames(ctx);
    if (names.empty()) return {};  // Plain text, or TLS without client certificates.
    auto hp = ParseHostPort(header.node());
    if (!hp.ok() || core_.membership().Find(header.node()) == nullptr) {
      return {Refusal::kCertificate,
              absl::StrCat("speaks as ", CleanText(header.node(), 80),
                           ", which is no sidecar of this cluster's spec or --peer_sidecars")};
    }
    absl::Status named = CheckCertificateNamesHost(names, hp->host);
    if (named.ok()) return {};
    return {Refusal::kCertificate,
            absl::StrCat("speaks as sidecar ", header.node(), ", but ", named.message())};
  }

  // ---- Client side. ----

  // Shared: a stuck channel is replaced (below) while a caller, out of the lock, may still start
  // a call on the old one. Caller holds mu_.
  std::shared_ptr<v1::Exchange::Stub> StubFor(const std::string& target) {
    auto it = stubs_.find(target);
    if (it != stubs_.end() && !Stuck(target)) return it->second;
    ChannelOptions options;
    options.max_receive_bytes = static_cast<int>(core_.options().max_message_bytes);
    options.keepalive_without_calls = false;
    // After a heal, an attempt begun while the link was down holds the calls made on it for up
    // to the backoff: keep that short (and see Stuck).
    options.max_reconnect_ms = 250;
    options.own_connection = true;  // A new channel is a new connection attempt.
    std::shared_ptr<grpc::Channel> channel = MakeChannel(target, options, credentials_);
    channels_[target] = channel;
    made_at_[target] = MonotonicSeconds();
    std::shared_ptr<v1::Exchange::Stub> stub = v1::Exchange::NewStub(channel);
    stubs_[target] = stub;
    return stub;
  }

  // This node's channel to `target` is not connected, although the member was heard from
  // (directly, or alive again by the news) since the channel was made and since its last call
  // failed: the network works, but the channel's attempt may have begun while it did not (a
  // lost SYN is resent only after 1 s), or it waits out a backoff and fails calls at once with
  // the old error. Either way the next probe would make a member that is back suspect: a new
  // channel connects now. Backing off: at once (a sidecar that started just after this node's
  // first attempt was refused, and then called, would be refused "again" and held down);
  // connecting: when the attempt is 0.5 s old. Caller holds mu_.
  bool Stuck(const std::string& target) const {
    auto channel = channels_.find(target);
    const Member* m = core_.membership().Find(target);
    if (channel == channels_.end() || m == nullptr) return false;
    const grpc_connectivity_state state = channel->second->GetState(false);
    if (state != GRPC_CHANNEL_CONNECTING && state != GRPC_CHANNEL_TRANSIENT_FAILURE) return false;
    const double made = made_at_.at(target);
    auto failed = failed_at_.find(target);
    const double since = std::max(made, failed == failed_at_.end() ? made : failed->second);
    return std::max(m->last_contact, m->back_since) > since &&
           (state == GRPC_CHANNEL_TRANSIENT_FAILURE || MonotonicSeconds() - made >= 0.5);
  }

  // A call to `target` sent at `sent_s` failed (see Stuck). Caller holds mu_.
  void NoteFailed(const std::string& target, const std::string& error, double sent_s) {
    if (error.empty()) return;
    double& at = failed_at_[target];
    at = std::max(at, sent_s);
  }

  // Registers a call for cancellation; false when closing. Caller holds mu_.
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
  // Waits until no client call is in flight, for at most `bound` (none: until then).
  void WaitIdle(std::optional<milliseconds> bound) {
    std::unique_lock lock(mu_);
    if (bound) {
      idle_cv_.wait_for(lock, *bound, [&] { return inflight_.empty(); });
    } else {
      idle_cv_.wait(lock, [&] { return inflight_.empty(); });
    }
  }

  void SendPing(const std::string& target, Kind kind, int timeout_ms,
                grpc::ServerUnaryReactor* reactor = nullptr, v1::PingReqResponse* reply = nullptr) {
    auto call = std::make_unique<PingCall>();
    call->target = target;
    call->kind = kind;
    call->reactor = reactor;
    call->reply = reply;
    call->sent_s = Clock().s;
    call->ctx.set_deadline(After(timeout_ms));
    std::shared_ptr<v1::Exchange::Stub> stub;
    {
      std::unique_lock lock(mu_);
      if (!Begin(&call->ctx)) {
        if (reactor == nullptr) return;
        --indirect_serving_;
        core_.FillPingReqAnswer(false, "the sidecar asked to probe is stopping", reply);
        lock.unlock();
        Sign(reply, Clock());
        reactor->Finish(grpc::Status::OK);
        return;
      }
      core_.FillPing(target, &call->req, kind == Kind::kRelay);
      stub = StubFor(target);
    }
    Sign(&call->req, Clock());
    PingCall* c = call.release();
    stub->async()->Ping(&c->ctx, &c->req, &c->resp, [this, c](grpc::Status s) { OnPing(c, s); });
  }

  void OnPing(PingCall* c, const grpc::Status& s) {
    std::unique_ptr<PingCall> call(c);
    const std::string error = Words(s, core_.options().probe_timeout_ms);
    std::vector<std::string> helpers;
    bool news = false;
    const Verdict verdict = s.ok() ? Authenticate(call->resp, Clock()) : Verdict{};
    {
      std::lock_guard lock(mu_);
      NoteFailed(call->target, error, call->sent_s);
      const Now now = Clock();
      const std::string refused =
          s.ok() ? Admit(verdict, call->resp.header(), call->target, now) : "";
      helpers = core_.OnPingDone(call->target, call->kind == Kind::kProbe,
                                 refused.empty() ? error : refused, call->resp, now,
                                 OtherAnswered(s) || !refused.empty());
      if (call->reactor != nullptr) {
        --indirect_serving_;
        // Heard from the target since this ping went out: reached (what failed is this node's
        // connection to it, set up while the network was down).
        core_.FillPingReqAnswer(error.empty() || core_.HeardSince(call->target, call->sent_s),
                                error, call->reply);
      }
      Log();
      news = core_.dirty();
    }
    if (news) Poke();
    if (call->reactor != nullptr) {
      Sign(call->reply, Clock());
      call->reactor->Finish(grpc::Status::OK);
    }
    for (const std::string& h : helpers) SendPingReq(h, call->target);
    End(&call->ctx);
  }

  void SendPingReq(const std::string& helper, const std::string& target) {
    auto call = std::make_unique<PingReqCall>();
    call->helper = helper;
    call->sent_s = Clock().s;
    call->ctx.set_deadline(After(core_.options().indirect_timeout_ms + 100));
    std::shared_ptr<v1::Exchange::Stub> stub;
    {
      std::lock_guard lock(mu_);
      if (!Begin(&call->ctx)) return;
      core_.FillPingReq(target, &call->req);
      stub = StubFor(helper);
    }
    Sign(&call->req, Clock());
    PingReqCall* c = call.release();
    stub->async()->PingReq(&c->ctx, &c->req, &c->resp,
                           [this, c](grpc::Status s) { OnPingReq(c, s); });
  }

  void OnPingReq(PingReqCall* c, const grpc::Status& s) {
    std::unique_ptr<PingReqCall> call(c);
    const Verdict verdict = s.ok() ? Authenticate(call->resp, Clock()) : Verdict{};
    {
      std::lock_guard lock(mu_);
      const Now now = Clock();
      const std::string refused =
          s.ok() ? Admit(verdict, call->resp.header(), call->helper, now) : "";
      const std::string error =
          refused.empty() ? Words(s, core_.options().indirect_timeout_ms) : refused;
      NoteFailed(call->helper, error, call->sent_s);
      core_.OnPingReqDone(call->helper, call->req.target(), error, call->resp, now,
                          OtherAnswered(s) || !refused.empty());
      Log();
    }
    // The probe's outcome (a member reached only through others: a cut link) goes into this
    // node's record on the timer thread's next turn: now.
    Poke();
    End(&call->ctx);
  }

  void SendSync(const std::string& target) {
    auto call = std::make_unique<SyncCall>();
    call->target = target;
    call->sent_s = Clock().s;
    call->ctx.set_deadline(After(2000));
    std::shared_ptr<v1::Exchange::Stub> stub;
    {
      std::lock_guard lock(mu_);
      if (!Begin(&call->ctx)) return;
      core_.FillSync(&call->req);
      stub = StubFor(target);
    }
    Sign(&call->req, Clock());
    SyncCall* c = call.release();
    stub->async()->Sync(&c->ctx, &c->req, &c->resp, [this, c](grpc::Status s) { OnSync(c, s); });
  }

  void OnSync(SyncCall* c, const grpc::Status& s) {
    std::unique_ptr<SyncCall> call(c);
    bool news = false;
    const Verdict verdict = s.ok() ? Authenticate(call->resp, Clock()) : Verdict{};
    {
      std::lock_guard lock(mu_);
      const Now now = Clock();
      const std::string refused =
          s.ok() ? Admit(verdict, call->resp.header(), call->target, now) : "";
      const std::string error = refused.empty() ? Words(s, 2000) : refused;
      NoteFailed(call->target, error, call->sent_s);
      core_.OnSyncDone(call->target, call->req, error, call->resp, now);
      Log();
      news = core_.dirty();
    }
    if (news) Poke();
    End(&call->ctx);
  }

  // ---- Stacks of stuck tasks, between nodes. ----

 public:
  void SetStacksProvider(StacksProvider provider) { stacks_ = std::move(provider); }
  void SetEvidenceProvider(EvidenceProvider provider) { evidence_ = std::move(provider); }
  void SetOperatorCredential(OperatorCredential* credential) { credential_ = credential; }
  void SetLoadProvider(std::function<NodeLoad()> load) { load_ = std::move(load); }
  void SetIncidentsProvider(std::function<std::vector<v1::OwnedIncident>()> incidents) {
    incidents_ = std::move(incidents);
  }
  void SetOnChange(std::function<void()> on_change) { on_change_ = std::move(on_change); }
  grpc::Service* snapshots_service() { return &snapshots_; }

  grpc::Status ServeStacks(const v1::StacksRequest& req, v1::StackList* resp,
                           const grpc::ServerContextBase& ctx) {
    if (!stacks_) return grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "no snapshots here");
    return Limited([&] { return AnswerStacks(req, resp, ctx); });
  }

  grpc::Status ServeEvidence(const v1::EvidenceRequest& req, v1::NodeEvidence* resp,
                             const grpc::ServerContextBase& ctx) {
    if (!evidence_) return grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "no incidents here");
    return Limited([&] {
      if (grpc::Status refused = CheckAsker(req, req.header(), ctx); !refused.ok()) return refused;
      const ProofCheck proof = CheckProof(req.operator_proof(), req.incident());
      v1::NodeEvidence answer = evidence_(req.incident(), req.from_unix(), req.to_unix());
      if (proof != ProofCheck::kValid) {
        for (auto& e : *answer.mutable_incident()->mutable_evidence()) {
          if (e.has_snapshot()) StripAddresses(e.mutable_snapshot());
        }
      }
      FitEvidence(req.max_bytes() > 0 ? req.max_bytes() : (4 << 20), &answer);
      *resp = std::move(answer);
      return grpc::Status::OK;
    });
  }

  grpc::Status AnswerStacks(const v1::StacksRequest& req, v1::StackList* resp,
                            const grpc::ServerContextBase& ctx) {
    if (grpc::Status refused = CheckAsker(req, req.header(), ctx); !refused.ok()) return refused;
    const ProofCheck proof = CheckProof(req.operator_proof(), req.task());
    if (req.fresh() && proof != ProofCheck::kValid) {
      if (credential_ != nullptr) credential_->CountRefusal(ProofRefusalName(proof));
      return grpc::Status(grpc::StatusCode::PERMISSION_DENIED, FreshRefusal(proof, req.task()));
    }
    auto list = stacks_(req.task(), req.fresh());
    if (!list.ok()) {
      return grpc::Status(static_cast<grpc::StatusCode>(list.status().code()),
                          std::string(list.status().message()));
    }
    if (proof != ProofCheck::kValid) {
      for (pb::StackSnapshot& snapshot : *list->mutable_snapshots()) StripAddresses(&snapshot);
    }
    // Newest first; drop the oldest until the answer fits the asker's bound.
    const int64_t bound = req.max_bytes() > 0 ? req.max_bytes() : (4 << 20);
    while (list->snapshots_size() > 1 && static_cast<int64_t>(list->ByteSizeLong()) > bound) {
      list->mutable_snapshots()->RemoveLast();
    }
    if (static_cast<int64_t>(list->ByteSizeLong()) > bound) {
      return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                          absl::StrCat("the snapshot of ", req.task(), " is ", list->ByteSizeLong(),
                                       " bytes, over the asker's limit of ", bound));
    }
    *resp = *std::move(list);
    return grpc::Status::OK;
  }

  absl::StatusOr<v1::StackList> FetchStacks(const std::string& node, const std::string& task,
                                            bool fresh, int deadline_ms, int64_t max_bytes) {
    v1::StacksRequest req;
    req.set_task(task);
    req.set_fresh(fresh);
    req.set_max_bytes(max_bytes);
    Prove(node, task, req.mutable_operator_proof());
    v1::StackList resp;
    return Ask(node, &req, &resp, &v1::Snapshots::Stub::Stacks, deadline_ms, max_bytes,
               absl::StrCat("which watches ", task), absl::StrCat("the snapshot of ", task));
  }

  absl::StatusOr<v1::NodeEvidence> FetchEvidence(const std::string& node,
                                                 const std::string& incident, double from_unix,
                                                 double to_unix, int deadline_ms,
                                                 int64_t max_bytes) {
    v1::EvidenceRequest req;
    req.set_incident(incident);
    req.set_from_unix(from_unix);
    req.set_to_unix(to_unix);
    req.set_max_bytes(max_bytes);
    Prove(node, incident, req.mutable_operator_proof());
    v1::NodeEvidence resp;
    return Ask(node, &req, &resp, &v1::Snapshots::Stub::Evidence, deadline_ms, max_bytes,
               absl::StrCat("asked for ", incident), absl::StrCat("its evidence of ", incident));
  }

 private:
  // A proof of the operator's credential for asking `node` about `subject`, when this node
  // holds the token (else none: the answer then has no program counters, and no fresh capture).
  void Prove(const std::string& node, const std::string& subject, v1::OperatorProof* proof) {
    const std::string token = credential_ != nullptr ? credential_->Token() : "";
    if (token.empty()) return;
    *proof = ProveOperator(token, node, subject, static_cast<uint64_t>(Clock().unix * 1e9));
  }

  // Whether a Snapshots request about `subject` carries the operator's credential.
  ProofCheck CheckProof(const v1::OperatorProof& proof, const std::string& subject) {
    const std::string token = credential_ != nullptr ? credential_->Token() : "";
    return proofs_.Check(proof, subject, token, Clock().unix);
  }

  // Why a fresh capture of `task` asked over the exchange is refused, in words.
  std::string FreshRefusal(ProofCheck proof, const std::string& task) const {
    const std::string who =
        absl::StrCat("sidecar ", core_.options().self, " refuses a fresh capture of ", task, ": ");
    switch (proof) {
      case ProofCheck::kNoTokenFile:
        return absl::StrCat(who,
                            "it has no --api_token_file, and fresh captures need the "
                            "operator's credential (give every node's sidecar the same token "
                            "file; docs/security.md)");
      case ProofCheck::kNoCredential:
        return absl::StrCat(who,
                            "the request carries no operator's credential (ask a sidecar's "
                            "HTTP API with Authorization: Bearer <token>: trainscopectl stacks "
                            "TASK --fresh --api_token_file FILE)");
      case ProofCheck::kBadToken:
        return absl::StrCat(who,
                            "the operator's credential does not hold here (the asking "
                            "sidecar's --api_token_file differs from this one's, or the proof "
                            "was made for another node or task)");
      case ProofCheck::kStale:
        return absl::StrCat(who, "the operator's credential was made more than ",
                            static_cast<int>(kProofWindowS), " s from this node's time");
      case ProofCheck::kReplayed:
        return absl::StrCat(who, "the operator's credential was used already");
      case ProofCheck::kValid:
        break;
    }
    return who;
  }

  // Runs `answer` unless kMaxConcurrentStacks Snapshots requests are being answered already.
  template <typename Answer>
  grpc::Status Limited(Answer answer) {
    if (stacks_serving_.fetch_add(1) >= kMaxConcurrentStacks) {
      stacks_serving_.fetch_sub(1);
      return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                          "too many snapshot requests at once; ask again");
    }
    grpc::Status status = answer();
    stacks_serving_.fetch_sub(1);
    return status;
  }

  // OK when a Snapshots request comes from a member; else the status that refuses it, saying why.
  grpc::Status CheckAsker(const google::protobuf::Message& req, const v1::Header& header,
                          const grpc::ServerContextBase& ctx) {
    const std::string address = ctx.peer();
    const Verdict verdict = Authenticate(req, Clock());
    std::lock_guard lock(mu_);
    const Now now = Clock();
    std::string why = Admit(verdict, header, address, now, &ctx);
    if (why.empty()) {
      why = core_.CheckHeader(header, now.unix);
      if (!why.empty()) core_.NoteRefusal(Refusal::kHeader, address, why, now);
    }
    Log();
    if (why.empty()) return grpc::Status::OK;
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        absl::StrCat("sidecar ", core_.options().self, " refuses: it ", why));
  }

  // The requests, then the snapshots, of `e` dropped (the last first) until it fits `bound`.
  static void FitEvidence(int64_t bound, v1::NodeEvidence* e) {
    if (static_cast<int64_t>(e->ByteSizeLong()) <= bound) return;
    int requests = 0;
    int snapshots = 0;
    // Room is left for the words that say what was left out.
    auto over = [&] { return static_cast<int64_t>(e->ByteSizeLong()) + 128 > bound; };
    for (auto* list :
         {e->mutable_errors()->mutable_requests(), e->mutable_slow()->mutable_requests()}) {
      for (; over() && !list->empty(); ++requests) list->RemoveLast();
    }
    auto* evidence = e->mutable_incident()->mutable_evidence();
    for (int i = evidence->size() - 1; i >= 0 && over(); --i) {
      if ((*evidence)[i].has_snapshot()) {
        (*evidence)[i].clear_snapshot();
        ++snapshots;
      }
    }
    if (requests + snapshots > 0) {
      e->set_dropped(absl::StrCat(requests, " request(s) and ", snapshots,
                                  " snapshot(s) left out, over the asker's limit of ", bound,
                                  " bytes"));
    }
  }

  // Calls `method` of the Snapshots service of `node` with `req` signed; errors in words that
  // name the node (`about`: "which watches worker:0") and, for an answer too large, `what`.
  template <typename Request, typename Response, typename Method>
  absl::StatusOr<Response> Ask(const std::string& node, Request* req, Response* resp, Method method,
                               int deadline_ms, int64_t max_bytes, const std::string& about,
                               const std::string& what) {
    v1::Snapshots::Stub* stub = nullptr;
    {
      std::lock_guard lock(mu_);
      core_.FillHeader(req->mutable_header());
      auto& slot = snapshot_stubs_[node];
      if (slot == nullptr) {
        ChannelOptions channel;
        channel.max_receive_bytes = static_cast<int>(std::max<int64_t>(max_bytes, 1 << 20));
        channel.keepalive_without_calls = false;
        // One call an operator waits on: a busy node's first answer may take longer than the
        // backoff's 100 ms (a refused connection still fails at once).
        channel.connect_timeout_ms = 2000;
        slot = v1::Snapshots::NewStub(MakeChannel(node, channel, credentials_));
      }
      stub = slot.get();
    }
    Sign(req, Clock());
    grpc::ClientContext ctx;
    ctx.set_deadline(After(deadline_ms));
    grpc::Status s = (stub->*method)(&ctx, *req, resp);
    if (!s.ok()) {
      const bool theirs = s.error_code() == grpc::StatusCode::NOT_FOUND ||
                          s.error_code() == grpc::StatusCode::FAILED_PRECONDITION ||
                          s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED;
      const std::string why = theirs ? s.error_message() : Words(s, deadline_ms);
      return absl::Status(
          static_cast<absl::StatusCode>(s.error_code()),
          absl::StrCat("the sidecar of node ", node, " (", about, ") answered: ", why));
    }
    if (static_cast<int64_t>(resp->ByteSizeLong()) > max_bytes) {
      return absl::ResourceExhaustedError(
          absl::StrCat(what, " from node ", node, " is over ", max_bytes, " bytes"));
    }
    return std::move(*resp);
  }

 private:
  // ---- Server side. ----

  // A request from a member. What it changed (records, a member's status) is published, and
  // told, at once: the timer thread is woken rather than left to its next period.
  // Checked and signed out of mu_: only the handler holds it.
  template <typename Request, typename Response, typename Handle>
  grpc::Status Serve(const Request& req, Response* resp, const grpc::ServerContextBase& ctx,
                     Handle handle) {
    const Verdict verdict = Authenticate(req, Clock());
    std::string why;
    bool news = false;
    {
      std::lock_guard lock(mu_);
      const Now now = Clock();
      why = Admit(verdict, req.header(), ctx.peer(), now, &ctx);
      if (why.empty()) why = handle(now);
      Log();
      news = core_.dirty();
    }
    if (why.empty()) Sign(resp, Clock());
    if (news) Poke();
    return why.empty() ? grpc::Status::OK
                       : grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, why);
  }

  void ServePingReq(const v1::PingReqRequest& req, v1::PingReqResponse* resp,
                    grpc::ServerUnaryReactor* reactor, const grpc::ServerContextBase& ctx) {
    int timeout_ms = 0;
    std::string dial;  // The member's own id: never the string the request gave.
    const Verdict verdict = Authenticate(req, Clock());
    {
      std::lock_guard lock(mu_);
      const Now now = Clock();
      std::string why = Admit(verdict, req.header(), ctx.peer(), now, &ctx);
      if (why.empty()) why = core_.OnPingReq(req, now, &dial);
      Log();
      if (core_.dirty()) Poke();
      if (!why.empty()) {
        reactor->Finish(grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, why));
        return;
      }
      if (indirect_serving_ >= kMaxConcurrentIndirect) {
        reactor->Finish(
            grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "too many indirect probes at once"));
        return;
      }
      ++indirect_serving_;
      timeout_ms = std::clamp<int>(static_cast<int>(req.timeout_ms()), 50, 2000);
    }
    SendPing(dial, Kind::kForIndirect, timeout_ms, reactor, resp);
  }

  const LocalViews local_;
  const std::shared_ptr<grpc::ChannelCredentials> credentials_;  // Null: plain text.

  const std::shared_ptr<ExchangeKeys> keys_;  // Null: unauthenticated.
  mutable std::mutex mu_;                     // Guards the core and the call bookkeeping below.
  ExchangeCore core_;
  std::map<std::string, std::shared_ptr<v1::Exchange::Stub>> stubs_;
  std::map<std::string, std::shared_ptr<grpc::Channel>> channels_;  // Of stubs_, by target.
  std::map<std::string, double> made_at_;    // When each channel was made (monotonic).
  std::map<std::string, double> failed_at_;  // When a call on it last failed (monotonic).
  std::set<grpc::ClientContext*> inflight_;
  std::condition_variable idle_cv_;
  int indirect_serving_ = 0;
  bool closing_ = false;

  mutable std::mutex snapshot_mu_;
  std::shared_ptr<const ExchangeSnapshot> snapshot_;  // Guarded by snapshot_mu_.

  std::mutex wake_mu_;  // Guards stop_ and poked_.
  std::condition_variable wake_cv_;
  bool stop_ = false;
  bool poked_ = false;
  std::thread thread_;

  // Snapshots.Stacks, a synchronous service (its handlers run on the server's threads, and the
  // server's shutdown waits for them).
  class SnapshotsService final : public v1::Snapshots::Service {
   public:
    explicit SnapshotsService(Impl* impl) : impl_(impl) {}
    grpc::Status Stacks(grpc::ServerContext* ctx, const v1::StacksRequest* req,
                        v1::StackList* resp) override {
      return impl_->ServeStacks(*req, resp, *ctx);
    }
    grpc::Status Evidence(grpc::ServerContext* ctx, const v1::EvidenceRequest* req,
                          v1::NodeEvidence* resp) override {
      return impl_->ServeEvidence(*req, resp, *ctx);
    }

   private:
    Impl* impl_;
  };
  StacksProvider stacks_;                                      // Set before Start.
  EvidenceProvider evidence_;                                  // Set before Start.
  OperatorCredential* credential_ = nullptr;                   // Set before Start.
  ProofChecker proofs_{core_.options().self};                  // Proofs of this node's askers.
  std::function<NodeLoad()> load_;                             // Set before Start.
  std::function<std::vector<v1::OwnedIncident>()> incidents_;  // Set before Start.
  std::function<void()> on_change_;                            // Set before Start.
  std::atomic<int> stacks_serving_{0};                         // Stacks requests being answered.
  std::map<std::string, std::unique_ptr<v1::Snapshots::Stub>> snapshot_stubs_;  // Guarded by mu_.
  SnapshotsService snapshots_{this};
  CallGate gate_;  // The service's handlers pass it; closed before this object goes.
  Service service_;
};

PeerExchange::PeerExchange(ExchangeOptions options, LocalViews local,
                           std::shared_ptr<grpc::ChannelCredentials> credentials)
    : impl_(std::make_unique<Impl>(std::move(options), std::move(local), std::move(credentials))) {}
PeerExchange::~PeerExchange() {
  Stop();
  impl_->CloseService();
}
grpc::Service* PeerExchange::service() { return impl_->service(); }
void PeerExchange::Start() { impl_->Start(); }
void PeerExchange::Stop() { impl_->Stop(); }
void PeerExchange::Poke() { impl_->Poke(); }
std::shared_ptr<const ExchangeSnapshot> PeerExchange::snapshot() const { return impl_->snapshot(); }
ExchangeStats PeerExchange::stats() const { return impl_->stats(); }
grpc::Service* PeerExchange::snapshots_service() { return impl_->snapshots_service(); }
void PeerExchange::SetOnChange(std::function<void()> on_change) {
  impl_->SetOnChange(std::move(on_change));
}
void PeerExchange::SetStacksProvider(StacksProvider provider) {
  impl_->SetStacksProvider(std::move(provider));
}

void PeerExchange::SetLoadProvider(std::function<NodeLoad()> load) {
  impl_->SetLoadProvider(std::move(load));
}
void PeerExchange::SetIncidentsProvider(std::function<std::vector<v1::OwnedIncident>()> incidents) {
  impl_->SetIncidentsProvider(std::move(incidents));
}
void PeerExchange::SetEvidenceProvider(EvidenceProvider provider) {
  impl_->SetEvidenceProvider(std::move(provider));
}
void PeerExchange::SetOperatorCredential(OperatorCredential* credential) {
  impl_->SetOperatorCredential(credential);
}
absl::StatusOr<pb::NodeEvidence> PeerExchange::FetchEvidence(const std::string& node,
                                                             const std::string& incident,
                                                             double from_unix, double to_unix,
                                                             int deadline_ms, int64_t max_bytes) {
  return impl_->FetchEvidence(node, incident, from_unix, to_unix, deadline_ms, max_bytes);
}
absl::StatusOr<pb::StackList> PeerExchange::FetchStacks(const std::string& node,
                                                        const std::string& task, bool fresh,
                                                        int deadline_ms, int64_t max_bytes) {
  return impl_->FetchStacks(node, task, fresh, deadline_ms, max_bytes);
}

}  // namespace trainscope::sidecar
