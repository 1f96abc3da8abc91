// Joining spans into ps requests and keeping the slow and failed ones; see trace_store.h.
//
// Layout: every trace held is an Entry (its spans, a byte estimate, pins). A trace is held while
// it is pending (younger than join_window_s, so that its other halves can still arrive), and after
// that only while pinned: by a failed span, or by a place in a window bucket's top-N of some
// (method, ps). The window is a ring of buckets, each with its own top-N per key, so that the
// slowest of the last slow_window_s survive the expiry of older ones. Over budget, pending
// unpinned traces go first (oldest first), then the oldest of any kind.
#include "trainscope/sidecar/trace_store.h"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <deque>
#include <limits>
#include <set>
#include <unordered_map>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "trainscope/sidecar/api.h"

namespace trainscope::sidecar {
namespace {

constexpr std::string_view kQueue = "ps.queue";
constexpr std::string_view kApply = "ps.apply";
constexpr std::string_view kRead = "ps.read";

size_t HeapBytes(const std::string& s) { return s.capacity() > 15 ? s.capacity() + 1 : 0; }

// The key that both halves of a request share: the client span's id. A server span names it as
// its parent; a server span without a parent (an untraced caller) is a request of its own.
std::string RequestKey(const SpanRecord& s) {
  if (s.kind == SpanKind::kClient) return s.span_id;
  if (s.kind == SpanKind::kServer) {
    return s.parent_span_id.empty() ? "s" + s.span_id : s.parent_span_id;
  }
  return "";
}

bool MethodMatches(const std::string& method, const std::string& filter) {
  if (filter.empty() || method == filter) return true;
  size_t slash = method.rfind('/');
  return slash != std::string::npos && method.compare(slash + 1, std::string::npos, filter) == 0;
}

bool Matches(const RequestSummary& r, const RequestFilter& f) {
  return MethodMatches(r.method, f.method) && (f.ps.empty() || r.ps == f.ps);
}

double Ms(int64_t ns) { return static_cast<double>(ns) / 1e6; }

// Whether a trainscope.kept value says slow or near the deadline.
bool MarkedSlow(absl::string_view kept) {
  for (absl::string_view reason : absl::StrSplit(kept, ',')) {
    if (reason == "slow" || reason == "deadline") return true;
  }
  return false;
}

// The reasons of both halves, each once, in the order they first appear.
std::string KeptUnion(const SpanRecord* client, const SpanRecord* server) {
  std::vector<absl::string_view> reasons;
  for (const SpanRecord* s : {client, server}) {
    if (s == nullptr || s->kept.empty()) continue;
    for (absl::string_view reason : absl::StrSplit(s->kept, ',')) {
      if (std::find(reasons.begin(), reasons.end(), reason) == reasons.end()) {
        reasons.push_back(reason);
      }
    }
  }
  return absl::StrJoin(reasons, ",");
}

}  // namespace

int64_t SpanRecord::DurationNs() const {
  if (start_unix_nano == 0 || end_unix_nano < start_unix_nano) return 0;
  uint64_t d = end_unix_nano - start_unix_nano;
  return d > static_cast<uint64_t>(INT64_MAX) ? INT64_MAX : static_cast<int64_t>(d);
}

bool SpanRecord::IsError() const {
  return status_code == 2 || (grpc_status_code > 0 && grpc_status_code <= 16);
}

size_t SpanRecord::ByteSize() const {
  size_t n = sizeof(SpanRecord) + 64;  // The record and its share of the containers.
  for (const std::string* s : {&trace_id, &span_id, &parent_span_id, &name, &status_message,
                               &peer_task, &net_peer_name, &task, &service_name, &kept}) {
    n += HeapBytes(*s);
  }
  n += events.capacity() * sizeof(SpanEventRecord);
  for (const SpanEventRecord& e : events) n += HeapBytes(e.name);
  return n;
}

std::string HexId(std::string_view bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    out.push_back(kHex[c >> 4]);
    out.push_back(kHex[c & 15]);
  }
  return out;
}

