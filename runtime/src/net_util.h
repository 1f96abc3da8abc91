#pragma once
// Operating-system facts a user needs in an error: whether an address can be bound, and who
// holds it. (gRPC failures in words and /proc readings are in trainscope/common/.)

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"

namespace trainscope {

// Tries to bind `host:port` the way the task server will. OK when it can; otherwise an error
// like "address already in use (held by pid 4242, python3)" or "address not available on this
// machine". Thread-safe.
absl::Status CheckCanListen(const std::string& host, int port);

// The pid and command name of the process listening on TCP `port`, from /proc/net/tcp{,6} and
// /proc/*/fd; nullopt when the OS does not tell (another user's process, or nothing there).
std::optional<std::pair<int64_t, std::string>> FindListener(int port);

// Whether a gRPC peer ("ipv4:10.0.0.3:5000", "ipv6:[::1]:5000", "unix:...") is on this
// machine: a loopback address, one of this machine's interface addresses, or a Unix socket.
bool IsLocalPeer(const std::string& grpc_peer);

}  // namespace trainscope
