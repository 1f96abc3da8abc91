// Lock-free recorders for gRPC call metrics and their rendering at scrape time; see metrics.h.
#include "trainscope/telemetry/metrics.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "prometheus/client_metric.h"
#include "prometheus/metric_family.h"
#include "trainscope/telemetry/names.h"

namespace trainscope::telemetry {
namespace {

constexpr const char* kMethods[] = {
    "trainscope.v1.ParameterService/Pull",
    "trainscope.v1.ParameterService/Push",
    "trainscope.v1.ParameterService/CreateVariable",
    "trainscope.v1.TaskService/Handshake",
    "trainscope.v1.TaskService/Done",
    "trainscope.v1.TaskService/Heartbeat",
    "trainscope.v1.TaskService/InjectFault",
    "grpc.health.v1.Health/Check",
    "grpc.health.v1.Health/Watch",
    "opentelemetry.proto.collector.trace.v1.TraceService/Export",
    "other",
};
constexpr int kNumMethods = static_cast<int>(std::size(kMethods));
static_assert(kNumMethods == methods::kOther + 1);
constexpr int kNumStatuses = 17;
// The per-peer counters are kept for the calls of every step only (Pull and Push: methods 0
// and 1), whose latency per ps finds the slow one. A worker of a 100-ps cluster then exports
// 100 x 2 x 4 of them (800 of its ~1,700 series); the other methods are counted by peer role in
// the A66 families.
constexpr int kPerPeerMethods = methods::kPush + 1;
static_assert(methods::kPull == 0 && methods::kPush == 1);
// Status code names as gRPC and abseil spell them ("DEADLINE_EXCEEDED").
const std::string& StatusName(int code) {
  static const auto* names = [] {
    auto* v = new std::vector<std::string>;
    for (int c = 0; c < kNumStatuses; ++c) {
      v->push_back(absl::StatusCodeToString(static_cast<absl::StatusCode>(c)));
    }
    return v;
  }();
  return (*names)[code];
}
constexpr double kRatioBuckets[] = {0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 1.0};

void AddAtomic(std::atomic<double>& target, double value) {
  target.fetch_add(value, std::memory_order_relaxed);
}

}  // namespace

AtomicHistogram::AtomicHistogram(std::span<const double> bounds)
    : bounds_(bounds), buckets_(new std::atomic<uint64_t>[bounds.size() + 1]) {
  for (size_t i = 0; i <= bounds_.size(); ++i) buckets_[i].store(0);
}

void AtomicHistogram::Observe(double value) {
  // Prometheus buckets are "less than or equal": the first bound >= value.
  const size_t i = std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin();
  buckets_[i].fetch_add(1, std::memory_order_relaxed);
  AddAtomic(sum_, value);
}

uint64_t AtomicHistogram::count() const {
  uint64_t n = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) n += buckets_[i].load(std::memory_order_relaxed);
  return n;
}

void AtomicHistogram::CollectInto(prometheus::ClientMetric* metric) const {
  auto& h = metric->histogram;
  h.bucket.clear();
  h.bucket.reserve(bounds_.size() + 1);
  uint64_t cumulative = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    cumulative += buckets_[i].load(std::memory_order_relaxed);
    prometheus::ClientMetric::Bucket b;
    b.cumulative_count = cumulative;
    b.upper_bound = i < bounds_.size() ? bounds_[i] : std::numeric_limits<double>::infinity();
    h.bucket.push_back(b);
  }
  // Count from the buckets, so that count and +Inf agree even while others record.
  h.sample_count = cumulative;
  h.sample_sum = sum_.load(std::memory_order_relaxed);
}

prometheus::MetricFamily MakeFamily(std::string_view name, std::string_view help,
                                    prometheus::MetricType type) {
  prometheus::MetricFamily f;
  f.name = std::string(name);
  f.help = std::string(help);
  f.type = type;
  return f;
}

prometheus::MetricFamily& AddFamily(std::vector<prometheus::MetricFamily>* families,
                                    const std::string& name, const std::string& help,
                                    prometheus::MetricType type) {
  families->push_back(MakeFamily(name, help, type));
  return families->back();
}

std::vector<prometheus::ClientMetric::Label> TaskLabels(std::string_view cluster,
                                                        const TaskRef& task) {
  return {{names::kLabelCluster, std::string(cluster)},
          {names::kLabelRole, task.role},
          {names::kLabelTask, std::to_string(task.index)}};
}

prometheus::ClientMetric& AddMetric(prometheus::MetricFamily& family,
                                    std::vector<prometheus::ClientMetric::Label> labels) {
  family.metric.emplace_back();
  family.metric.back().label = std::move(labels);
  return family.metric.back();
}