std::string GrpcCodeName(int code) {
  std::string name = absl::StatusCodeToString(static_cast<absl::StatusCode>(code));
  return name.empty() ? absl::StrFormat("CODE_%d", code) : name;
}

struct TraceStore::Impl {
  struct RequestState {
    std::string slow_key;
    double bucket_start = -1;  // The bucket holding its rank; -1 when in none.
  };
  struct Entry {
    uint64_t seq = 0;
    double first_seen = 0;
    std::vector<SpanRecord> spans;
    size_t bytes = 0;
    int slow_refs = 0;
    bool error = false;
    bool marked = false;  // A span says a task kept it as slow or near its deadline.
    std::map<std::string, RequestState> requests;
  };
  struct SlowEntry {
    int64_t duration_ns;
    std::string trace_id;
    std::string request;
  };
  struct Bucket {
    double start;
    std::map<std::string, std::vector<SlowEntry>> top;  // Slowest first, at most slow_per_key.
  };

  explicit Impl(const TraceStoreOptions& options) : o(options) {}

  const TraceStoreOptions o;
  std::unordered_map<std::string, Entry> traces;
  std::map<uint64_t, std::string> by_age;  // seq -> trace id.
  uint64_t next_seq = 0;
  uint64_t pending_cursor = 0;  // Traces with seq below it are past the join window.
  std::deque<Bucket> buckets;
  std::deque<std::pair<uint64_t, std::string>> errors;  // Failed traces, oldest first.
  struct Marked {
    uint64_t seq;
    std::string trace_id;
    double at;
  };
  std::deque<Marked> marked;  // Traces marked slow, oldest first.
  size_t bytes = 0;
  int64_t spans = 0;
  TraceStoreStats st;

  double Width() const { return o.slow_window_s / std::max(1, o.window_buckets); }

  bool Pinned(const Entry& e) const { return e.slow_refs > 0 || e.error || e.marked; }
  bool Pending(const Entry& e) const { return e.seq >= pending_cursor; }

  Bucket* FindBucket(double start) {
    for (Bucket& b : buckets) {
      if (b.start == start) return &b;
    }
    return nullptr;
  }

  Bucket& Current(double now) {
    const double w = Width();
    if (buckets.empty()) {
      buckets.push_back({now, {}});
    } else if (now >= buckets.back().start + w) {
      double start = buckets.back().start + w * std::floor((now - buckets.back().start) / w);
      buckets.push_back({start, {}});
    }
    return buckets.back();
  }

  void RemoveRank(const std::string& trace_id, const std::string& request, RequestState& rs) {
    if (rs.bucket_start < 0) return;
    if (Bucket* b = FindBucket(rs.bucket_start)) {
      auto it = b->top.find(rs.slow_key);
      if (it != b->top.end()) {
        auto& v = it->second;
        v.erase(std::remove_if(v.begin(), v.end(),
                               [&](const SlowEntry& s) {
                                 return s.trace_id == trace_id && s.request == request;
                               }),
                v.end());
        if (v.empty()) b->top.erase(it);
      }
    }
    rs.bucket_start = -1;
  }

  void Erase(std::unordered_map<std::string, Entry>::iterator it, bool evicted) {
    Entry& e = it->second;
    if (e.slow_refs > 0) {
      for (auto& [request, rs] : e.requests) RemoveRank(it->first, request, rs);
    }
    bytes -= std::min(bytes, e.bytes);
    spans -= static_cast<int64_t>(e.spans.size());
    if (evicted) st.dropped_evicted += static_cast<int64_t>(e.spans.size());
    by_age.erase(e.seq);
    traces.erase(it);
  }

  void MaybeErase(const std::string& trace_id) {
    auto it = traces.find(trace_id);
    if (it != traces.end() && !Pinned(it->second) && !Pending(it->second)) Erase(it, false);
  }

