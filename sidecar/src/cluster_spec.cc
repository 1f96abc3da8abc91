// Parsing of TF_CONFIG-style cluster specs and task lists, and local-host matching.
#include "trainscope/sidecar/cluster_spec.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "nlohmann/json.hpp"

namespace trainscope::sidecar {
namespace {

using nlohmann::json;

// A short, single-line rendering of a JSON value for error messages.
std::string Quote(const json& value) {
  std::string s = value.dump();
  if (s.size() > 80) s = s.substr(0, 77) + "...";
  return s;
}

std::string Snippet(std::string_view text, size_t pos) {
  size_t begin = pos > 20 ? pos - 20 : 0;
  std::string s(text.substr(begin, 40));
  std::replace(s.begin(), s.end(), '\n', ' ');
  return s;
}

absl::StatusOr<int> ParseInt(const std::string& s) {
  int v = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || ptr != s.data() + s.size() || s.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("\"", s, "\" is not a number"));
  }
  return v;
}

}  // namespace

absl::StatusOr<TaskRef> ParseTaskRef(std::string_view text) {
  absl::string_view stripped =
      absl::StripAsciiWhitespace(absl::string_view(text.data(), text.size()));
  std::string t(stripped.data(), stripped.size());
  size_t colon = t.rfind(':');
  if (colon == std::string_view::npos || colon == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("task \"", t, "\" is not role:index (e.g. ps:0)"));
  }
  auto index = ParseInt(t.substr(colon + 1));
  if (!index.ok() || *index < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("task \"", t, "\" is not role:index (e.g. ps:0)"));
  }
  return TaskRef{std::string(t.substr(0, colon)), *index};
}

std::vector<TaskRef> ClusterSpec::Tasks() const {
  std::vector<TaskRef> out;
  for (const auto& [role, addresses] : jobs) {
    for (size_t i = 0; i < addresses.size(); ++i) out.push_back({role, static_cast<int>(i)});
  }
  return out;
}

std::optional<std::string> ClusterSpec::Address(const TaskRef& t) const {
  auto it = jobs.find(t.role);
  if (it == jobs.end() || t.index < 0 || t.index >= static_cast<int>(it->second.size())) {
    return std::nullopt;
  }
  return it->second[t.index];
}

absl::StatusOr<std::pair<std::string, int>> SplitHostPort(std::string_view address_view) {
  std::string address(address_view);
  std::string host;
  std::string port;
  if (!address.empty() && address.front() == '[') {
    size_t close = address.find(']');
    if (close == std::string_view::npos || close + 1 >= address.size() ||
        address[close + 1] != ':') {
      return absl::InvalidArgumentError(absl::StrCat("\"", address, "\" is not host:port"));
    }
    host = address.substr(1, close - 1);
    port = address.substr(close + 2);
  } else {
    size_t colon = address.rfind(':');
    if (colon == std::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat("\"", address, "\" is not host:port"));
    }
    host = address.substr(0, colon);
    port = address.substr(colon + 1);
  }
  auto p = ParseInt(port);
  if (host.empty() || !p.ok() || *p <= 0 || *p > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("\"", address, "\" is not host:port"));
  }
  return std::make_pair(std::string(host), *p);
}

