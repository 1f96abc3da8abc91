#include "trainscope/common/resolve.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"

namespace trainscope {

std::string NumericAddress(const std::string& host) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* result = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &result) != 0) return "";
  std::string v4, v6;
  for (addrinfo* ai = result; ai != nullptr; ai = ai->ai_next) {
    char buf[INET6_ADDRSTRLEN] = {};
    if (ai->ai_family == AF_INET && v4.empty()) {
      inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(ai->ai_addr)->sin_addr, buf, sizeof(buf));
      v4 = buf;
    } else if (ai->ai_family == AF_INET6 && v6.empty()) {
      inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(ai->ai_addr)->sin6_addr, buf,
                sizeof(buf));
      v6 = buf;
    }
  }
  freeaddrinfo(result);
  return v4.empty() ? v6 : v4;
}

bool IsNodeLocalPeer(const std::string& peer, const std::vector<std::string>& addresses) {
  absl::string_view rest(peer);
  if (absl::StartsWith(rest, "unix:") || absl::StartsWith(rest, "unix-abstract:")) return true;
  std::string host;
  if (absl::ConsumePrefix(&rest, "ipv4:")) {
    const size_t colon = rest.rfind(':');
    if (colon == absl::string_view::npos) return false;
    host = std::string(rest.substr(0, colon));
  } else if (absl::ConsumePrefix(&rest, "ipv6:")) {
    std::string decoded = absl::StrReplaceAll(
        std::string(rest), {{"%5B", "["}, {"%5D", "]"}, {"%5b", "["}, {"%5d", "]"}, {"%25", "%"}});
    const size_t close = decoded.rfind(']');
    if (decoded.empty() || decoded[0] != '[' || close == std::string::npos) return false;
    host = decoded.substr(1, close - 1);
    if (const size_t zone = host.find('%'); zone != std::string::npos) host.resize(zone);
    // An IPv4 client of a dual-stack listener: judge its IPv4 address.
    if (absl::StartsWithIgnoreCase(host, "::ffff:") && host.find('.') != std::string::npos) {
      host = host.substr(7);
    }
  } else {
    return false;
  }
  in_addr v4{};
  in6_addr v6{};
  if (inet_pton(AF_INET, host.c_str(), &v4) == 1) {
    if ((ntohl(v4.s_addr) >> 24) == 127) return true;
  } else if (inet_pton(AF_INET6, host.c_str(), &v6) == 1) {
    if (IN6_IS_ADDR_LOOPBACK(&v6)) return true;
  } else {
    return false;
  }
  return std::find(addresses.begin(), addresses.end(), host) != addresses.end();
}

}  // namespace trainscope