  // Drops a rank held by (trace_id, request); the trace may go with it.
  void Unrank(const std::string& trace_id, const std::string& request) {
    auto it = traces.find(trace_id);
    if (it == traces.end()) return;
    auto r = it->second.requests.find(request);
    if (r == it->second.requests.end() || r->second.bucket_start < 0) return;
    r->second.bucket_start = -1;
    it->second.slow_refs--;
    MaybeErase(trace_id);
  }

  void Expire(double now) {
    const double w = Width();
    while (!buckets.empty() && buckets.front().start + w <= now - o.slow_window_s) {
      std::vector<std::pair<std::string, std::string>> ranked;
      for (auto& [key, v] : buckets.front().top) {
        for (SlowEntry& s : v) ranked.emplace_back(std::move(s.trace_id), std::move(s.request));
      }
      buckets.pop_front();
      for (const auto& [trace_id, request] : ranked) Unrank(trace_id, request);
    }
  }

  void AdvancePending(double now) {
    for (auto it = by_age.lower_bound(pending_cursor); it != by_age.end();) {
      auto t = traces.find(it->second);
      if (now - t->second.first_seen <= o.join_window_s) break;
      pending_cursor = it->first + 1;
      ++it;
      if (!Pinned(t->second)) Erase(t, false);
    }
  }

  void Evict() {
    const size_t target = o.memory_bytes / 10 * 9;
    // Unpinned pending traces first, oldest first.
    for (auto it = by_age.lower_bound(pending_cursor); it != by_age.end() && bytes > target;) {
      auto t = traces.find(it->second);
      ++it;
      if (!Pinned(t->second)) Erase(t, true);
    }
    // Then the oldest of any kind.
    while (bytes > target && !by_age.empty()) {
      Erase(traces.find(by_age.begin()->second), true);
    }
  }

  void ForgetOldErrors() {
    while (errors.size() > o.max_error_traces) {
      auto [seq, trace_id] = std::move(errors.front());
      errors.pop_front();
      auto it = traces.find(trace_id);
      if (it == traces.end() || it->second.seq != seq) continue;
      it->second.error = false;
      MaybeErase(trace_id);
    }
  }

  // Forgets marks older than the window, and the oldest beyond max_marked_traces.
  void ForgetOldMarks(double now) {
    while (!marked.empty() &&
           (marked.size() > o.max_marked_traces || marked.front().at < now - o.slow_window_s)) {
      Marked m = std::move(marked.front());
      marked.pop_front();
      auto it = traces.find(m.trace_id);
      if (it == traces.end() || it->second.seq != m.seq) continue;
      it->second.marked = false;
      MaybeErase(m.trace_id);
    }
  }

  RequestSummary Summarize(const std::string& trace_id, const Entry& e,
                           const std::string& request) const {
    const SpanRecord* client = nullptr;
    const SpanRecord* server = nullptr;
    for (const SpanRecord& s : e.spans) {
      if (s.kind == SpanKind::kClient && client == nullptr && s.span_id == request) client = &s;
      if (s.kind == SpanKind::kServer && server == nullptr && RequestKey(s) == request) {
        server = &s;
      }
    }
    RequestSummary r;
    r.trace_id = trace_id;
    const SpanRecord* main = client != nullptr ? client : server;
    if (main == nullptr) return r;
    r.method = main->name;
    r.worker = client != nullptr && !client->task.empty() ? client->task
               : server != nullptr                        ? server->peer_task
                                                          : "";
    r.ps = client != nullptr && !client->peer_task.empty() ? client->peer_task
           : server != nullptr                             ? server->task
                                                           : "";
    r.start_unix = static_cast<double>(main->start_unix_nano) / 1e9;
    r.duration_ms = Ms(main->DurationNs());
    r.has_client = client != nullptr;
    r.has_server = server != nullptr;
    if (client != nullptr) {
      r.client_span_id = client->span_id;
      r.deadline_ms = client->deadline_ms;
      r.peer_address = client->net_peer_name;
    }
    if (server != nullptr) AddServerSide(e, client, *server, r);
    r.kept = KeptUnion(client, server);
    SetOutcome(client, server, r);
    return r;
  }