absl::StatusOr<ClusterSpec> ParseClusterSpec(std::string_view text) {
  json root = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) {
    // Find where parsing fails, for the message.
    size_t pos = 0;
    try {
      json ignored = json::parse(text);
    } catch (const json::parse_error& e) {
      pos = e.byte > 0 ? e.byte - 1 : 0;
    } catch (...) {
    }
    return absl::InvalidArgumentError(absl::StrCat("cluster spec: not valid JSON near byte ", pos,
                                                   ": \"", Snippet(text, pos), "\""));
  }
  if (!root.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cluster spec: expected a JSON object, got ", Quote(root)));
  }
  auto cluster = root.find("cluster");
  if (cluster == root.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cluster spec: no \"cluster\" key in ", Quote(root)));
  }
  if (!cluster->is_object() || cluster->empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cluster spec: \"cluster\" must map job names to address lists, got ", Quote(*cluster)));
  }
  ClusterSpec spec;
  for (auto it = cluster->begin(); it != cluster->end(); ++it) {
    const std::string& job = it.key();
    if (job.empty() || job.find(':') != std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("cluster spec: job name \"", job, "\" is empty or contains ':'"));
    }
    std::vector<std::string> addresses;
    if (it->is_array()) {
      for (size_t i = 0; i < it->size(); ++i) {
        const json& a = (*it)[i];
        if (!a.is_string() || !SplitHostPort(a.get<std::string>()).ok()) {
          return absl::InvalidArgumentError(absl::StrCat("cluster spec: cluster.", job, "[", i,
                                                         "] = ", Quote(a), " is not host:port"));
        }
        addresses.push_back(a.get<std::string>());
      }
    } else if (it->is_object()) {
      // TensorFlow also accepts {"0": "host:port", ...} for sparse jobs; accept dense ones.
      addresses.resize(it->size());
      for (auto e = it->begin(); e != it->end(); ++e) {
        auto idx = ParseInt(e.key());
        if (!idx.ok() || *idx < 0 || *idx >= static_cast<int>(it->size()) || !e->is_string() ||
            !SplitHostPort(e->get<std::string>()).ok()) {
          return absl::InvalidArgumentError(absl::StrCat("cluster spec: cluster.", job, ".",
                                                         e.key(), " = ", Quote(*e),
                                                         " is not a dense index -> host:port"));
        }
        addresses[*idx] = e->get<std::string>();
      }
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "cluster spec: cluster.", job, " must be a list of host:port, got ", Quote(*it)));
    }
    if (addresses.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("cluster spec: cluster.", job, " lists no address"));
    }
    spec.jobs[job] = std::move(addresses);
  }
  auto task = root.find("task");
  if (task != root.end() && !task->is_null()) {
    if (!task->is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat("cluster spec: \"task\" must be an object, got ", Quote(*task)));
    }
    if (!task->empty()) {
      auto type = task->find("type");
      auto index = task->find("index");
      if (type == task->end() || !type->is_string()) {
        return absl::InvalidArgumentError(
            absl::StrCat("cluster spec: task.type must be a job name, got ", Quote(*task)));
      }
      int i = 0;
      if (index != task->end()) {
        if (!index->is_number_integer()) {
          return absl::InvalidArgumentError(
              absl::StrCat("cluster spec: task.index must be an integer, got ", Quote(*index)));
        }
        i = index->get<int>();
      }
      TaskRef ref{type->get<std::string>(), i};
      if (!spec.Address(ref)) {
        return absl::InvalidArgumentError(
            absl::StrCat("cluster spec: task ", Quote(*task), " is not in the cluster"));
      }
      spec.task = ref;
    }
  }
  return spec;
}

absl::StatusOr<std::vector<TaskRef>> ParseTaskList(std::string_view list, const ClusterSpec& spec) {
  std::vector<TaskRef> out;
  for (absl::string_view part :
       absl::StrSplit(absl::string_view(list.data(), list.size()), ',', absl::SkipWhitespace())) {
    auto ref = ParseTaskRef(std::string(part));
    if (!ref.ok()) return ref.status();
    if (!spec.Address(*ref)) {
      return absl::InvalidArgumentError(
          absl::StrCat("task ", ref->Name(), " is not in the cluster spec"));
    }
    if (std::find(out.begin(), out.end(), *ref) == out.end()) out.push_back(*ref);
  }
  return out;
}

LocalHosts::LocalHosts() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) == 0) hostname_ = name;
  ifaddrs* ifs = nullptr;
  if (getifaddrs(&ifs) == 0) {
    for (ifaddrs* i = ifs; i != nullptr; i = i->ifa_next) {
      if (i->ifa_addr == nullptr) continue;
      char buf[INET6_ADDRSTRLEN] = {};
      if (i->ifa_addr->sa_family == AF_INET) {
        inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr, buf,
                  sizeof(buf));
      } else if (i->ifa_addr->sa_family == AF_INET6) {
        inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(i->ifa_addr)->sin6_addr, buf,
                  sizeof(buf));
      } else {
        continue;
      }
      addresses_.push_back(buf);
    }
    freeifaddrs(ifs);
  }
}

LocalHosts::LocalHosts(std::string hostname, std::vector<std::string> addresses)
    : hostname_(std::move(hostname)), addresses_(std::move(addresses)) {}

bool LocalHosts::IsLocalAddress(const std::string& literal) const {
  in_addr v4{};
  if (inet_pton(AF_INET, literal.c_str(), &v4) == 1) {
    if ((ntohl(v4.s_addr) >> 24) == 127 || v4.s_addr == 0) return true;
  }
  if (literal == "::1" || literal == "::") return true;
  return std::find(addresses_.begin(), addresses_.end(), literal) != addresses_.end();
}

bool LocalHosts::IsLocal(const std::string& host) const {
  if (host == "localhost" || host == "ip6-localhost" || (!hostname_.empty() && host == hostname_)) {
    return true;
  }
  in_addr v4{};
  in6_addr v6{};
  if (inet_pton(AF_INET, host.c_str(), &v4) == 1 || inet_pton(AF_INET6, host.c_str(), &v6) == 1) {
    return IsLocalAddress(host);
  }
  // A name: resolve it (at start-up only) and check its addresses.
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0) return false;
  bool local = false;
  for (addrinfo* r = res; r != nullptr && !local; r = r->ai_next) {
    char buf[INET6_ADDRSTRLEN] = {};
    if (r->ai_family == AF_INET) {
      inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(r->ai_addr)->sin_addr, buf, sizeof(buf));
    } else if (r->ai_family == AF_INET6) {
      inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(r->ai_addr)->sin6_addr, buf,
                sizeof(buf));
    } else {
      continue;
    }
    local = IsLocalAddress(buf);
  }
  freeaddrinfo(res);
  return local;
}

}  // namespace trainscope::sidecar