void AddGauge(std::vector<prometheus::MetricFamily>* families, const char* name, const char* help,
              double value) {
  AddMetric(AddFamily(families, name, help, prometheus::MetricType::Gauge)).gauge.value = value;
}

void AddCounter(std::vector<prometheus::MetricFamily>* families, const char* name, const char* help,
                double value) {
  AddMetric(AddFamily(families, name, help, prometheus::MetricType::Counter)).counter.value = value;
}

struct RpcMetrics::Started {
  std::atomic<uint64_t> count{0};
};
struct RpcMetrics::ClientSeries {
  AtomicHistogram duration{names::kLatencyBuckets};
  AtomicHistogram sent{names::kSizeBuckets};
  AtomicHistogram rcvd{names::kSizeBuckets};
};
struct RpcMetrics::CallSeries {
  AtomicHistogram duration{names::kLatencyBuckets};
};
struct RpcMetrics::ServerSeries {
  AtomicHistogram duration{names::kLatencyBuckets};
  AtomicHistogram sent{names::kSizeBuckets};
  AtomicHistogram rcvd{names::kSizeBuckets};
};

RpcMetrics::RpcMetrics(const std::vector<TaskRef>& peers) : peers_(peers) {
  for (const TaskRef& t : peers) {
    if (std::find(roles_.begin(), roles_.end(), t.role) == roles_.end()) roles_.push_back(t.role);
  }
  roles_.push_back("unknown");
  role_peers_.assign(roles_.size(), {-1, 0});
  for (size_t p = 0; p < peers_.size(); ++p) {
    const int role = RoleIndex(peers_[p].role);
    peer_roles_.push_back(role);
    auto& [first, count] = role_peers_[role];
    if (first == -1 && peers_[p].index == 0) first = static_cast<int>(p);
    if (first >= 0 && static_cast<size_t>(first + count) == p && peers_[p].index == count) {
      ++count;
    } else {
      first = -2;  // Not contiguous: PeerIndex falls back to a scan.
    }
  }
  const size_t n = static_cast<size_t>(kNumMethods) * kNumStatuses * roles_.size();
  client_ = std::vector<std::atomic<ClientSeries*>>(n);
  calls_ = std::vector<std::atomic<CallSeries*>>(n);
  server_ = std::vector<std::atomic<ServerSeries*>>(n);
  client_started_ = std::vector<std::atomic<Started*>>(kNumMethods * roles_.size());
  server_started_ = std::vector<std::atomic<Started*>>(kNumMethods * roles_.size());
  const size_t per_peer = peers_.size() * kPerPeerMethods;
  peer_calls_.reset(new std::atomic<uint64_t>[per_peer]);
  peer_errors_.reset(new std::atomic<uint64_t>[per_peer]);
  peer_deadline_exceeded_.reset(new std::atomic<uint64_t>[per_peer]);
  peer_latency_.reset(new std::atomic<double>[per_peer]);
  for (size_t i = 0; i < per_peer; ++i) {
    peer_calls_[i].store(0);
    peer_errors_[i].store(0);
    peer_deadline_exceeded_[i].store(0);
    peer_latency_[i].store(0);
  }
  for (int m = 0; m < kNumMethods; ++m) {
    deadline_.push_back(std::make_unique<AtomicHistogram>(names::kLatencyBuckets));
    deadline_used_.push_back(std::make_unique<AtomicHistogram>(kRatioBuckets));
  }
}

RpcMetrics::~RpcMetrics() {
  for (auto& p : client_) delete p.load();
  for (auto& p : calls_) delete p.load();
  for (auto& p : server_) delete p.load();
  for (auto& p : client_started_) delete p.load();
  for (auto& p : server_started_) delete p.load();
}

int RpcMetrics::MethodIndex(absl::string_view method) {
  if (!method.empty() && method.front() == '/') method.remove_prefix(1);
  for (int i = 0; i < kNumMethods - 1; ++i) {
    if (method == kMethods[i]) return i;
  }
  return kNumMethods - 1;
}

const char* RpcMetrics::MethodName(int index) { return kMethods[index]; }

int RpcMetrics::RoleIndex(absl::string_view role) const {
  for (size_t i = 0; i + 1 < roles_.size(); ++i) {
    if (role == roles_[i]) return static_cast<int>(i);
  }
  return static_cast<int>(roles_.size() - 1);
}

int RpcMetrics::PeerIndex(absl::string_view role, int index) const {
  const int r = RoleIndex(role);
  if (r + 1 == static_cast<int>(roles_.size()) || index < 0) return -1;
  const auto [first, count] = role_peers_[r];
  if (first >= 0) return index < count ? first + index : -1;
  for (size_t i = 0; i < peers_.size(); ++i) {
    if (peers_[i].role == role && peers_[i].index == index) return static_cast<int>(i);
  }
  return -1;
}

