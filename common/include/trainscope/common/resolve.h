#pragma once
// Names to addresses, the same way in the runtime and the sidecar.

#include <string>

namespace trainscope {

// The address `host` resolves to, IPv4 first ("localhost" -> "127.0.0.1"); `host` itself when
// it is an address already, empty when it does not resolve. Resolves names: not for hot paths.
std::string NumericAddress(const std::string& host);

}  // namespace trainscope
