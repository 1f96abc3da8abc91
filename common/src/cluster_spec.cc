// TF_CONFIG parsing, host:port addresses, task names and spec comparison; see cluster_spec.h.
#include "trainscope/common/cluster_spec.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <set>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "nlohmann/json.hpp"

namespace trainscope {
namespace {

// Bounds on what a spec may hold: far above any real cluster (the design point is 1,100
// tasks), low enough that a hostile or broken spec cannot take the process's memory.
constexpr size_t kMaxSpecBytes = 16 << 20;
constexpr size_t kMaxJobs = 1000;
constexpr size_t kMaxTasksPerJob = 100000;
constexpr int kMaxTaskIndex = 1000000;

// Quotes a piece of the user's input, shortened so that an error stays one line.
std::string Quote(absl::string_view text) {
  constexpr size_t kMax = 80;
  std::string s(text.substr(0, kMax));
  std::replace(s.begin(), s.end(), '\n', ' ');
  return absl::StrCat("'", s, text.size() > kMax ? "...'" : "'");
}

std::string QuoteJson(const nlohmann::json& value) {
  return Quote(value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

bool IsHostChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_';
}

}  // namespace

std::string TaskRef::ShortName() const { return absl::StrCat(role, ":", index); }

std::string TaskRef::FullName() const {
  return absl::StrCat("/job:", role, "/replica:0/task:", index);
}

bool IsValidJobName(absl::string_view name) {
  if (name.empty() || !std::isalpha(static_cast<unsigned char>(name[0]))) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
  });
}

absl::StatusOr<TaskRef> ParseTaskRef(absl::string_view text) {
  absl::string_view t = absl::StripAsciiWhitespace(text);
  size_t colon = t.rfind(':');
  int index = -1;
  if (colon == absl::string_view::npos || !IsValidJobName(t.substr(0, colon)) ||
      !absl::SimpleAtoi(t.substr(colon + 1), &index) || index < 0 || index > kMaxTaskIndex ||
      t.substr(colon + 1).find_first_not_of("0123456789") != absl::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("task ", Quote(t), " is not job:index (e.g. ps:0)"));
  }
  return TaskRef{std::string(t.substr(0, colon)), index};
}

std::string JoinHostPort(absl::string_view host, int port) {
  const bool v6 = host.find(':') != absl::string_view::npos;
  return absl::StrCat(v6 ? "[" : "", host, v6 ? "]" : "", ":", port);
}

absl::StatusOr<HostPort> ParseHostPort(absl::string_view address) {
  absl::string_view h;
  absl::string_view p;
  bool bracketed = !address.empty() && address.front() == '[';
  if (bracketed) {
    size_t close = address.find(']');
    if (close == absl::string_view::npos || close + 1 >= address.size() ||
        address[close + 1] != ':') {
      return absl::InvalidArgumentError(
          absl::StrCat("bad address ", Quote(address), ": expected [ipv6]:port"));
    }
    h = address.substr(1, close - 1);
    p = address.substr(close + 2);
  } else {
    size_t colon = address.rfind(':');
    if (colon == absl::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("bad address ", Quote(address), ": expected host:port"));
    }
    h = address.substr(0, colon);
    p = address.substr(colon + 1);
    if (h.find(':') != absl::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat("bad address ", Quote(address),
                                                     ": an IPv6 host must be written [addr]:port"));
    }
  }
  if (h.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("bad address ", Quote(address), ": no host"));
  }
  for (char c : h) {
    if (!IsHostChar(c) && !(bracketed && (c == ':' || c == '%'))) {
      return absl::InvalidArgumentError(
          absl::StrCat("bad address ", Quote(address), ": host has character ", Quote({&c, 1})));
    }
  }
  int value = 0;
  if (p.empty() || p.find_first_not_of("0123456789") != absl::string_view::npos ||
      !absl::SimpleAtoi(p, &value) || value < 1 || value > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad address ", Quote(address), ": port must be a number in 1-65535"));
  }
  return HostPort{std::string(h), value};
}

