// Heartbeat: the answer a task gives its watchers; see heartbeat.h.
#include "heartbeat.h"

#include <algorithm>

#include "internal.h"
#include "ps_memory.h"
#include "task_status.h"
#include "trainscope/common/clock.h"
#include "trainscope/common/proc.h"
#include "trainscope/telemetry/tracing.h"

namespace trainscope {
namespace {

void FillPeerView(const PeerHealth::Snapshot& s, v1::PeerView* view) {
  *view->mutable_peer() = TaskIdToProto(s.peer);
  view->set_address(s.address);
  view->set_connected(s.connected);
  view->set_consecutive_failures(s.consecutive_failures);
  view->set_last_error(s.last_error);
  view->set_seconds_since_success(s.seconds_since_success);
  view->set_peer_incarnation(s.peer_incarnation);
  view->set_peer_listen_address(s.peer_listen_address);
  view->set_latency_seconds(s.latency_seconds);
  view->set_step_share(s.step_share);
  view->set_network_failure(s.network_failure);
  view->set_seconds_failing(s.seconds_failing);
}

// What the task waits on, and its peers' health.
void FillWaitingAndPeers(const TaskStatus::Snapshot& s, v1::HeartbeatResponse* response) {
  if (s.waiting) {
    v1::Waiting* waiting = response->mutable_waiting();
    waiting->set_what(s.waiting_what);
    waiting->set_since_unix_seconds(s.waiting_since_unix);
    for (const auto& peer : s.waiting_on) FillPeerView(peer, waiting->add_peers());
  }
  response->set_steps(s.steps);
  for (const auto& peer : s.peers) FillPeerView(peer, response->add_peers());
}

// The oldest 64 calls in flight, made and served.
void FillInflight(const InflightCalls& inflight, v1::HeartbeatResponse* response) {
  const double now = MonotonicSeconds();
  for (const InflightCalls::Call& c : inflight.Oldest(64)) {
    v1::InflightCall* out = response->add_inflight();
    out->set_method(c.method);
    *out->mutable_peer() = TaskIdToProto(c.peer);
    out->set_age_seconds(std::max(0.0, now - c.start));
    if (c.traced) {
      telemetry::SpanContext context;
      context.trace_id = c.trace_id;
      out->set_trace_id(context.TraceIdHex());
    }
    out->set_tid(c.tid);
    out->set_served(c.served);
  }
}

void FillResources(v1::ResourceUsage* resources) {
  ResourceUsage usage = ReadResourceUsage();
  resources->set_cpu_seconds(usage.cpu_seconds);
  resources->set_resident_bytes(usage.resident_bytes);
  resources->set_threads(usage.threads);
  resources->set_open_fds(usage.open_fds);
}

// Progress, and what a ps served.
void FillProgress(const TaskStatus::Snapshot& s, v1::HeartbeatResponse* response) {
  response->set_last_step_seconds(s.last_step_seconds);
  response->set_last_step_recovered(s.last_step_recovered);
  response->set_expects_progress(s.expects_progress);
  if (s.served_calls > 0) {
    v1::ServingStats* serving = response->mutable_serving();
    serving->set_calls(s.served_calls);
    serving->set_seconds(s.served_seconds);
    serving->set_queue_seconds(s.served_queue_seconds);
    serving->set_work_seconds(s.served_work_seconds);
  }
}

}  // namespace

Heartbeat::Heartbeat(const TaskStatus* status, v1::TaskIdentity identity,
                     std::string metrics_address, const PsMemory* ps_memory)
    : status_(status),
      identity_(std::move(identity)),
      metrics_address_(std::move(metrics_address)),
      ps_memory_(ps_memory) {}

void Heartbeat::Fill(v1::HeartbeatResponse* response) const {
  *response->mutable_identity() = identity_;
  const TaskStatus::Snapshot s = status_->Read();
  response->set_phase(static_cast<v1::Phase>(s.phase));
  FillWaitingAndPeers(s, response);
  FillInflight(status_->inflight(), response);
  FillResources(response->mutable_resources());
  response->set_unix_seconds(UnixSeconds());
  FillProgress(s, response);
  response->set_metrics_address(metrics_address_);
  // So that the sidecar can say a restarted ps came back with its checkpoint.
  if (ps_memory_ != nullptr) ps_memory_->Fill(response->mutable_ps_state());
}

}  // namespace trainscope
