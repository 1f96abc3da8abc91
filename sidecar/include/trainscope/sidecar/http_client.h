#pragma once
// A minimal HTTP/1.0 GET over a POSIX socket, with a deadline and a size cap: enough for a
// sidecar to ask its peers for their views and for trainscopectl to ask a sidecar.

#include <string>

#include "absl/status/statusor.h"

namespace trainscope::sidecar {

struct HttpResponse {
  int status = 0;
  std::string body;
};

// GETs http://`host_port``path`. Fails (Unavailable / DeadlineExceeded / InvalidArgument) when
// the peer cannot be reached, is too slow, or sends more than `max_bytes` or no HTTP at all.
// Thread-safe (no shared state).
absl::StatusOr<HttpResponse> HttpGet(const std::string& host_port, const std::string& path,
                                     int timeout_ms = 1000, size_t max_bytes = 8 << 20);

}  // namespace trainscope::sidecar
