#pragma once
// Names to addresses, the same way in the runtime and the sidecar.

#include <string>
#include <vector>

namespace trainscope {

// The address `host` resolves to, IPv4 first ("localhost" -> "127.0.0.1"); `host` itself when
// it is an address already, empty when it does not resolve. Resolves names: not for hot paths.
std::string NumericAddress(const std::string& host);

// Whether the gRPC peer string `peer` ("ipv4:10.0.0.1:5", "ipv6:[::1]:5", "ipv6:%5B::1%5D:5",
// "unix:/path") is this node: a unix socket, loopback, or one of `addresses` (numeric); false
// for anything it cannot parse.
bool IsNodeLocalPeer(const std::string& peer, const std::vector<std::string>& addresses);

}  // namespace trainscope