size_t RpcMetrics::SeriesIndex(int method, int status, int role) const {
  status = std::clamp(status, 0, kNumStatuses - 1);
  return (static_cast<size_t>(method) * kNumStatuses + status) * roles_.size() + role;
}

template <typename T>
T* RpcMetrics::Slot(std::vector<std::atomic<T*>>& table, size_t index) const {
  T* series = table[index].load(std::memory_order_acquire);
  if (series != nullptr) return series;
  auto fresh = std::make_unique<T>();
  if (table[index].compare_exchange_strong(series, fresh.get(), std::memory_order_acq_rel)) {
    return fresh.release();
  }
  return series;  // Another thread won; `series` holds its pointer.
}

void RpcMetrics::ClientAttemptStarted(int method, int role) {
  Slot(client_started_, method * roles_.size() + role)
      ->count.fetch_add(1, std::memory_order_relaxed);
}

void RpcMetrics::ClientAttemptEnded(int method, int status, int role, int peer, double seconds,
                                    int64_t sent_bytes, int64_t rcvd_bytes,
                                    double deadline_seconds) {
  ClientSeries* s = Slot(client_, SeriesIndex(method, status, role));
  s->duration.Observe(seconds);
  s->sent.Observe(static_cast<double>(sent_bytes));
  s->rcvd.Observe(static_cast<double>(rcvd_bytes));
  if (deadline_seconds > 0) {
    deadline_[method]->Observe(deadline_seconds);
    deadline_used_[method]->Observe(seconds / deadline_seconds);
  }
  if (peer >= 0 && method < kPerPeerMethods) {
    const size_t i = static_cast<size_t>(peer) * kPerPeerMethods + method;
    peer_calls_[i].fetch_add(1, std::memory_order_relaxed);
    if (status != 0) peer_errors_[i].fetch_add(1, std::memory_order_relaxed);
    if (status == 4 /* DEADLINE_EXCEEDED */) {
      peer_deadline_exceeded_[i].fetch_add(1, std::memory_order_relaxed);
    }
    AddAtomic(peer_latency_[i], seconds);
  }
}

void RpcMetrics::ClientCallEnded(int method, int status, int role, double seconds) {
  Slot(calls_, SeriesIndex(method, status, role))->duration.Observe(seconds);
}

void RpcMetrics::ServerCallStarted(int method, int role) {
  Slot(server_started_, method * roles_.size() + role)
      ->count.fetch_add(1, std::memory_order_relaxed);
}

void RpcMetrics::ServerCallEnded(int method, int status, int role, double seconds,
                                 int64_t sent_bytes, int64_t rcvd_bytes) {
  ServerSeries* s = Slot(server_, SeriesIndex(method, status, role));
  s->duration.Observe(seconds);
  s->sent.Observe(static_cast<double>(sent_bytes));
  s->rcvd.Observe(static_cast<double>(rcvd_bytes));
}

std::vector<prometheus::MetricFamily> RpcMetrics::Collect() const {
  std::vector<prometheus::MetricFamily> out;
  CollectCalls(&out);
  CollectDeadlines(&out);
  CollectPeers(&out);
  return out;
}