  // The server span's side of a request: its span ids and time, the network's share (with a
  // client span), and the queue, apply and read parts from its child spans and events.
  static void AddServerSide(const Entry& e, const SpanRecord* client, const SpanRecord& server,
                            RequestSummary& r) {
    r.server_span_id = server.span_id;
    r.server_parent_span_id = server.parent_span_id;
    r.server_ms = Ms(server.DurationNs());
    if (client != nullptr) {
      r.network_ms = Ms(std::max<int64_t>(0, client->DurationNs() - server.DurationNs()));
    }
    int64_t queue = -1, apply = -1, read = -1;
    auto add = [](int64_t& total, int64_t d) { total = std::max<int64_t>(total, 0) + d; };
    auto part = [&](std::string_view name, int64_t d) {
      if (d < 0) return;
      if (name == kQueue) add(queue, d);
      if (name == kApply) add(apply, d);
      if (name == kRead) add(read, d);
    };
    for (const SpanRecord& s : e.spans) {
      if (s.kind != SpanKind::kClient && s.kind != SpanKind::kServer &&
          s.parent_span_id == server.span_id) {
        part(s.name, s.DurationNs());
      }
    }
    for (const SpanEventRecord& ev : server.events) part(ev.name, ev.duration_ns);
    if (queue >= 0) r.queue_ms = Ms(queue);
    if (apply >= 0) r.apply_ms = Ms(apply);
    if (read >= 0) r.read_ms = Ms(read);
  }

  // Failed (the client's error first, else the server's: its gRPC code name or ERROR, and its
  // message), or OK.
  static void SetOutcome(const SpanRecord* client, const SpanRecord* server, RequestSummary& r) {
    const SpanRecord* failed = client != nullptr && client->IsError()   ? client
                               : server != nullptr && server->IsError() ? server
                                                                        : nullptr;
    if (failed != nullptr) {
      r.failed = true;
      r.status = failed->grpc_status_code > 0 ? GrpcCodeName(failed->grpc_status_code) : "ERROR";
      r.error = failed->status_message;
    } else {
      r.status = "OK";
    }
  }

  std::vector<std::string> Requests(const Entry& e) const {
    std::vector<std::string> out;
    for (const SpanRecord& s : e.spans) {
      std::string key = RequestKey(s);
      if (!key.empty() && std::find(out.begin(), out.end(), key) == out.end()) out.push_back(key);
    }
    return out;
  }

  void Rank(const std::string& trace_id, Entry& e, const std::string& request, double now) {
    RequestSummary s = Summarize(trace_id, e, request);
    const int64_t d = static_cast<int64_t>(std::llround(s.duration_ms * 1e6));
    RequestState& rs = e.requests[request];
    if (rs.bucket_start >= 0) {
      if (Bucket* held = FindBucket(rs.bucket_start)) {
        auto& v = held->top[rs.slow_key];
        for (SlowEntry& x : v) {
          if (x.trace_id == trace_id && x.request == request)
            x.duration_ns = std::max(x.duration_ns, d);
        }
        std::stable_sort(v.begin(), v.end(), [](const SlowEntry& a, const SlowEntry& b) {
          return a.duration_ns > b.duration_ns;
        });
      }
      return;
    }
    const std::string key = s.method + "\n" + s.ps;
    Bucket& b = Current(now);
    auto& v = b.top[key];
    const size_t n = static_cast<size_t>(std::max(1, o.slow_per_key));
    if (v.size() >= n && d <= v.back().duration_ns) {
      if (v.empty()) b.top.erase(key);
      return;
    }
    auto pos =
        std::find_if(v.begin(), v.end(), [d](const SlowEntry& x) { return x.duration_ns < d; });
    v.insert(pos, {d, trace_id, request});
    rs.slow_key = key;
    rs.bucket_start = b.start;
    e.slow_refs++;
    if (v.size() > n) {
      SlowEntry out = std::move(v.back());
      v.pop_back();
      Unrank(out.trace_id, out.request);
    }
  }

