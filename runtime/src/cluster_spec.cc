// TF_CONFIG parsing and cluster-spec comparison; see cluster_spec.h.
#include "trainscope/runtime/cluster_spec.h"

#include <algorithm>
#include <functional>
#include <set>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"

namespace trainscope {
namespace {

// Quotes a piece of the user's input, shortened so that an error stays one line.
std::string Quote(absl::string_view text) {
  constexpr size_t kMax = 80;
  std::string s(text.substr(0, kMax));
  std::replace(s.begin(), s.end(), '\n', ' ');
  return absl::StrCat("'", s, text.size() > kMax ? "...'" : "'");
}

}  // namespace

std::string TaskRef::ShortName() const { return absl::StrCat(role, ":", index); }

std::string TaskRef::FullName() const {
  return absl::StrCat("/job:", role, "/replica:0/task:", index);
}

absl::Status ParseHostPort(absl::string_view address, std::string* host, int* port) {
  absl::string_view h;
  absl::string_view p;
  if (!address.empty() && address.front() == '[') {
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
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_' ||
          c == ':')) {
      return absl::InvalidArgumentError(
          absl::StrCat("bad address ", Quote(address), ": host has character ", Quote({&c, 1})));
    }
  }
  int value = 0;
  if (!absl::SimpleAtoi(p, &value) || value < 1 || value > 65535 ||
      p.find_first_not_of("0123456789") != absl::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad address ", Quote(address), ": port must be a number in 1-65535"));
  }
  *host = std::string(h);
  *port = value;
  return absl::OkStatus();
}

absl::StatusOr<ClusterSpec> ClusterSpec::FromJobs(
    std::map<std::string, std::vector<std::string>> jobs) {
  if (jobs.empty()) return absl::InvalidArgumentError("cluster spec lists no jobs");
  std::map<std::string, std::string> seen;  // address -> task that lists it
  for (const auto& [job, addresses] : jobs) {
    if (job.empty()) return absl::InvalidArgumentError("cluster spec has a job with no name");
    if (addresses.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("job ", Quote(job), " lists no tasks"));
    }
    for (size_t i = 0; i < addresses.size(); ++i) {
      std::string host;
      int port = 0;
      absl::Status st = ParseHostPort(addresses[i], &host, &port);
      if (!st.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(job, ":", i, ": ", st.message()));
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
  snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(h));
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

absl::StatusOr<TfConfig> ParseTfConfig(absl::string_view text, bool require_task) {
  nlohmann::json doc = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) {
    return absl::InvalidArgumentError(absl::StrCat("TF_CONFIG is not valid JSON: ", Quote(text)));
  }
  if (!doc.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("TF_CONFIG must be a JSON object, got ", Quote(doc.dump())));
  }
  auto cluster_it = doc.find("cluster");
  if (cluster_it == doc.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("TF_CONFIG has no \"cluster\": ", Quote(doc.dump())));
  }
  if (!cluster_it->is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("TF_CONFIG \"cluster\" must map job names to address lists, got ",
                     Quote(cluster_it->dump())));
  }
  std::map<std::string, std::vector<std::string>> jobs;
  for (auto it = cluster_it->begin(); it != cluster_it->end(); ++it) {
    if (!it->is_array()) {
      return absl::InvalidArgumentError(absl::StrCat("TF_CONFIG job \"", it.key(),
                                                     "\" must be a list of \"host:port\", got ",
                                                     Quote(it->dump())));
    }
    std::vector<std::string>& addresses = jobs[it.key()];
    for (const auto& entry : *it) {
      if (!entry.is_string()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "TF_CONFIG job \"", it.key(), "\" has a non-string address ", Quote(entry.dump())));
      }
      addresses.push_back(entry.get<std::string>());
    }
  }
  auto spec = ClusterSpec::FromJobs(std::move(jobs));
  if (!spec.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("TF_CONFIG: ", spec.status().message()));
  }
  TfConfig config;
  config.cluster = *std::move(spec);

  auto task_it = doc.find("task");
  if (task_it == doc.end() || task_it->is_null()) {
    if (require_task) {
      return absl::InvalidArgumentError(
          "TF_CONFIG has no \"task\": add {\"type\": \"<job>\", \"index\": <n>} to say which "
          "task this process is");
    }
    return config;
  }
  const nlohmann::json& task = *task_it;
  if (!task.is_object() || !task.contains("type") || !task["type"].is_string()) {
    return absl::InvalidArgumentError(
        absl::StrCat("TF_CONFIG \"task\" must be {\"type\": \"<job>\", \"index\": <n>}, got ",
                     Quote(task.dump())));
  }
  TaskRef ref;
  ref.role = task["type"].get<std::string>();
  if (task.contains("index")) {
    const nlohmann::json& index = task["index"];
    if (!index.is_number_integer()) {
      return absl::InvalidArgumentError(
          absl::StrCat("TF_CONFIG task index must be an integer, got ", Quote(index.dump())));
    }
    int64_t value = index.get<int64_t>();
    if (value < 0 || value > 1000000) {
      return absl::InvalidArgumentError(
          absl::StrCat("TF_CONFIG task index ", value, " is out of range"));
    }
    ref.index = static_cast<int>(value);
  }
  auto address = config.cluster.AddressOf(ref);
  if (!address.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("TF_CONFIG task ", Quote(task.dump()), ": ", address.status().message()));
  }
  config.task = ref;
  return config;
}

}  // namespace trainscope
