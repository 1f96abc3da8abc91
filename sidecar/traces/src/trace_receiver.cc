// OTLP Export on the sidecar: validation, conversion and forwarding; see trace_receiver.h.
#include "trainscope/sidecar/trace_receiver.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "grpcpp/grpcpp.h"
#include "spdlog/spdlog.h"
#include "trainscope/common/backoff.h"
#include "trainscope/common/clock.h"
#include "trainscope/common/resolve.h"

namespace trainscope::sidecar {
namespace {

namespace otlp_common = ::opentelemetry::proto::common::v1;
namespace otlp_trace = ::opentelemetry::proto::trace::v1;

constexpr size_t kMaxString = 256;
constexpr size_t kMaxMessage = 1024;
constexpr int kMaxAttributes = 64;
constexpr int kMaxEvents = 16;

std::string Cut(const std::string& s, size_t max = kMaxString) {
  return s.size() <= max ? s : s.substr(0, max - 3) + "...";
}

bool AllZero(const std::string& bytes) {
  return std::all_of(bytes.begin(), bytes.end(), [](char c) { return c == 0; });
}

std::string StringValue(const otlp_common::AnyValue& v) {
  switch (v.value_case()) {
    case otlp_common::AnyValue::kStringValue:
      return Cut(v.string_value());
    case otlp_common::AnyValue::kIntValue:
      return std::to_string(v.int_value());
    default:
      return "";
  }
}

int64_t IntValue(const otlp_common::AnyValue& v, int64_t def) {
  switch (v.value_case()) {
    case otlp_common::AnyValue::kIntValue:
      return v.int_value();
    case otlp_common::AnyValue::kDoubleValue:
      return std::isfinite(v.double_value()) && std::abs(v.double_value()) < 9e18
                 ? static_cast<int64_t>(v.double_value())
                 : def;
    case otlp_common::AnyValue::kStringValue: {
      int64_t out = 0;
      return absl::SimpleAtoi(v.string_value(), &out) ? out : def;
    }
    default:
      return def;
  }
}

// The task a resource names: service.instance.id ("worker:0"), else trainscope.role:task.
std::string ResourceTask(const otlp_trace::ResourceSpans& rs, std::string* service) {
  std::string instance, role, index;
  int n = 0;
  for (const otlp_common::KeyValue& kv : rs.resource().attributes()) {
    if (++n > kMaxAttributes) break;
    if (kv.key() == "service.instance.id") instance = StringValue(kv.value());
    if (kv.key() == "trainscope.role") role = StringValue(kv.value());
    if (kv.key() == "trainscope.task") index = StringValue(kv.value());
    if (kv.key() == "service.name") *service = StringValue(kv.value());
  }
  if (!role.empty() && !index.empty()) return absl::StrCat(role, ":", index);
  return instance;
}

SpanKind Kind(otlp_trace::Span::SpanKind k) {
  switch (k) {
    case otlp_trace::Span::SPAN_KIND_INTERNAL:
      return SpanKind::kInternal;
    case otlp_trace::Span::SPAN_KIND_SERVER:
      return SpanKind::kServer;
    case otlp_trace::Span::SPAN_KIND_CLIENT:
      return SpanKind::kClient;
    case otlp_trace::Span::SPAN_KIND_UNSPECIFIED:
      return SpanKind::kUnspecified;
    default:
      return SpanKind::kOther;
  }
}

// Why a span is unusable, or "" when it is fine.
std::string Invalid(const otlp_trace::Span& s) {
  if (s.trace_id().size() != 16) {
    return absl::StrCat("trace_id of ", s.trace_id().size(), " bytes (want 16)");
  }
  if (AllZero(s.trace_id())) return "trace_id all zero";
  if (s.span_id().size() != 8) {
    return absl::StrCat("span_id of ", s.span_id().size(), " bytes (want 8)");
  }
  if (AllZero(s.span_id())) return "span_id all zero";
  if (!s.parent_span_id().empty() && s.parent_span_id().size() != 8) {
    return absl::StrCat("parent_span_id of ", s.parent_span_id().size(), " bytes (want 0 or 8)");
  }
  return "";
}

// The span attributes the store reads (at most kMaxAttributes looked at), into `r`.
void ReadSpanAttributes(const otlp_trace::Span& s, SpanRecord& r) {
  int n = 0;
  for (const otlp_common::KeyValue& kv : s.attributes()) {
    if (++n > kMaxAttributes) break;
    const std::string& k = kv.key();
    if (k == "rpc.grpc.status_code") {
      int64_t code = IntValue(kv.value(), -1);
      r.grpc_status_code = code >= 0 && code < 1000 ? static_cast<int>(code) : -1;
    } else if (k == "trainscope.peer_task") {
      r.peer_task = StringValue(kv.value());
    } else if (k == "net.peer.name") {
      r.net_peer_name = StringValue(kv.value());
    } else if (k == "rpc.deadline_ms") {
      r.deadline_ms = IntValue(kv.value(), -1);
    } else if (k == "rpc.request.bytes") {
      r.request_bytes = IntValue(kv.value(), -1);
    } else if (k == "rpc.response.bytes") {
      r.response_bytes = IntValue(kv.value(), -1);
    } else if (k == "trainscope.kept") {
      r.kept = StringValue(kv.value());
    }
  }
}

// The span's first kMaxEvents events, each with its name, time and duration_ns, into `r`.
void ReadSpanEvents(const otlp_trace::Span& s, SpanRecord& r) {
  for (const otlp_trace::Span::Event& e : s.events()) {
    if (static_cast<int>(r.events.size()) >= kMaxEvents) break;
    SpanEventRecord ev;
    ev.name = Cut(e.name());
    ev.time_unix_nano = e.time_unix_nano();
    int m = 0;
    for (const otlp_common::KeyValue& kv : e.attributes()) {
      if (++m > kMaxAttributes) break;
      if (kv.key() == "duration_ns") ev.duration_ns = IntValue(kv.value(), -1);
    }
    r.events.push_back(std::move(ev));
  }
}

// A valid span (Invalid() said "") of `task`'s `service` as the store keeps it.
SpanRecord ConvertSpan(const otlp_trace::Span& s, const std::string& task,
                       const std::string& service) {
  SpanRecord r;
  r.trace_id = HexId(s.trace_id());
  r.span_id = HexId(s.span_id());
  if (!s.parent_span_id().empty() && !AllZero(s.parent_span_id())) {
    r.parent_span_id = HexId(s.parent_span_id());
  }
  r.name = Cut(s.name());
  r.kind = Kind(s.kind());
  r.start_unix_nano = s.start_time_unix_nano();
  r.end_unix_nano = s.end_time_unix_nano();
  r.status_code = static_cast<int>(s.status().code());
  r.status_message = Cut(s.status().message(), kMaxMessage);
  r.task = task;
  r.service_name = service;
  ReadSpanAttributes(s, r);
  ReadSpanEvents(s, r);
  return r;
}

}  // namespace

ConvertResult ConvertExport(const otlp::ExportTraceServiceRequest& request) {
  ConvertResult out;
  for (const otlp_trace::ResourceSpans& rs : request.resource_spans()) {
    std::string service;
    const std::string task = ResourceTask(rs, &service);
    for (const otlp_trace::ScopeSpans& ss : rs.scope_spans()) {
      for (const otlp_trace::Span& s : ss.spans()) {
        ++out.total;
        if (std::string why = Invalid(s); !why.empty()) {
          ++out.invalid;
          if (out.first_error.empty()) out.first_error = absl::StrCat("span skipped: ", why);
          continue;
        }
        out.spans.push_back(ConvertSpan(s, task, service));
      }
    }
  }
  return out;
}

absl::StatusOr<std::unique_ptr<OtlpForwarder>> OtlpForwarder::Create(const std::string& endpoint,
                                                                     size_t max_queue_bytes,
                                                                     int deadline_ms) {
  std::string target = endpoint;
  bool tls = false;
  if (absl::StartsWith(target, "http://")) {
    target = target.substr(7);
  } else if (absl::StartsWith(target, "https://")) {
    target = target.substr(8);
    tls = true;
  } else if (absl::StrContains(target, "://")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "OTLP upstream \"", endpoint, "\": only http://host:port or https://host:port"));
  }
  while (!target.empty() && target.back() == '/') target.pop_back();
  size_t colon = target.rfind(':');
  if (target.empty() || colon == std::string::npos || colon + 1 >= target.size() ||
      target.find('/') != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("OTLP upstream \"", endpoint, "\" is not http://host:port"));
  }
  std::unique_ptr<OtlpForwarder> f(new OtlpForwarder);
  f->target_ = target;
  f->deadline_ms_ = deadline_ms;
  f->max_queue_bytes_ = max_queue_bytes;
  auto creds = tls ? grpc::SslCredentials(grpc::SslCredentialsOptions())
                   : grpc::InsecureChannelCredentials();
  f->stub_ = otlp::TraceService::NewStub(grpc::CreateChannel(target, creds));
  f->thread_ = std::thread([p = f.get()] { p->Loop(); });
  return f;
}