  void Add(std::vector<SpanRecord> in, double now) {
    Expire(now);
    AdvancePending(now);
    std::vector<std::string> touched;
    for (SpanRecord& span : in) {
      auto [it, inserted] = traces.try_emplace(span.trace_id);
      Entry& e = it->second;
      if (inserted) {
        e.seq = next_seq++;
        e.first_seen = now;
        by_age.emplace(e.seq, span.trace_id);
      }
      const std::string trace_id = it->first;
      touched.push_back(trace_id);
      if (e.spans.size() >= o.max_spans_per_trace) {
        st.dropped_trace_full++;
        continue;
      }
      bool dup = std::any_of(e.spans.begin(), e.spans.end(),
                             [&](const SpanRecord& s) { return s.span_id == span.span_id; });
      if (dup) {
        st.dropped_duplicate++;
        continue;
      }
      std::string request = RequestKey(span);
      if (request.empty()) {
        // A breakdown span: it belongs to the request of its parent server span, if known.
        for (const SpanRecord& s : e.spans) {
          if (s.kind == SpanKind::kServer && s.span_id == span.parent_span_id) {
            request = RequestKey(s);
          }
        }
      }
      const bool failed = span.IsError();
      const bool mark = MarkedSlow(span.kept);
      const size_t b = span.ByteSize();
      e.bytes += b;
      bytes += b;
      ++spans;
      st.spans_added++;
      e.spans.push_back(std::move(span));
      if (failed && !e.error) {
        e.error = true;
        errors.emplace_back(e.seq, trace_id);
      }
      if (mark && !e.marked) {
        e.marked = true;
        marked.push_back({e.seq, trace_id, now});
      }
      if (!request.empty()) Rank(trace_id, e, request, now);
    }
    ForgetOldErrors();
    ForgetOldMarks(now);
    std::sort(touched.begin(), touched.end());
    touched.erase(std::unique(touched.begin(), touched.end()), touched.end());
    for (const std::string& t : touched) MaybeErase(t);
    if (bytes > o.memory_bytes) Evict();
  }

  std::vector<RequestSummary> Slow(const RequestFilter& f, double now) {
    Expire(now);
    AdvancePending(now);
    std::map<std::string, std::vector<const SlowEntry*>> by_key;
    for (const Bucket& b : buckets) {
      for (const auto& [key, v] : b.top) {
        for (const SlowEntry& s : v) by_key[key].push_back(&s);
      }
    }
    std::vector<RequestSummary> out;
    std::set<std::pair<std::string, std::string>> listed;  // (trace id, request)
    const size_t n = static_cast<size_t>(std::max(1, o.slow_per_key));
    for (auto& [key, v] : by_key) {
      std::stable_sort(v.begin(), v.end(), [](const SlowEntry* a, const SlowEntry* b) {
        return a->duration_ns > b->duration_ns;
      });
      for (size_t i = 0; i < v.size() && i < n; ++i) {
        auto t = traces.find(v[i]->trace_id);
        if (t == traces.end()) continue;
        RequestSummary r = Summarize(t->first, t->second, v[i]->request);
        listed.emplace(t->first, v[i]->request);
        if (Matches(r, f)) out.push_back(std::move(r));
      }
    }
    // Whatever their rank: the requests a task marked slow or near its deadline.
    ForgetOldMarks(now);
    for (const Marked& m : marked) {
      auto t = traces.find(m.trace_id);
      if (t == traces.end() || t->second.seq != m.seq) continue;
      for (const std::string& request : Requests(t->second)) {
        if (listed.count({m.trace_id, request}) != 0) continue;
        RequestSummary r = Summarize(t->first, t->second, request);
        if (MarkedSlow(r.kept) && Matches(r, f)) out.push_back(std::move(r));
      }
    }
    std::stable_sort(out.begin(), out.end(), [](const RequestSummary& a, const RequestSummary& b) {
      return a.duration_ms > b.duration_ms;
    });
    if (out.size() > f.limit) out.resize(f.limit);
    return out;
  }

