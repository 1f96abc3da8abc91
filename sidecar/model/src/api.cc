// TaskView <-> proto and the JSON of /api/v1/tasks; see api.h.
#include "trainscope/sidecar/api.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <iterator>
#include <optional>

#include "absl/algorithm/container.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "google/protobuf/util/json_util.h"
#include "trainscope/common/clock.h"
#include "trainscope/sidecar/names.h"

namespace trainscope::sidecar {
namespace {

double Finite(double v, double otherwise = 0) { return std::isfinite(v) ? v : otherwise; }

// A double that must hold a count: finite and within the exact integer range of a double.
int64_t Count(double v) {
  if (!std::isfinite(v) || v < 0) return 0;
  return static_cast<int64_t>(std::min(v, 9.0e15));
}

bool IsFailingOrSlow(const PeerInfo& p) { return !p.connected || p.step_share >= 0.5; }

// The cgroup facts each way. A fact from outside must be finite and non-negative, a ratio at
// most 1; anything else is absent.
template <typename T>
void SetIf(const std::optional<T>& v, void (pb::CgroupFacts::*set)(double), pb::CgroupFacts* out) {
  if (v) (out->*set)(Finite(static_cast<double>(*v)));
}

void CgroupToProto(const TaskCgroup& c, pb::CgroupFacts* out) {
  out->set_version(c.version);
  SetIf(c.memory_limit_bytes, &pb::CgroupFacts::set_memory_limit_bytes, out);
  SetIf(c.memory_usage_bytes, &pb::CgroupFacts::set_memory_usage_bytes, out);
  SetIf(c.memory_working_set_bytes, &pb::CgroupFacts::set_memory_working_set_bytes, out);
  SetIf(c.oom_kills, &pb::CgroupFacts::set_oom_kills, out);
  SetIf(c.cpu_quota_cores, &pb::CgroupFacts::set_cpu_quota_cores, out);
  SetIf(c.cpu_periods, &pb::CgroupFacts::set_cpu_periods, out);
  SetIf(c.cpu_throttled_periods, &pb::CgroupFacts::set_cpu_throttled_periods, out);
  SetIf(c.cpu_throttled_seconds, &pb::CgroupFacts::set_cpu_throttled_seconds, out);
  SetIf(c.cpu_throttled_ratio, &pb::CgroupFacts::set_cpu_throttled_ratio, out);
  SetIf(c.memory_pressure_ratio, &pb::CgroupFacts::set_memory_pressure_ratio, out);
  out->set_oom_killed(c.oom_killed);
}

std::optional<int64_t> CountIf(bool has, double v) {
  if (!has || !std::isfinite(v) || v < 0) return std::nullopt;
  return Count(v);
}

std::optional<double> RealIf(bool has, double v, double max) {
  if (!has || !std::isfinite(v) || v < 0 || v > max) return std::nullopt;
  return v;
}

TaskCgroup CgroupFromProto(const pb::CgroupFacts& p) {
  TaskCgroup c;
  c.version = std::clamp(p.version(), 0, 2);
  c.memory_limit_bytes = CountIf(p.has_memory_limit_bytes(), p.memory_limit_bytes());
  c.memory_usage_bytes = CountIf(p.has_memory_usage_bytes(), p.memory_usage_bytes());
  c.memory_working_set_bytes =
      CountIf(p.has_memory_working_set_bytes(), p.memory_working_set_bytes());
  c.oom_kills = CountIf(p.has_oom_kills(), p.oom_kills());
  c.cpu_quota_cores = RealIf(p.has_cpu_quota_cores(), p.cpu_quota_cores(), 1e6);
  c.cpu_periods = CountIf(p.has_cpu_periods(), p.cpu_periods());
  c.cpu_throttled_periods = CountIf(p.has_cpu_throttled_periods(), p.cpu_throttled_periods());
  c.cpu_throttled_seconds = RealIf(p.has_cpu_throttled_seconds(), p.cpu_throttled_seconds(), 9e15);
  c.cpu_throttled_ratio = RealIf(p.has_cpu_throttled_ratio(), p.cpu_throttled_ratio(), 1);
  c.memory_pressure_ratio = RealIf(p.has_memory_pressure_ratio(), p.memory_pressure_ratio(), 1);
  c.oom_killed = p.oom_killed();
  return c;
}

// One blocked-on peer, cleaned for the wire.
void BlockedOnToProto(const BlockedPeer& b, pb::BlockedOn* o) {
  o->set_peer(CleanText(b.peer.ShortName()));
  o->set_address(CleanText(b.address));
  o->set_seconds(Finite(b.seconds));
  o->set_last_error(CleanText(b.last_error));
}

// One peer's state as the task sees it, cleaned for the wire.
void PeerToProto(const PeerInfo& p, pb::PeerState* o) {
  o->set_peer(CleanText(p.peer.ShortName()));
  o->set_address(CleanText(p.address));
  o->set_connected(p.connected);
  o->set_consecutive_failures(
      static_cast<int32_t>(std::min<int64_t>(p.consecutive_failures, 1 << 30)));
  o->set_last_error(CleanText(p.last_error));
  o->set_seconds_since_success(Finite(p.seconds_since_success, -1));
  o->set_peer_listen_address(CleanText(p.peer_listen_address));
  o->set_network_failure(p.network_failure);
  o->set_latency_seconds(Finite(p.latency_seconds));
  o->set_step_share(Finite(p.step_share));
  o->set_seconds_failing(Finite(p.seconds_failing));
  o->set_recent_latency_seconds(Finite(p.recent_latency_seconds));
  o->set_usual_latency_seconds(Finite(p.usual_latency_seconds));
  o->set_raised_seconds(Finite(p.raised_seconds));
}

// A healthy edge in a node's record: only what the worker x ps map compares (the rest is the
// edge's defaults: connected, no failure).
void SlimPeerToProto(const PeerInfo& p, pb::PeerState* o) {
  o->set_peer(CleanText(p.peer.ShortName()));
  o->set_connected(p.connected);
  o->set_latency_seconds(Finite(p.latency_seconds));
  o->set_recent_latency_seconds(Finite(p.recent_latency_seconds));
  o->set_usual_latency_seconds(Finite(p.usual_latency_seconds));
  o->set_raised_seconds(Finite(p.raised_seconds));
}

// The fields that name a task and its state, checked: an error for a role that is not a job
// name, an index out of range or an unknown state; `*state` is set from the state's name.
absl::Status CheckIdentity(const pb::TaskView& p, TaskState* state) {
  if (!IsValidJobName(p.role())) {
    return absl::InvalidArgumentError(
        absl::StrCat("task with role \"", CleanText(p.role(), 40), "\" (not a job name)"));
  }
  if (p.task() < 0 || p.task() > 1000000) {
    return absl::InvalidArgumentError(absl::StrCat("task index ", p.task(), " out of range"));
  }
  if (!ParseStateName(p.state(), state)) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown state \"", CleanText(p.state(), 40), "\""));
  }
  return absl::OkStatus();
}

