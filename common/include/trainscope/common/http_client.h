#pragma once
// HTTP GET and POST on Boost.Beast (as the server, http_server.h), with a deadline on the whole
// exchange and a size cap on the answer: for trainscopectl and the benches to ask a sidecar, and
// for the sidecar to post alerts to Alertmanager. Proxies from the environment are not used
// (these are direct, local calls).

#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "trainscope/common/tls.h"

namespace trainscope {

struct HttpResponse {
  int status = 0;
  std::string body;
  // The header fields of the answer, by lowercase name (the last of a repeated one).
  std::map<std::string, std::string> headers;
};

// GETs http://`host_port``path`, or https:// when `tls` is enabled: the server's certificate
// chain is verified against tls.ca_file (else the system's CAs) and must name the host of
// `host_port` (subjectAltName IP or DNS), and tls.cert_file/key_file are presented when set.
// `headers` are more request header fields, "Name: value". Fails (Unavailable /
// DeadlineExceeded / InvalidArgument) when the server cannot be reached or verified, does not
// answer within `timeout_ms`, or sends more than `max_bytes` or no HTTP at all. Any HTTP status
// is a response (the caller judges it). Thread-safe (no shared state).
absl::StatusOr<HttpResponse> HttpGet(const std::string& host_port, const std::string& path,
                                     int timeout_ms = 3000, size_t max_bytes = 8 << 20,
                                     const TlsFiles& tls = {},
                                     const std::vector<std::string>& headers = {});

// POSTs `body` to http://`host_port``path` (https:// when `tls` is enabled), as HttpGet.
absl::StatusOr<HttpResponse> HttpPost(const std::string& host_port, const std::string& path,
                                      const std::string& content_type, const std::string& body,
                                      int timeout_ms = 3000, size_t max_bytes = 1 << 20,
                                      const TlsFiles& tls = {},
                                      const std::vector<std::string>& headers = {});

}  // namespace trainscope
