#pragma once
// Operating-system facts a user needs in an error: whether an address can be bound and who
// holds it, what a gRPC failure means in a few words, and this process's resource usage.

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

// A gRPC failure in a few words: "connection refused", "no answer within 200 ms", ...
// `code` and `message` are grpc::Status's; `deadline_ms` is the call's deadline.
std::string SummarizeRpcError(int code, const std::string& message, int64_t deadline_ms);

// This process's resource usage, read from /proc/self.
struct ResourceUsage {
  double cpu_seconds = 0;
  int64_t resident_bytes = 0;
  int threads = 0;
  int open_fds = 0;
  double start_time_unix = 0;
  int64_t virtual_bytes = 0;
  int64_t max_fds = 0;
};
ResourceUsage ReadResourceUsage();

}  // namespace trainscope