// The peers the task is blocked on (at most kMaxListItems; unparsable names are skipped).
std::vector<BlockedPeer> BlockedOnFromProto(const pb::TaskView& p) {
  std::vector<BlockedPeer> out;
  for (int i = 0; i < std::min(p.blocked_on_size(), kMaxListItems); ++i) {
    const pb::BlockedOn& b = p.blocked_on(i);
    auto ref = ParseTaskRef(b.peer());
    if (!ref.ok()) continue;
    out.push_back({*ref, CleanText(b.address()), Finite(b.seconds()), CleanText(b.last_error())});
  }
  if (p.blocked_on_size() == 0) {  // Older sidecars sent names only.
    for (int i = 0; i < std::min(p.waiting_on_size(), kMaxListItems); ++i) {
      auto ref = ParseTaskRef(p.waiting_on(i));
      if (ref.ok()) out.push_back({*ref, "", 0, ""});
    }
  }
  return out;
}

// One peer's state from the wire, clamped to sane ranges; nullopt when its name does not parse.
std::optional<PeerInfo> PeerFromProto(const pb::PeerState& s) {
  auto ref = ParseTaskRef(s.peer());
  if (!ref.ok()) return std::nullopt;
  PeerInfo info;
  info.peer = *ref;
  info.address = CleanText(s.address());
  info.connected = s.connected();
  info.consecutive_failures = std::max(0, s.consecutive_failures());
  info.last_error = CleanText(s.last_error());
  info.seconds_since_success = Finite(s.seconds_since_success(), -1);
  info.peer_listen_address = CleanText(s.peer_listen_address());
  info.network_failure = s.network_failure();
  info.latency_seconds = std::max(0.0, Finite(s.latency_seconds()));
  info.step_share = std::clamp(Finite(s.step_share()), 0.0, 1.0);
  info.seconds_failing = std::max(0.0, Finite(s.seconds_failing()));
  info.recent_latency_seconds = std::max(0.0, Finite(s.recent_latency_seconds()));
  info.usual_latency_seconds = std::max(0.0, Finite(s.usual_latency_seconds()));
  info.raised_seconds = std::max(0.0, Finite(s.raised_seconds()));
  return info;
}

}  // namespace