// The gRFC A66 families: attempts and calls started, their durations and sizes.
void RpcMetrics::CollectCalls(std::vector<prometheus::MetricFamily>* families) const {
  using prometheus::MetricType;
  std::vector<prometheus::MetricFamily>& out = *families;
  auto labels = [&](int method, int status, int role) {
    std::vector<prometheus::ClientMetric::Label> l = {{names::kLabelMethod, kMethods[method]}};
    if (status >= 0) l.push_back({names::kLabelGrpcStatus, StatusName(status)});
    l.push_back({names::kLabelPeerRole, roles_[role]});
    return l;
  };
  auto started = [&](const char* name, const char* help,
                     const std::vector<std::atomic<Started*>>& table) {
    auto& f = AddFamily(&out, name, help, MetricType::Counter);
    for (size_t i = 0; i < table.size(); ++i) {
      if (Started* s = table[i].load(std::memory_order_acquire)) {
        AddMetric(
            f, labels(static_cast<int>(i / roles_.size()), -1, static_cast<int>(i % roles_.size())))
            .counter.value = static_cast<double>(s->count.load(std::memory_order_relaxed));
      }
    }
  };
  // One family per histogram member of a series table.
  auto histograms = [&](const char* name, const char* help, const auto& table, auto member) {
    auto& f = AddFamily(&out, name, help, MetricType::Histogram);
    for (size_t i = 0; i < table.size(); ++i) {
      if (auto* s = table[i].load(std::memory_order_acquire)) {
        const int role = static_cast<int>(i % roles_.size());
        const int status = static_cast<int>((i / roles_.size()) % kNumStatuses);
        const int method = static_cast<int>(i / roles_.size() / kNumStatuses);
        (s->*member).CollectInto(&AddMetric(f, labels(method, status, role)));
      }
    }
  };
  started(names::kClientAttemptStarted, "Client call attempts started (gRFC A66).",
          client_started_);
  histograms(names::kClientAttemptDuration, "End-to-end time of a client call attempt (gRFC A66).",
             client_, &ClientSeries::duration);
  histograms(names::kClientAttemptSentBytes, "Message bytes sent per attempt (gRFC A66).", client_,
             &ClientSeries::sent);
  histograms(names::kClientAttemptRcvdBytes, "Message bytes received per attempt (gRFC A66).",
             client_, &ClientSeries::rcvd);
  histograms(names::kClientCallDuration,
             "Time of a client call from the application's view, retries included (gRFC A66).",
             calls_, &CallSeries::duration);
  started(names::kServerCallStarted, "Server calls started (gRFC A66).", server_started_);
  histograms(names::kServerCallDuration,
             "Time from receiving a call's headers to sending its status (gRFC A66).", server_,
             &ServerSeries::duration);
  histograms(names::kServerCallSentBytes, "Message bytes sent per server call (gRFC A66).", server_,
             &ServerSeries::sent);
  histograms(names::kServerCallRcvdBytes, "Message bytes received per server call (gRFC A66).",
             server_, &ServerSeries::rcvd);
}

// Each method's deadlines, and the share of them the attempts used.
void RpcMetrics::CollectDeadlines(std::vector<prometheus::MetricFamily>* families) const {
  using prometheus::MetricType;
  std::vector<prometheus::MetricFamily>& out = *families;
  auto& deadline = AddFamily(&out, names::kClientDeadline,
                             "Deadline given to each client call attempt.", MetricType::Histogram);
  auto& used = AddFamily(&out, names::kClientDeadlineUsed,
                         "Share of its deadline a client call attempt used; near 1 came close "
                         "to DEADLINE_EXCEEDED.",
                         MetricType::Histogram);
  for (int m = 0; m < kNumMethods; ++m) {
    if (deadline_[m]->count() == 0) continue;
    deadline_[m]->CollectInto(&AddMetric(deadline, {{names::kLabelMethod, kMethods[m]}}));
    deadline_used_[m]->CollectInto(&AddMetric(used, {{names::kLabelMethod, kMethods[m]}}));
  }
}

// Calls, errors, deadlines exceeded and latency per peer task.
void RpcMetrics::CollectPeers(std::vector<prometheus::MetricFamily>* families) const {
  using prometheus::MetricType;
  std::vector<prometheus::MetricFamily>& out = *families;
  auto& calls = AddFamily(&out, names::kPeerCalls, "Client call attempts per peer task.",
                          MetricType::Counter);
  auto& errors =
      AddFamily(&out, names::kPeerErrors, "Client call attempts per peer task that did not end OK.",
                MetricType::Counter);
  auto& deadline_exceeded = AddFamily(
      &out, names::kPeerDeadlineExceeded,
      "Client call attempts per peer task that ended DEADLINE_EXCEEDED.", MetricType::Counter);
  auto& latency = AddFamily(&out, names::kPeerLatencySum,
                            "Sum of client call attempt durations per peer task; divide its rate "
                            "by the calls' rate for the mean latency to each peer.",
                            MetricType::Counter);
  for (size_t p = 0; p < peers_.size(); ++p) {
    for (int m = 0; m < kPerPeerMethods; ++m) {
      const size_t i = p * kPerPeerMethods + m;
      const uint64_t n = peer_calls_[i].load(std::memory_order_relaxed);
      if (n == 0) continue;
      std::vector<prometheus::ClientMetric::Label> l = {
          {names::kLabelMethod, kMethods[m]},
          {names::kLabelPeerRole, peers_[p].role},
          {names::kLabelPeerTask, std::to_string(peers_[p].index)}};
      AddMetric(calls, l).counter.value = static_cast<double>(n);
      AddMetric(errors, l).counter.value =
          static_cast<double>(peer_errors_[i].load(std::memory_order_relaxed));
      AddMetric(deadline_exceeded, l).counter.value =
          static_cast<double>(peer_deadline_exceeded_[i].load(std::memory_order_relaxed));
      AddMetric(latency, l).counter.value = peer_latency_[i].load(std::memory_order_relaxed);
    }
  }
}

}  // namespace trainscope::telemetry