OtlpForwarder::~OtlpForwarder() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

bool OtlpForwarder::Enqueue(const otlp::ExportTraceServiceRequest& request, int64_t spans) {
  const size_t bytes = request.ByteSizeLong();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_ || queue_bytes_ + bytes > max_queue_bytes_) {
      dropped_.fetch_add(spans, std::memory_order_relaxed);
      return false;
    }
    queue_bytes_ += bytes;
    queue_.push_back({request, spans, bytes});
  }
  cv_.notify_one();
  return true;
}

void OtlpForwarder::Loop() {
  Backoff backoff({.initial_s = 0.05, .max_s = 1, .multiplier = 2, .jitter = 0.2});
  std::string last_error;
  while (true) {
    Item item;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (stop_) return;
      item = std::move(queue_.front());
      queue_.pop_front();
      queue_bytes_ -= item.bytes;
    }
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(deadline_ms_));
    otlp::ExportTraceServiceResponse resp;
    grpc::Status s = stub_->Export(&ctx, item.request, &resp);
    if (s.ok()) {
      const int64_t rejected =
          std::clamp<int64_t>(resp.partial_success().rejected_spans(), 0, item.spans);
      forwarded_.fetch_add(item.spans - rejected, std::memory_order_relaxed);
      dropped_.fetch_add(rejected, std::memory_order_relaxed);
      if (!last_error.empty()) spdlog::info("OTLP upstream {}: exporting again", target_);
      last_error.clear();
      backoff.Reset();
      continue;
    }
    failures_.fetch_add(1, std::memory_order_relaxed);
    dropped_.fetch_add(item.spans, std::memory_order_relaxed);
    std::string error = absl::StrCat(static_cast<int>(s.error_code()), " ", s.error_message());
    if (error != last_error) {
      spdlog::warn("OTLP upstream {}: export failed ({}); spans are dropped until it answers",
                   target_, s.error_message());
      last_error = error;
    }
    // Do not spin on a dead upstream: the queue fills meanwhile, and drops.
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, std::chrono::milliseconds(backoff.NextDelayMs()), [&] { return stop_; });
    if (stop_) return;
  }
}

