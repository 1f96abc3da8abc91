#pragma once
// The task's metric recorders: a lock-free histogram, the gRPC call metrics of gRFC A66 (client
// attempts and calls, server calls) with bounded per-peer counters, and their rendering into
// prometheus-cpp metric families at scrape time. Recording is a few relaxed atomic adds: the RPC
// path takes no lock.

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/string_view.h"
#include "prometheus/client_metric.h"
#include "prometheus/metric_family.h"
#include "prometheus/metric_type.h"
#include "trainscope/common/cluster_spec.h"

namespace trainscope::telemetry {

// A histogram with fixed bucket bounds whose Observe is lock-free (two relaxed atomic adds),
// unlike prometheus::Histogram, which takes a mutex. The count is the sum of the buckets, read
// at scrape time. Thread-safe.
class AtomicHistogram {
 public:
  // `bounds` must be sorted and outlive the histogram.
  explicit AtomicHistogram(std::span<const double> bounds);
  void Observe(double value);
  // Fills `metric->histogram` with cumulative buckets, +Inf last.
  void CollectInto(prometheus::ClientMetric* metric) const;
  // Observations so far (a sum over the buckets: not for the hot path).
  uint64_t count() const;

 private:
  std::span<const double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> buckets_;  // bounds_.size() + 1, not cumulative
  std::atomic<double> sum_{0};
};

// Indices of the methods the runtime calls and serves, in RpcMetrics' fixed table.
namespace methods {
inline constexpr int kPull = 0;
inline constexpr int kPush = 1;
inline constexpr int kCreateVariable = 2;
inline constexpr int kHandshake = 3;
inline constexpr int kDone = 4;
inline constexpr int kHeartbeat = 5;
inline constexpr int kInjectFault = 6;
inline constexpr int kHealthCheck = 7;
inline constexpr int kHealthWatch = 8;
inline constexpr int kOtlpExport = 9;
inline constexpr int kOther = 10;
}  // namespace methods

// gRPC call metrics. Label values are indices into fixed tables (methods, status codes, peer
// roles, peers) so that a series is found without a lock or a hash; series are allocated on
// first use. Thread-safe.
class RpcMetrics {
 public:
  // `peers`: every task of the cluster; their roles form the peer_role values (plus "unknown").
  explicit RpcMetrics(const std::vector<TaskRef>& peers);
  ~RpcMetrics();

  // Index of a full method name ("/trainscope.v1.ParameterService/Pull" or without the slash);
  // methods we do not serve map to "other", as A66 asks.
  static int MethodIndex(absl::string_view method);
  static const char* MethodName(int index);
  int RoleIndex(absl::string_view role) const;
  // Index of a peer task, or -1; a few string compares (one per role), no scan of the peers.
  int PeerIndex(const TaskRef& peer) const { return PeerIndex(peer.role, peer.index); }
  int PeerIndex(absl::string_view role, int index) const;
  // The role index of peer `peer` (PeerIndex), or of "unknown" for -1.
  int PeerRoleIndex(int peer) const {
    return peer >= 0 ? peer_roles_[peer] : static_cast<int>(roles_.size() - 1);
  }
  const std::vector<TaskRef>& peers() const { return peers_; }

  void ClientAttemptStarted(int method, int role);
  // `deadline_seconds` 0 when the call had none; `peer` -1 when unknown.
  void ClientAttemptEnded(int method, int status, int role, int peer, double seconds,
                          int64_t sent_bytes, int64_t rcvd_bytes, double deadline_seconds);
  // A logical call, retries included.
  void ClientCallEnded(int method, int status, int role, double seconds);
  void ServerCallStarted(int method, int role);
  void ServerCallEnded(int method, int status, int role, double seconds, int64_t sent_bytes,
                       int64_t rcvd_bytes);

  std::vector<prometheus::MetricFamily> Collect() const;

 private:
  void CollectCalls(std::vector<prometheus::MetricFamily>* out) const;
  void CollectDeadlines(std::vector<prometheus::MetricFamily>* out) const;
  void CollectPeers(std::vector<prometheus::MetricFamily>* out) const;

  struct ClientSeries;
  struct ServerSeries;
  struct CallSeries;
  struct Started;
  template <typename T>
  T* Slot(std::vector<std::atomic<T*>>& table, size_t index) const;
  size_t SeriesIndex(int method, int status, int role) const;

  std::vector<std::string> roles_;  // peer_role values; the last is "unknown"
  std::vector<TaskRef> peers_;
  std::vector<int> peer_roles_;  // By peer: its role index.
  // By role index: the peer index of (role, 0) and how many tasks the role has, when the peers
  // of a role are contiguous and in index order (as a cluster spec lists them); else -1.
  std::vector<std::pair<int, int>> role_peers_;
  mutable std::vector<std::atomic<ClientSeries*>> client_;
  mutable std::vector<std::atomic<CallSeries*>> calls_;
  mutable std::vector<std::atomic<ServerSeries*>> server_;
  mutable std::vector<std::atomic<Started*>> client_started_;
  mutable std::vector<std::atomic<Started*>> server_started_;
  // Per peer and method: calls, errors, latency sum.
  std::unique_ptr<std::atomic<uint64_t>[]> peer_calls_;
  std::unique_ptr<std::atomic<uint64_t>[]> peer_errors_;
  std::unique_ptr<std::atomic<uint64_t>[]> peer_deadline_exceeded_;
  std::unique_ptr<std::atomic<double>[]> peer_latency_;
  // Per method: deadline given and share of it used.
  std::vector<std::unique_ptr<AtomicHistogram>> deadline_;
  std::vector<std::unique_ptr<AtomicHistogram>> deadline_used_;
};

// Helpers for collectors that build families at scrape time (the runtime's and the sidecar's).
// An empty family, to fill before it is appended (for families filled side by side).
prometheus::MetricFamily MakeFamily(std::string_view name, std::string_view help,
                                    prometheus::MetricType type);
// Appends an empty family to `families` and returns it.
prometheus::MetricFamily& AddFamily(std::vector<prometheus::MetricFamily>* families,
                                    const std::string& name, const std::string& help,
                                    prometheus::MetricType type);
// Appends a series with `labels` to `family` and returns it.
prometheus::ClientMetric& AddMetric(prometheus::MetricFamily& family,
                                    std::vector<prometheus::ClientMetric::Label> labels = {});
// The labels that name a task in every trainscope series: cluster, role, task (its index).
std::vector<prometheus::ClientMetric::Label> TaskLabels(std::string_view cluster,
                                                        const TaskRef& task);
// A family of one unlabelled gauge / counter.
void AddGauge(std::vector<prometheus::MetricFamily>* families, const char* name, const char* help,
              double value);
void AddCounter(std::vector<prometheus::MetricFamily>* families, const char* name, const char* help,
                double value);

// Prometheus' standard process_* families of this process (CPU, memory, file descriptors,
// threads, start time): the one process collector of every trainscope binary.
void AddProcessFamilies(std::vector<prometheus::MetricFamily>* families);

}  // namespace trainscope::telemetry