std::string CleanText(std::string_view text, size_t max) {
  std::string out;
  out.reserve(std::min(text.size(), max));
  size_t i = 0;
  while (i < text.size()) {
    unsigned char c = static_cast<unsigned char>(text[i]);
    size_t len = c < 0x80           ? 1
                 : (c >> 5) == 0x6  ? 2
                 : (c >> 4) == 0xE  ? 3
                 : (c >> 3) == 0x1E ? 4
                                    : 0;
    bool valid = len > 0 && i + len <= text.size();
    for (size_t k = 1; valid && k < len; ++k) {
      valid = (static_cast<unsigned char>(text[i + k]) & 0xC0) == 0x80;
    }
    if (valid && len == 2 && c < 0xC2) valid = false;  // Overlong.
    if (!valid) len = 1;
    if (out.size() + (valid ? len : 1) > max) break;
    if (valid) {
      out.append(text.substr(i, len));
    } else {
      out.push_back('?');
    }
    i += len;
  }
  return out;
}

namespace {

// The text and seconds of a view, each beside its field of pb::TaskView (of the same name),
// copied both ways through protobuf's reflection: a new fact of these kinds is one row here.
struct TextField {
  const char* name;
  std::string TaskView::*member;
  size_t max = kMaxText;
};
const TextField kTextFields[] = {
    {"cluster", &TaskView::cluster},
    {"address", &TaskView::address},
    {"reason", &TaskView::reason, 4 * kMaxText},
    {"source", &TaskView::source},
    {"phase", &TaskView::phase},
    {"hostname", &TaskView::hostname},
    {"listen_address", &TaskView::listen_address},
    {"runtime_version", &TaskView::runtime_version},
    {"metrics_address", &TaskView::metrics_address},
    {"node", &TaskView::node},
    {"node_hostname", &TaskView::node_hostname},
};

// `signed_`: any finite value (a time); else a duration or figure, never below 0 on the way in.
// Not finite: `otherwise`.
struct SecondsField {
  const char* name;
  double TaskView::*member;
  bool signed_ = false;
  double otherwise = 0;
};
const SecondsField kSecondsFields[] = {
    {"since", &TaskView::since, true},
    {"last_step_seconds", &TaskView::last_step_seconds, true},
    {"recent_step_seconds", &TaskView::recent_step_seconds},
    {"usual_step_seconds", &TaskView::usual_step_seconds},
    {"step_raised_seconds", &TaskView::step_raised_seconds},
    {"cpu_seconds", &TaskView::cpu_seconds},
    {"heartbeat_age_seconds", &TaskView::heartbeat_age_seconds, true, -1},
    {"latency_seconds", &TaskView::latency_seconds},
    {"phi", &TaskView::phi},
    {"observed_at", &TaskView::observed_at, true},
    {"learned_at", &TaskView::learned_at, true},
    {"serve_seconds", &TaskView::serve_seconds},
    {"serve_queue_seconds", &TaskView::serve_queue_seconds},
    {"serve_work_seconds", &TaskView::serve_work_seconds},
};

const google::protobuf::FieldDescriptor* FieldOf(const char* name) {
  const google::protobuf::FieldDescriptor* f = pb::TaskView::descriptor()->FindFieldByName(name);
  if (f == nullptr) std::abort();  // A row that names no field: caught by every test.
  return f;
}

// The descriptors of the rows, in their order (looked up once).
struct Descriptors {
  std::vector<const google::protobuf::FieldDescriptor*> text, seconds;
};
const Descriptors& TaskViewFields() {
  static const Descriptors* d = [] {
    auto* out = new Descriptors;
    for (const TextField& f : kTextFields) out->text.push_back(FieldOf(f.name));
    for (const SecondsField& f : kSecondsFields) out->seconds.push_back(FieldOf(f.name));
    return out;
  }();
  return *d;
}

void RowsToProto(const TaskView& v, pb::TaskView* out) {
  const Descriptors& d = TaskViewFields();
  const google::protobuf::Reflection* r = out->GetReflection();
  for (size_t i = 0; i < std::size(kTextFields); ++i) {
    r->SetString(out, d.text[i], CleanText(v.*kTextFields[i].member, kTextFields[i].max));
  }
  for (size_t i = 0; i < std::size(kSecondsFields); ++i) {
    const SecondsField& f = kSecondsFields[i];
    r->SetDouble(out, d.seconds[i], Finite(v.*f.member, f.otherwise));
  }
}

void RowsFromProto(const pb::TaskView& p, TaskView* v) {
  const Descriptors& d = TaskViewFields();
  const google::protobuf::Reflection* r = p.GetReflection();
  for (size_t i = 0; i < std::size(kTextFields); ++i) {
    v->*kTextFields[i].member = CleanText(r->GetString(p, d.text[i]), kTextFields[i].max);
  }
  for (size_t i = 0; i < std::size(kSecondsFields); ++i) {
    const SecondsField& f = kSecondsFields[i];
    const double x = Finite(r->GetDouble(p, d.seconds[i]), f.otherwise);
    v->*f.member = f.signed_ ? x : std::max(0.0, x);
  }
}

}  // namespace

