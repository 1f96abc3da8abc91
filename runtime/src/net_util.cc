// Bind checks, listener lookup, gRPC error summaries and /proc readings; see net_util.h.
#include "net_util.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "trainscope/common/proc.h"

namespace trainscope {
std::optional<std::pair<int64_t, std::string>> FindListener(int port) {
  std::optional<PortOwner> owner = FindPortOwner(port);
  if (!owner) return std::nullopt;
  return std::make_pair(owner->pid, owner->command);
}

absl::Status CheckCanListen(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* result = nullptr;
  const std::string port_text = std::to_string(port);
  int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), port_text.c_str(), &hints, &result);
  if (rc != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot resolve host '", host, "': ", gai_strerror(rc)));
  }
  int error = 0;
  for (addrinfo* ai = result; ai != nullptr; ai = ai->ai_next) {
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      error = errno;
      continue;
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    error = bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 ? 0 : errno;
    close(fd);
    if (error == 0) break;
  }
  freeaddrinfo(result);
  if (error == 0) return absl::OkStatus();
  if (error == EADDRINUSE) {
    std::string holder;
    if (auto listener = FindListener(port)) {
      holder = absl::StrCat(" (held by pid ", listener->first, ", ", listener->second, ")");
    }
    return absl::AlreadyExistsError(absl::StrCat("address already in use", holder));
  }
  if (error == EADDRNOTAVAIL) {
    return absl::InvalidArgumentError(
        "address not available on this machine: is this the host the cluster spec names for "
        "this task?");
  }
  if (error == EACCES) {
    return absl::PermissionDeniedError("permission denied (ports below 1024 need privileges)");
  }
  return absl::UnknownError(strerror(error));
}

bool IsLocalPeer(const std::string& grpc_peer) {
  if (absl::StartsWith(grpc_peer, "unix:")) return true;
  std::string host;
  if (absl::StartsWith(grpc_peer, "ipv4:")) {
    host = grpc_peer.substr(5, grpc_peer.rfind(':') - 5);
  } else if (absl::StartsWith(grpc_peer, "ipv6:[")) {
    host = grpc_peer.substr(6, grpc_peer.find(']') - 6);
  } else {
    return false;
  }
  in6_addr a6{};
  in_addr a4{};
  const bool v4 = inet_pton(AF_INET, host.c_str(), &a4) == 1;
  if (!v4 && inet_pton(AF_INET6, host.c_str(), &a6) != 1) return false;
  if (v4 && (ntohl(a4.s_addr) >> 24) == 127) return true;
  if (!v4 && (IN6_IS_ADDR_LOOPBACK(&a6) || (IN6_IS_ADDR_V4MAPPED(&a6) && a6.s6_addr[12] == 127))) {
    return true;
  }
  ifaddrs* ifs = nullptr;
  if (getifaddrs(&ifs) != 0) return false;
  bool local = false;
  for (ifaddrs* i = ifs; i != nullptr && !local; i = i->ifa_next) {
    if (i->ifa_addr == nullptr) continue;
    if (v4 && i->ifa_addr->sa_family == AF_INET) {
      local = reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr == a4.s_addr;
    } else if (!v4 && i->ifa_addr->sa_family == AF_INET6) {
      local = std::memcmp(&reinterpret_cast<sockaddr_in6*>(i->ifa_addr)->sin6_addr, &a6,
                          sizeof(a6)) == 0;
    }
  }
  freeifaddrs(ifs);
  return local;
}

}  // namespace trainscope
