// TaskView names, ordering and JSON; see task_view.h.
#include "trainscope/sidecar/task_view.h"

#include <algorithm>
#include <array>
#include <cmath>

#include "nlohmann/json.hpp"
#include "trainscope/sidecar/names.h"

namespace trainscope::sidecar {
namespace {

using nlohmann::json;

constexpr std::array<std::string_view, kNumTaskStates> kStateNames = {
    names::kStateUp,      names::kStateSlow,    names::kStateStalled,
    names::kStateBlocked, names::kStateMissing, names::kStateUnreachable,
    names::kStateHung,    names::kStateDead,    names::kStateDone};

// Finite numbers only: JSON has no NaN or infinity.
double Finite(double v) { return std::isfinite(v) ? v : 0; }

json PeerToJson(const PeerInfo& p) {
  return json{{"peer", p.peer.ShortName()},
              {"address", p.address},
              {"connected", p.connected},
              {"consecutive_failures", p.consecutive_failures},
              {"last_error", p.last_error},
              {"seconds_since_success", Finite(p.seconds_since_success)},
              {"peer_listen_address", p.peer_listen_address}};
}

// Typed getters that never throw: the value when present with the right type, else `def`.
std::string Str(const json& o, const char* key, std::string def = "") {
  auto it = o.find(key);
  return it != o.end() && it->is_string() ? it->get<std::string>() : def;
}
double Num(const json& o, const char* key, double def = 0) {
  auto it = o.find(key);
  if (it == o.end() || !it->is_number()) return def;
  double v = it->get<double>();
  return std::isfinite(v) ? v : def;
}
int64_t Int(const json& o, const char* key, int64_t def = 0) {
  double v = Num(o, key, static_cast<double>(def));
  if (v > 9e18 || v < -9e18) return def;
  return static_cast<int64_t>(v);
}
bool Bool(const json& o, const char* key) {
  auto it = o.find(key);
  return it != o.end() && it->is_boolean() && it->get<bool>();
}

PeerInfo PeerFromJson(const json& o) {
  PeerInfo p;
  if (!o.is_object()) return p;
  auto ref = ParseTaskRef(Str(o, "peer"));
  if (ref.ok()) p.peer = *ref;
  p.address = Str(o, "address");
  p.connected = Bool(o, "connected");
  p.consecutive_failures = Int(o, "consecutive_failures");
  p.last_error = Str(o, "last_error");
  p.seconds_since_success = Num(o, "seconds_since_success", -1);
  p.peer_listen_address = Str(o, "peer_listen_address");
  return p;
}

}  // namespace

std::string_view StateName(TaskState state) { return kStateNames[static_cast<int>(state)]; }

bool ParseStateName(std::string_view name, TaskState* state) {
  for (int i = 0; i < kNumTaskStates; ++i) {
    if (kStateNames[i] == name) {
      *state = static_cast<TaskState>(i);
      return true;
    }
  }
  return false;
}

int Severity(TaskState state) { return state == TaskState::kDone ? -1 : static_cast<int>(state); }

bool IsHealthy(TaskState state) { return state == TaskState::kUp || state == TaskState::kDone; }

std::vector<std::string> TaskView::WaitingOn() const {
  std::vector<std::string> out;
  for (const auto& b : blocked_on) out.push_back(b.peer.ShortName());
  return out;
}

std::string TaskViewsToJson(const std::string& cluster, const std::vector<TaskView>& views) {
  json tasks = json::array();
  for (const TaskView& v : views) {
    json blocked = json::array();
    for (const auto& b : v.blocked_on) {
      blocked.push_back({{"peer", b.peer.ShortName()},
                         {"address", b.address},
                         {"seconds", Finite(b.seconds)},
                         {"last_error", b.last_error}});
    }
    json peers = json::array();
    for (const auto& p : v.peers) peers.push_back(PeerToJson(p));
    tasks.push_back({
        {"cluster", v.cluster},
        {"role", v.task.role},
        {"task", v.task.index},
        {"name", v.task.ShortName()},
        {"address", v.address},
        {"state", std::string(StateName(v.state))},
        {"reason", v.reason},
        {"since", Finite(v.since)},
        {"waiting_on", v.WaitingOn()},
        {"blocked_on", blocked},
        {"source", v.source},
        {"phase", v.phase},
        {"pid", v.pid},
        {"hostname", v.hostname},
        {"incarnation", std::to_string(v.incarnation)},  // 64-bit: keep exact in JS.
        {"restarts", v.restarts},
        {"listen_address", v.listen_address},
        {"runtime_version", v.runtime_version},
        {"metrics_address", v.metrics_address},
        {"steps", v.steps},
        {"last_step_seconds", Finite(v.last_step_seconds)},
        {"expects_progress", v.expects_progress},
        {"peers", peers},
        {"cpu_seconds", Finite(v.cpu_seconds)},
        {"resident_bytes", v.resident_bytes},
        {"threads", v.threads},
        {"open_fds", v.open_fds},
        {"heartbeat_age_seconds", Finite(v.heartbeat_age_seconds)},
        {"latency_seconds", Finite(v.latency_seconds)},
        {"phi", Finite(v.phi)},
        {"observed_at", Finite(v.observed_at)},
    });
  }
  json root = {{"cluster", cluster}, {"tasks", tasks}};
  return root.dump(-1, ' ', false, json::error_handler_t::replace);
}

absl::StatusOr<std::vector<TaskView>> ParseTaskViewsJson(std::string_view body, int* skipped) {
  if (skipped) *skipped = 0;
  json root = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) return absl::InvalidArgumentError("not JSON");
  const json* tasks = nullptr;
  if (root.is_object()) {
    auto it = root.find("tasks");
    if (it != root.end()) tasks = &*it;
  } else if (root.is_array()) {
    tasks = &root;
  }
  if (tasks == nullptr || !tasks->is_array()) {
    return absl::InvalidArgumentError("no \"tasks\" list in the answer");
  }
  std::vector<TaskView> out;
  for (const json& o : *tasks) {
    TaskView v;
    auto role = o.is_object() ? o.find("role") : o.end();
    auto index = o.is_object() ? o.find("task") : o.end();
    auto state = o.is_object() ? o.find("state") : o.end();
    if (!o.is_object() || role == o.end() || !role->is_string() ||
        role->get<std::string>().empty() || index == o.end() || !index->is_number_integer() ||
        index->get<int64_t>() < 0 || index->get<int64_t>() > 1000000 || state == o.end() ||
        !state->is_string() || !ParseStateName(state->get<std::string>(), &v.state)) {
      if (skipped) ++*skipped;
      continue;
    }
    v.task = {role->get<std::string>(), static_cast<int>(index->get<int64_t>())};
    v.cluster = Str(o, "cluster");
    v.address = Str(o, "address");
    v.reason = Str(o, "reason");
    v.since = Num(o, "since");
    auto blocked = o.find("blocked_on");
    if (blocked != o.end() && blocked->is_array()) {
      for (const json& b : *blocked) {
        if (!b.is_object()) continue;
        auto ref = ParseTaskRef(Str(b, "peer"));
        if (!ref.ok()) continue;
        v.blocked_on.push_back({*ref, Str(b, "address"), Num(b, "seconds"), Str(b, "last_error")});
      }
    } else {
      auto waiting = o.find("waiting_on");
      if (waiting != o.end() && waiting->is_array()) {
        for (const json& w : *waiting) {
          if (!w.is_string()) continue;
          auto ref = ParseTaskRef(w.get<std::string>());
          if (ref.ok()) v.blocked_on.push_back({*ref, "", 0, ""});
        }
      }
    }
    v.source = Str(o, "source");
    v.phase = Str(o, "phase");
    v.pid = Int(o, "pid");
    v.hostname = Str(o, "hostname");
    v.incarnation = std::strtoull(Str(o, "incarnation", "0").c_str(), nullptr, 10);
    v.restarts = Int(o, "restarts");
    v.listen_address = Str(o, "listen_address");
    v.runtime_version = Str(o, "runtime_version");
    v.metrics_address = Str(o, "metrics_address");
    v.steps = Int(o, "steps");
    v.last_step_seconds = Num(o, "last_step_seconds");
    v.expects_progress = Bool(o, "expects_progress");
    auto peers = o.find("peers");
    if (peers != o.end() && peers->is_array()) {
      for (const json& p : *peers) {
        if (p.is_object()) v.peers.push_back(PeerFromJson(p));
      }
    }
    v.cpu_seconds = Num(o, "cpu_seconds");
    v.resident_bytes = Int(o, "resident_bytes");
    v.threads = static_cast<int32_t>(Int(o, "threads"));
    v.open_fds = static_cast<int32_t>(Int(o, "open_fds"));
    v.heartbeat_age_seconds = Num(o, "heartbeat_age_seconds", -1);
    v.latency_seconds = Num(o, "latency_seconds");
    v.phi = Num(o, "phi");
    v.observed_at = Num(o, "observed_at");
    out.push_back(std::move(v));
  }
  return out;
}

void SortForPeople(std::vector<TaskView>& views) {
  std::stable_sort(views.begin(), views.end(), [](const TaskView& a, const TaskView& b) {
    if (Severity(a.state) != Severity(b.state)) return Severity(a.state) > Severity(b.state);
    return a.task < b.task;
  });
}

}  // namespace trainscope::sidecar