void ToProto(const TaskView& v, bool full_peers, pb::TaskView* out) {
  out->Clear();
  RowsToProto(v, out);
  out->set_role(CleanText(v.task.role));
  out->set_task(v.task.index);
  out->set_name(CleanText(v.task.ShortName()));
  out->set_state(std::string(StateName(v.state)));
  for (const BlockedPeer& b : v.blocked_on) {
    out->add_waiting_on(CleanText(b.peer.ShortName()));
    BlockedOnToProto(b, out->add_blocked_on());
  }
  out->set_pid(static_cast<int32_t>(v.pid));
  out->set_incarnation(v.incarnation);
  out->set_restarts(static_cast<int32_t>(v.restarts));
  out->set_steps(static_cast<double>(v.steps));
  out->set_expects_progress(v.expects_progress);
  for (const PeerInfo& p : v.peers) {
    if (full_peers || IsFailingOrSlow(p)) {
      PeerToProto(p, out->add_peers());
    } else if (p.latency_seconds > 0) {
      SlimPeerToProto(p, out->add_peers());
    }
  }
  out->set_resident_bytes(static_cast<double>(v.resident_bytes));
  out->set_threads(v.threads);
  out->set_open_fds(v.open_fds);
  for (const std::string& t : v.partitioned_from) out->add_partitioned_from(CleanText(t));
  if (v.cgroup.version > 0) CgroupToProto(v.cgroup, out->mutable_cgroup());
}

absl::StatusOr<TaskView> FromProto(const pb::TaskView& p) {
  TaskView v;
  if (absl::Status s = CheckIdentity(p, &v.state); !s.ok()) return s;
  v.task = {p.role(), p.task()};
  RowsFromProto(p, &v);
  v.blocked_on = BlockedOnFromProto(p);
  v.pid = p.pid();
  v.incarnation = p.incarnation();
  v.restarts = std::max(0, p.restarts());
  v.steps = Count(p.steps());
  v.expects_progress = p.expects_progress();
  for (int i = 0; i < std::min(p.peers_size(), kMaxListItems); ++i) {
    if (std::optional<PeerInfo> info = PeerFromProto(p.peers(i)))
      v.peers.push_back(*std::move(info));
  }
  v.resident_bytes = Count(p.resident_bytes());
  v.threads = std::max(0, p.threads());
  v.open_fds = std::max(0, p.open_fds());
  for (int i = 0; i < std::min(p.partitioned_from_size(), kMaxListItems); ++i) {
    v.partitioned_from.push_back(CleanText(p.partitioned_from(i)));
  }
  if (p.has_cgroup()) v.cgroup = CgroupFromProto(p.cgroup());
  return v;
}

namespace {

// `message` in protobuf's JSON mapping with its proto field names, every field printed; false
// when it cannot be rendered (only invalid UTF-8 fails, and strings go through CleanText).
bool ToJsonString(const google::protobuf::Message& message, std::string* out) {
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;
  return google::protobuf::util::MessageToJsonString(message, out, options).ok();
}

// Parses `body` into `message`, ignoring fields it does not know (a newer sidecar's);
// InvalidArgument "not WHAT: why" when it is not one.
absl::Status FromJsonString(std::string_view body, const char* what,
                            google::protobuf::Message* message) {
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = true;
  auto status = google::protobuf::util::JsonStringToMessage(
      google::protobuf::StringPiece(body.data(), body.size()), message, options);
  if (status.ok()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("not ", what, ": ", CleanText(std::string(status.message()), 200)));
}

}  // namespace