OtlpForwarder::Stats OtlpForwarder::stats() const {
  return {forwarded_.load(std::memory_order_relaxed), dropped_.load(std::memory_order_relaxed),
          failures_.load(std::memory_order_relaxed)};
}

bool IsNodeLocalPeer(const std::string& peer, const SpanSenders& senders) {
  return trainscope::IsNodeLocalPeer(peer, senders.addresses);
}

TraceReceiver::TraceReceiver(TraceStore* store, OtlpForwarder* forwarder, SpanSenders senders)
    : store_(store), forwarder_(forwarder), senders_(std::move(senders)) {}

grpc::Status TraceReceiver::Export(grpc::ServerContext* context,
                                   const otlp::ExportTraceServiceRequest* request,
                                   otlp::ExportTraceServiceResponse* response) {
  // No context: called in-process (the fuzzer), not over the network.
  const std::string peer = context != nullptr ? context->peer() : "unix:in-process";
  if (!IsNodeLocalPeer(peer, senders_)) {
    const auto auth = context->auth_context();
    if (auth == nullptr || !auth->IsPeerAuthenticated()) {
      refused_.fetch_add(1, std::memory_order_relaxed);
      const double now = MonotonicSeconds();
      double logged = refusal_logged_at_.load(std::memory_order_relaxed);
      if (now - logged >= 60 && refusal_logged_at_.compare_exchange_strong(logged, now)) {
        spdlog::warn(
            "trainscope-sidecar: refused OTLP spans from {}: not this node, and no verified "
            "client certificate (not repeated for a minute)",
            peer);
      }
      return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                          "this trainscope sidecar takes spans only from its own node (loopback, "
                          "its addresses, its tasks) or over mutual TLS (docs/security.md)");
    }
  }
  requests_.fetch_add(1, std::memory_order_relaxed);
  ConvertResult c = ConvertExport(*request);
  received_.fetch_add(c.total, std::memory_order_relaxed);
  invalid_.fetch_add(c.invalid, std::memory_order_relaxed);
  if (forwarder_ != nullptr && c.total > 0) forwarder_->Enqueue(*request, c.total);
  if (!c.spans.empty()) store_->Add(std::move(c.spans), MonotonicSeconds());
  if (c.invalid > 0) {
    response->mutable_partial_success()->set_rejected_spans(c.invalid);
    response->mutable_partial_success()->set_error_message(c.first_error);
  }
  return grpc::Status::OK;
}

TraceReceiver::Stats TraceReceiver::stats() const {
  return {requests_.load(std::memory_order_relaxed), received_.load(std::memory_order_relaxed),
          invalid_.load(std::memory_order_relaxed), refused_.load(std::memory_order_relaxed)};
}

}  // namespace trainscope::sidecar
