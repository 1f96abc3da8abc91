// HTTP GET and POST on civetweb's client; see http_client.h.
#include "trainscope/sidecar/http_client.h"

#include <civetweb.h>

#include <mutex>

#include "absl/strings/str_cat.h"
#include "trainscope/common/cluster_spec.h"

namespace trainscope::sidecar {
namespace {

absl::StatusOr<mg_connection*> Connect(const std::string& host_port) {
  auto hp = ParseHostPort(host_port);
  if (!hp.ok()) return hp.status();
  static std::once_flag init;
  std::call_once(init, [] { mg_init_library(0); });
  char error[256] = {};
  mg_connection* conn = mg_connect_client(hp->host.c_str(), hp->port, 0, error, sizeof(error));
  if (conn == nullptr) {
    return absl::UnavailableError(absl::StrCat("cannot connect to ", host_port, ": ", error));
  }
  return conn;
}

// Waits for the answer on `conn` (its request sent) and reads it; closes `conn`.
absl::StatusOr<HttpResponse> ReadResponse(mg_connection* conn, const std::string& host_port,
                                          const std::string& path, int timeout_ms,
                                          size_t max_bytes) {
  char error[256] = {};
  if (mg_get_response(conn, error, sizeof(error), timeout_ms) < 0) {
    mg_close_connection(conn);
    return absl::DeadlineExceededError(
        absl::StrCat(host_port, path, " did not answer in HTTP within ", timeout_ms, " ms",
                     error[0] ? absl::StrCat(" (", error, ")") : ""));
  }
  HttpResponse out;
  out.status = mg_get_response_info(conn)->status_code;
  char buf[16384];
  int n = 0;
  while ((n = mg_read(conn, buf, sizeof(buf))) > 0) {
    out.body.append(buf, static_cast<size_t>(n));
    if (out.body.size() > max_bytes) {
      mg_close_connection(conn);
      return absl::InvalidArgumentError(
          absl::StrCat(host_port, path, " sent more than ", max_bytes, " bytes"));
    }
  }
  mg_close_connection(conn);
  return out;
}

}  // namespace

absl::StatusOr<HttpResponse> HttpGet(const std::string& host_port, const std::string& path,
                                     int timeout_ms, size_t max_bytes) {
  auto conn = Connect(host_port);
  if (!conn.ok()) return conn.status();
  mg_printf(*conn, "GET %s HTTP/1.0\r\nHost: %s\r\nConnection: close\r\n\r\n", path.c_str(),
            host_port.c_str());
  return ReadResponse(*conn, host_port, path, timeout_ms, max_bytes);
}

absl::StatusOr<HttpResponse> HttpPost(const std::string& host_port, const std::string& path,
                                      const std::string& content_type, const std::string& body,
                                      int timeout_ms, size_t max_bytes) {
  auto conn = Connect(host_port);
  if (!conn.ok()) return conn.status();
  mg_printf(*conn,
            "POST %s HTTP/1.0\r\nHost: %s\r\nConnection: close\r\nContent-Type: %s\r\n"
            "Content-Length: %zu\r\n\r\n",
            path.c_str(), host_port.c_str(), content_type.c_str(), body.size());
  if (mg_write(*conn, body.data(), body.size()) != static_cast<int>(body.size())) {
    mg_close_connection(*conn);
    return absl::UnavailableError(absl::StrCat("cannot send the request to ", host_port, path));
  }
  return ReadResponse(*conn, host_port, path, timeout_ms, max_bytes);
}

}  // namespace trainscope::sidecar