std::string ApiJson(const google::protobuf::Message& body) {
  std::string out;
  if (ToJsonString(body, &out)) return out;
  return "{}";
}

std::string SdJson(const std::vector<TaskView>& views, bool local_only) {
  std::string out = "[";
  for (const TaskView& v : views) {
    if (v.metrics_address.empty() || (local_only && !v.source.empty())) continue;
    pb::TargetGroup group;
    group.add_targets(CleanText(v.metrics_address));
    auto& labels = *group.mutable_labels();
    labels[names::kLabelCluster] = CleanText(v.cluster);
    labels[names::kLabelRole] = CleanText(v.task.role);
    labels[names::kLabelTask] = std::to_string(v.task.index);
    absl::StrAppend(&out, out.size() > 1 ? "," : "", ApiJson(group));
  }
  return out + "]";
}

std::string ToJson(const pb::TaskList& list) {
  std::string out;
  if (ToJsonString(list, &out)) return out;
  return absl::StrCat("{\"cluster\":\"", CleanText(list.cluster()),
                      "\",\"tasks\":[],\"error\":\"could not render\"}");
}

absl::StatusOr<pb::TaskList> ParseTaskListJson(std::string_view body) {
  pb::TaskList list;
  if (absl::Status st = FromJsonString(body, "a task list", &list); !st.ok()) return st;
  return list;
}

absl::StatusOr<pb::IncidentList> ParseIncidentListJson(std::string_view body) {
  pb::IncidentList list;
  if (absl::Status st = FromJsonString(body, "an incident list", &list); !st.ok()) return st;
  return list;
}

absl::StatusOr<pb::Incident> ParseIncidentJson(std::string_view body) {
  pb::Incident incident;
  if (absl::Status st = FromJsonString(body, "an incident", &incident); !st.ok()) return st;
  if (incident.id().empty()) return absl::InvalidArgumentError("not an incident: it has no id");
  return incident;
}

absl::StatusOr<pb::RequestList> ParseRequestListJson(std::string_view body) {
  pb::RequestList list;
  if (absl::Status st = FromJsonString(body, "a list of requests", &list); !st.ok()) return st;
  return list;
}

absl::StatusOr<pb::NodeEvidence> ParseNodeEvidenceJson(std::string_view body) {
  pb::NodeEvidence evidence;
  if (absl::Status st = FromJsonString(body, "a node's evidence", &evidence); !st.ok()) return st;
  if (evidence.node().empty()) return absl::InvalidArgumentError("not evidence: it names no node");
  return evidence;
}

pb::RequestList RequestsInWindow(pb::RequestList list, double from_unix, double to_unix) {
  auto* requests = list.mutable_requests();
  requests->erase(std::remove_if(requests->begin(), requests->end(),
                                 [&](const pb::RequestSummary& r) {
                                   const double end = r.start_unix() + r.duration_ms() / 1000;
                                   return r.start_unix() > to_unix || end < from_unix;
                                 }),
                  requests->end());
  return list;
}

const pb::Incident* FindIncident(const std::vector<pb::Incident>& incidents, std::string_view id) {
  for (const pb::Incident& in : incidents) {
    if (in.id() == id) return &in;
  }
  for (const pb::Incident& in : incidents) {
    if (absl::c_linear_search(in.former_ids(), id)) return &in;
  }
  return nullptr;
}

std::string ToJson(const pb::StackList& list) {
  std::string out;
  if (ToJsonString(list, &out)) return out;
  return absl::StrCat("{\"task\":\"", CleanText(list.task()),
                      "\",\"snapshots\":[],\"error\":\"could not render\"}");
}

absl::StatusOr<pb::StackList> ParseStackListJson(std::string_view body) {
  pb::StackList list;
  if (absl::Status st = FromJsonString(body, "a list of snapshots", &list); !st.ok()) return st;
  return list;
}