  std::vector<RequestSummary> Errors(const RequestFilter& f, double now) {
    Expire(now);
    AdvancePending(now);
    std::vector<RequestSummary> out;
    for (auto it = errors.rbegin(); it != errors.rend() && out.size() < f.limit; ++it) {
      auto t = traces.find(it->second);
      if (t == traces.end() || t->second.seq != it->first) continue;
      for (const std::string& request : Requests(t->second)) {
        RequestSummary r = Summarize(t->first, t->second, request);
        if (r.failed && Matches(r, f) && out.size() < f.limit) out.push_back(std::move(r));
      }
    }
    return out;
  }
};

TraceStore::TraceStore(TraceStoreOptions options)
    : options_(options), impl_(std::make_unique<Impl>(options)) {}

TraceStore::~TraceStore() = default;

void TraceStore::Add(std::vector<SpanRecord> spans, double now_s) {
  std::lock_guard lock(mu_);
  impl_->Add(std::move(spans), now_s);
}

std::vector<RequestSummary> TraceStore::Slow(const RequestFilter& filter, double now_s) {
  std::lock_guard lock(mu_);
  return impl_->Slow(filter, now_s);
}

std::vector<RequestSummary> TraceStore::Errors(const RequestFilter& filter, double now_s) {
  std::lock_guard lock(mu_);
  return impl_->Errors(filter, now_s);
}

std::optional<TraceDetail> TraceStore::Trace(const std::string& trace_id, double now_s) {
  std::lock_guard lock(mu_);
  impl_->Expire(now_s);
  impl_->AdvancePending(now_s);
  auto it = impl_->traces.find(trace_id);
  if (it == impl_->traces.end()) return std::nullopt;
  TraceDetail d;
  d.trace_id = trace_id;
  d.spans = it->second.spans;
  for (const std::string& r : impl_->Requests(it->second)) {
    d.requests.push_back(impl_->Summarize(trace_id, it->second, r));
  }
  return d;
}

TraceStoreStats TraceStore::stats() {
  std::lock_guard lock(mu_);
  TraceStoreStats s = impl_->st;
  s.spans_kept = impl_->spans;
  s.bytes_kept = static_cast<int64_t>(impl_->bytes);
  s.traces_kept = static_cast<int64_t>(impl_->traces.size());
  return s;
}