absl::StatusOr<ClusterSpec> ClusterSpec::FromJobs(
    std::map<std::string, std::vector<std::string>> jobs) {
  if (jobs.empty()) return absl::InvalidArgumentError("cluster spec lists no jobs");
  if (jobs.size() > kMaxJobs) {
    return absl::InvalidArgumentError(
        absl::StrCat("cluster spec lists ", jobs.size(), " jobs; at most ", kMaxJobs));
  }
  std::map<std::string, std::string> seen;  // address -> task that lists it
  for (const auto& [job, addresses] : jobs) {
    if (!IsValidJobName(job)) {
      return absl::InvalidArgumentError(
          absl::StrCat("job name ", Quote(job),
                       " is not valid: a letter, then letters, digits or '_' (as TensorFlow)"));
    }
    if (addresses.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("job ", Quote(job), " lists no tasks"));
    }
    if (addresses.size() > kMaxTasksPerJob) {
      return absl::InvalidArgumentError(absl::StrCat(
          "job ", Quote(job), " lists ", addresses.size(), " tasks; at most ", kMaxTasksPerJob));
    }
    for (size_t i = 0; i < addresses.size(); ++i) {
      auto hp = ParseHostPort(addresses[i]);
      if (!hp.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(job, ":", i, ": ", hp.status().message()));
      }
      std::string name = absl::StrCat(job, ":", i);
      auto [it, inserted] = seen.emplace(addresses[i], name);
      if (!inserted) {
        return absl::InvalidArgumentError(absl::StrCat("address ", Quote(addresses[i]),
                                                       " is listed twice: for ", it->second,
                                                       " and for ", name));
      }
    }
  }
  ClusterSpec spec;
  spec.jobs_ = std::move(jobs);
  return spec;
}

int ClusterSpec::NumTasks(absl::string_view role) const {
  auto it = jobs_.find(std::string(role));
  return it == jobs_.end() ? 0 : static_cast<int>(it->second.size());
}

const std::string* ClusterSpec::FindAddress(const TaskRef& task) const {
  auto it = jobs_.find(task.role);
  if (it == jobs_.end() || task.index < 0 || task.index >= static_cast<int>(it->second.size())) {
    return nullptr;
  }
  return &it->second[task.index];
}

absl::StatusOr<std::string> ClusterSpec::AddressOf(const TaskRef& task) const {
  auto it = jobs_.find(task.role);
  if (it == jobs_.end()) {
    return absl::NotFoundError(absl::StrCat("cluster spec has no job ", Quote(task.role)));
  }
  if (task.index < 0 || task.index >= static_cast<int>(it->second.size())) {
    return absl::NotFoundError(absl::StrCat("task index ", task.index, " is out of range: job '",
                                            task.role, "' has ", it->second.size(), " task",
                                            it->second.size() == 1 ? "" : "s"));
  }
  return it->second[task.index];
}

std::vector<TaskRef> ClusterSpec::AllTasks() const {
  std::vector<TaskRef> out;
  for (const auto& [job, addresses] : jobs_) {
    for (size_t i = 0; i < addresses.size(); ++i) out.push_back({job, static_cast<int>(i)});
  }
  return out;
}

std::string ClusterSpec::Fingerprint() const {
  // FNV-1a over a canonical text: stable across builds and platforms, unlike std::hash.
  std::string canonical;
  for (const auto& [job, addresses] : jobs_) {
    absl::StrAppend(&canonical, job, "=", absl::StrJoin(addresses, ","), ";");
  }
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : canonical) {
    h ^= c;
    h *= 1099511628211ull;
  }
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

std::string DescribeSpecDifference(const ClusterSpec& a, absl::string_view a_name,
                                   const ClusterSpec& b, absl::string_view b_name) {
  std::vector<std::string> diffs;
  std::set<std::string> names;
  for (const auto& [job, _] : a.jobs()) names.insert(job);
  for (const auto& [job, _] : b.jobs()) names.insert(job);
  for (const std::string& job : names) {
    auto ia = a.jobs().find(job);
    auto ib = b.jobs().find(job);
    if (ia == a.jobs().end()) {
      diffs.push_back(absl::StrCat("job '", job, "' is only in ", b_name, "'s spec"));
    } else if (ib == b.jobs().end()) {
      diffs.push_back(absl::StrCat("job '", job, "' is only in ", a_name, "'s spec"));
    } else if (ia->second != ib->second) {
      diffs.push_back(absl::StrCat(
          "job '", job, "' lists ", ia->second.size(), " task", ia->second.size() == 1 ? "" : "s",
          " [", absl::StrJoin(ia->second, ", "), "] in ", a_name, "'s spec but ", ib->second.size(),
          " [", absl::StrJoin(ib->second, ", "), "] in ", b_name, "'s"));
    }
  }
  return absl::StrJoin(diffs, "; ");
}

