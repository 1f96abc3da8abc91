// Local-host matching; see local_hosts.h.
#include "trainscope/sidecar/local_hosts.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>

#include "trainscope/common/resolve.h"

namespace trainscope::sidecar {

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

LocalHosts LocalHosts::Bound(std::string bound) {
  LocalHosts hosts;
  hosts.addresses_ = {std::move(bound)};
  hosts.strict_ = true;
  return hosts;
}

bool LocalHosts::IsLocalAddress(const std::string& literal) const {
  if (strict_) return literal == addresses_[0];
  in_addr v4{};
  if (inet_pton(AF_INET, literal.c_str(), &v4) == 1) {
    if ((ntohl(v4.s_addr) >> 24) == 127 || v4.s_addr == 0) return true;
  }
  if (literal == "::1" || literal == "::") return true;
  return std::find(addresses_.begin(), addresses_.end(), literal) != addresses_.end();
}

bool LocalHosts::IsLocal(const std::string& host) const {
  if (!strict_ && (host == "localhost" || host == "ip6-localhost" ||
                   (!hostname_.empty() && host == hostname_))) {
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

std::vector<std::string> DefaultBindAddresses(const std::vector<std::string>& task_hosts) {
  std::vector<std::string> out;
  auto add = [&out](const std::string& a) {
    if (!a.empty() && std::find(out.begin(), out.end(), a) == out.end()) out.push_back(a);
  };
  for (const std::string& host : task_hosts) add(NumericAddress(host));
  if (out.empty()) return {"0.0.0.0"};
  add("127.0.0.1");
  return out;
}

}  // namespace trainscope::sidecar