namespace {

std::string IsoTime(double unix_s) {
  if (!std::isfinite(unix_s) || unix_s <= 0) return "";
  time_t secs = static_cast<time_t>(unix_s);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  int ms = static_cast<int>((unix_s - static_cast<double>(secs)) * 1000);
  return absl::StrFormat("%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
                         tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, std::clamp(ms, 0, 999));
}

double Finite(double v) { return std::isfinite(v) ? v : 0; }

int32_t Int32(int64_t v) {
  return static_cast<int32_t>(std::clamp<int64_t>(v, 0, std::numeric_limits<int32_t>::max()));
}

void SetRequest(const RequestSummary& r, pb::RequestSummary* out) {
  out->set_trace_id(r.trace_id);
  out->set_method(CleanText(r.method));
  out->set_worker(CleanText(r.worker));
  out->set_ps(CleanText(r.ps));
  out->set_start_unix(Finite(r.start_unix));
  out->set_start_time(IsoTime(r.start_unix));
  out->set_duration_ms(Finite(r.duration_ms));
  if (r.server_ms && std::isfinite(*r.server_ms)) out->set_server_ms(*r.server_ms);
  if (r.network_ms && std::isfinite(*r.network_ms)) out->set_network_ms(*r.network_ms);
  if (r.queue_ms && std::isfinite(*r.queue_ms)) out->set_queue_ms(*r.queue_ms);
  if (r.apply_ms && std::isfinite(*r.apply_ms)) out->set_apply_ms(*r.apply_ms);
  if (r.read_ms && std::isfinite(*r.read_ms)) out->set_read_ms(*r.read_ms);
  out->set_status(CleanText(r.status));
  out->set_error(CleanText(r.error));
  out->set_has_client(r.has_client);
  out->set_has_server(r.has_server);
  if (!r.client_span_id.empty()) out->set_client_span_id(r.client_span_id);
  if (!r.server_span_id.empty()) out->set_server_span_id(r.server_span_id);
  if (!r.server_parent_span_id.empty()) out->set_server_parent_span_id(r.server_parent_span_id);
  if (r.deadline_ms >= 0) out->set_deadline_ms(Int32(r.deadline_ms));
  out->set_peer_address(CleanText(r.peer_address));
  if (!r.kept.empty()) out->set_kept(CleanText(r.kept));
}

const char* KindName(SpanKind k) {
  switch (k) {
    case SpanKind::kInternal:
      return "internal";
    case SpanKind::kServer:
      return "server";
    case SpanKind::kClient:
      return "client";
    case SpanKind::kOther:
      return "other";
    default:
      return "unspecified";
  }
}

void SetSpan(const SpanRecord& s, pb::Span* out) {
  out->set_trace_id(s.trace_id);
  out->set_span_id(s.span_id);
  if (!s.parent_span_id.empty()) out->set_parent_span_id(s.parent_span_id);
  out->set_name(CleanText(s.name));
  out->set_kind(KindName(s.kind));
  out->set_task(CleanText(s.task));
  out->set_service_name(CleanText(s.service_name));
  out->set_start_unix(static_cast<double>(s.start_unix_nano) / 1e9);
  out->set_duration_ms(Ms(s.DurationNs()));
  out->set_status_code(s.status_code);
  out->set_status_message(CleanText(s.status_message));
  if (s.grpc_status_code >= 0) out->set_grpc_status_code(s.grpc_status_code);
  out->set_peer_task(CleanText(s.peer_task));
  out->set_net_peer_name(CleanText(s.net_peer_name));
  if (s.deadline_ms >= 0) out->set_deadline_ms(Int32(s.deadline_ms));
  if (s.request_bytes >= 0) out->set_request_bytes(static_cast<double>(s.request_bytes));
  if (s.response_bytes >= 0) out->set_response_bytes(static_cast<double>(s.response_bytes));
  if (!s.kept.empty()) out->set_kept(CleanText(s.kept));
  for (const SpanEventRecord& e : s.events) {
    pb::SpanEvent* event = out->add_events();
    event->set_name(CleanText(e.name));
    event->set_time_unix(static_cast<double>(e.time_unix_nano) / 1e9);
    if (e.duration_ns >= 0) event->set_duration_ms(Ms(e.duration_ns));
  }
}

}  // namespace

pb::RequestList ToRequestList(const std::vector<RequestSummary>& requests, double window_s,
                              int per_key) {
  pb::RequestList list;
  for (const RequestSummary& r : requests) SetRequest(r, list.add_requests());
  if (window_s >= 0 && std::isfinite(window_s)) list.set_window_s(window_s);
  if (per_key >= 0) list.set_per_key(per_key);
  return list;
}

pb::TraceDetail ToProto(const TraceDetail& d) {
  pb::TraceDetail out;
  out.set_trace_id(d.trace_id);
  for (const SpanRecord& s : d.spans) SetSpan(s, out.add_spans());
  for (const RequestSummary& r : d.requests) SetRequest(r, out.add_requests());
  return out;
}

}  // namespace trainscope::sidecar