namespace {

// TF_CONFIG's "cluster": job names to lists of "host:port".
absl::StatusOr<ClusterSpec> ParseTfConfigCluster(const nlohmann::json& doc) {
  auto cluster_it = doc.find("cluster");
  if (cluster_it == doc.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("TF_CONFIG has no \"cluster\": ", QuoteJson(doc)));
  }
  if (!cluster_it->is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "TF_CONFIG \"cluster\" must map job names to address lists, got ", QuoteJson(*cluster_it)));
  }
  std::map<std::string, std::vector<std::string>> jobs;
  for (auto it = cluster_it->begin(); it != cluster_it->end(); ++it) {
    if (!it->is_array()) {
      return absl::InvalidArgumentError(absl::StrCat("TF_CONFIG job ", Quote(it.key()),
                                                     " must be a list of \"host:port\", got ",
                                                     QuoteJson(*it)));
    }
    std::vector<std::string>& addresses = jobs[it.key()];
    for (const auto& entry : *it) {
      if (!entry.is_string()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "TF_CONFIG job ", Quote(it.key()), " has a non-string address ", QuoteJson(entry)));
      }
      addresses.push_back(entry.get<std::string>());
    }
  }
  auto spec = ClusterSpec::FromJobs(std::move(jobs));
  if (!spec.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("TF_CONFIG: ", spec.status().message()));
  }
  return spec;
}

// TF_CONFIG's "task" (present and not null): {"type": "<job>", "index": <n>}.
absl::StatusOr<TaskRef> ParseTfConfigTask(const nlohmann::json& task) {
  auto type = task.is_object() ? task.find("type") : task.end();
  if (!task.is_object() || type == task.end() || !type->is_string()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "TF_CONFIG \"task\" must be {\"type\": \"<job>\", \"index\": <n>}, got ", QuoteJson(task)));
  }
  TaskRef ref;
  ref.role = type->get<std::string>();
  auto index = task.find("index");
  if (index != task.end()) {
    if (!index->is_number_integer()) {
      return absl::InvalidArgumentError(
          absl::StrCat("TF_CONFIG task index must be an integer, got ", QuoteJson(*index)));
    }
    int64_t value = index->get<int64_t>();
    if (value < 0 || value > kMaxTaskIndex) {
      return absl::InvalidArgumentError(
          absl::StrCat("TF_CONFIG task index ", value, " is out of range"));
    }
    ref.index = static_cast<int>(value);
  }
  return ref;
}

}  // namespace

absl::StatusOr<TfConfig> ParseTfConfig(absl::string_view text, bool require_task) {
  if (text.size() > kMaxSpecBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("TF_CONFIG is ", text.size(), " bytes; at most ", kMaxSpecBytes));
  }
  nlohmann::json doc = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) {
    return absl::InvalidArgumentError(absl::StrCat("TF_CONFIG is not valid JSON: ", Quote(text)));
  }
  if (!doc.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("TF_CONFIG must be a JSON object, got ", QuoteJson(doc)));
  }
  auto cluster = ParseTfConfigCluster(doc);
  if (!cluster.ok()) return cluster.status();
  TfConfig config;
  config.cluster = *std::move(cluster);

  auto task_it = doc.find("task");
  if (task_it == doc.end() || task_it->is_null() ||
      (task_it->is_object() && task_it->empty() && !require_task)) {
    if (require_task) {
      return absl::InvalidArgumentError(
          "TF_CONFIG has no \"task\": add {\"type\": \"<job>\", \"index\": <n>} to say which "
          "task this process is");
    }
    return config;
  }
  const nlohmann::json& task = *task_it;
  auto parsed = ParseTfConfigTask(task);
  if (!parsed.ok()) return parsed.status();
  const TaskRef& ref = *parsed;
  if (ref.role == "evaluator" && config.cluster.NumTasks("evaluator") == 0) {
    if (require_task) {
      return absl::InvalidArgumentError(absl::StrCat(
          "TF_CONFIG task ", QuoteJson(task),
          ": an evaluator is outside the cluster (TensorFlow's own evaluator reads checkpoints); "
          "a trainscope runtime task must be one of the cluster's jobs"));
    }
    return config;  // The evaluator watches the cluster from outside it.
  }
  auto address = config.cluster.AddressOf(ref);
  if (!address.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("TF_CONFIG task ", QuoteJson(task), ": ", address.status().message()));
  }
  config.task = ref;
  return config;
}

absl::StatusOr<std::vector<TaskRef>> ParseTaskList(absl::string_view list,
                                                   const ClusterSpec& spec) {
  std::vector<TaskRef> out;
  for (absl::string_view part : absl::StrSplit(list, ',', absl::SkipWhitespace())) {
    auto ref = ParseTaskRef(part);
    if (!ref.ok()) return ref.status();
    if (spec.FindAddress(*ref) == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("task ", ref->ShortName(), " is not in the cluster spec"));
    }
    if (std::find(out.begin(), out.end(), *ref) == out.end()) out.push_back(*ref);
  }
  return out;
}

}  // namespace trainscope