namespace {

// A demangled name as a person reads it: std::string for std::basic_string<char, ...>, and no
// default allocators ("std::vector<std::string>").
std::string Readable(std::string fn) {
  static constexpr std::string_view kString =
      "std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> >";
  for (size_t at; (at = fn.find(kString)) != std::string::npos;) {
    fn.replace(at, kString.size(), "std::string");
  }
  static constexpr std::string_view kAllocator = ", std::allocator<";
  for (size_t at; (at = fn.find(kAllocator)) != std::string::npos;) {
    size_t end = at + kAllocator.size();
    int depth = 1;
    while (end < fn.size() && depth > 0) {
      if (fn[end] == '<') ++depth;
      if (fn[end] == '>') --depth;
      ++end;
    }
    if (depth != 0) break;
    while (end < fn.size() && fn[end] == ' ') ++end;  // "> >": the space before the close.
    fn.erase(at, end - at);
    const size_t close = at;
    while (close > 0 && fn[close - 1] == ' ') fn.erase(close - 1, 1);
  }
  return fn;
}

std::string CallText(const pb::CallInFlight& c) {
  return absl::StrCat(c.served() ? "serving " : "", c.method(), c.served() ? " from " : " to ",
                      c.peer(), ", ", HumanDuration(c.age_seconds()),
                      c.trace_id().empty() ? "" : absl::StrCat(" [trace ", c.trace_id(), "]"));
}

void ThreadText(const pb::ThreadStack& t, std::string* out) {
  absl::StrAppend(out, "Thread ", t.tid(), " \"", t.name(), "\" (", t.state(),
                  t.wchan().empty() ? "" : ", " + t.wchan(),
                  t.syscall().empty() ? "" : ", " + t.syscall(), ")\n");
  for (const pb::CallInFlight& c : t.calls())
    absl::StrAppend(out, "  in flight: ", CallText(c), "\n");
  int i = 0;
  for (const pb::StackFrame& f : t.frames()) {
    // Without the operator's credential the program counter is left out (operator_proof.h).
    absl::StrAppendFormat(out, "  #%-2d ", i++);
    if (f.pc() != 0) absl::StrAppendFormat(out, "0x%016x ", f.pc());
    absl::StrAppend(out, f.function().empty() ? "??" : Readable(f.function()), " (", f.module(),
                    ")");
    if (!f.file().empty()) absl::StrAppend(out, " at ", f.file(), ":", f.line());
    out->push_back('\n');
  }
  if (!t.stack_error().empty()) absl::StrAppend(out, "  (", t.stack_error(), ")\n");
}

}  // namespace

std::string StacksToText(const pb::StackList& list, double now_unix) {
  std::string out;
  if (list.snapshots_size() == 0) {
    absl::StrAppend(&out, "no snapshot of ", list.task(),
                    " kept (one is taken when it turns hung, stalled or blocked; add fresh=1 or "
                    "--fresh to take one now)\n");
  }
  for (const pb::StackSnapshot& s : list.snapshots()) {
    absl::StrAppend(&out, "=== ", s.task(), " pid ", s.pid(), " (", s.command(), ", state ",
                    s.process_state(), ") on ", s.node(), ", taken ",
                    HumanDuration(now_unix - s.taken_unix()), " ago (", s.trigger(), ")\n");
    if (!s.reason().empty()) absl::StrAppend(&out, "reason: ", s.reason(), "\n");
    if (!s.summary().empty()) absl::StrAppend(&out, "stuck: ", s.summary(), "\n");
    for (const pb::CallInFlight& c : s.inflight()) {
      absl::StrAppend(&out, "in flight: ", CallText(c), " (thread ", c.tid(), ")\n");
    }
    if (s.stacks()) {
      absl::StrAppendFormat(&out, "%d threads, paused %.1f ms at most (%.1f ms in all)\n",
                            s.threads_size(), s.pause_ms_max(), s.pause_ms_total());
    } else {
      absl::StrAppend(&out, "no stacks: ", s.stacks_error(), "\n");
    }
    for (const pb::ThreadStack& t : s.threads()) {
      out.push_back('\n');
      ThreadText(t, &out);
    }
    out.push_back('\n');
  }
  return out;
}

absl::StatusOr<std::vector<TaskView>> ParseTaskViews(std::string_view body, int* skipped) {
  if (skipped) *skipped = 0;
  auto list = ParseTaskListJson(body);
  if (!list.ok()) return list.status();
  std::vector<TaskView> out;
  for (const pb::TaskView& t : list->tasks()) {
    auto v = FromProto(t);
    if (v.ok()) {
      out.push_back(*std::move(v));
    } else if (skipped) {
      ++*skipped;
    }
  }
  return out;
}

}  // namespace trainscope::sidecar
