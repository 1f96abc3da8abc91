// HTTP GET and POST on civetweb's client; see http_client.h.
#include "trainscope/sidecar/http_client.h"

#include <civetweb.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <mutex>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "trainscope/common/cluster_spec.h"
#include "trainscope/common/http_tls.h"

namespace trainscope::sidecar {
namespace {

constexpr char kSystemCas[] = "/etc/ssl/certs/ca-certificates.crt";

// civetweb wants the client's certificate and key in one PEM file: a private copy (0600) that
// is gone again once the connection is made.
class CombinedPem {
 public:
  explicit CombinedPem(const TlsFiles& tls) {
    if (tls.cert_file.empty()) return;
    std::ifstream cert(tls.cert_file), key(tls.key_file.empty() ? tls.cert_file : tls.key_file);
    if (!cert || !key) return;
    const char* dir = std::getenv("TMPDIR");
    std::string path = absl::StrCat(dir != nullptr && *dir ? dir : "/tmp", "/trainscope-XXXXXX");
    int fd = mkstemp(path.data());  // 0600.
    if (fd < 0) return;
    std::stringstream pem;
    pem << cert.rdbuf() << "\n" << key.rdbuf();
    const std::string text = pem.str();
    const bool written = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
    close(fd);
    if (written) {
      path_ = path;
    } else {
      unlink(path.c_str());
    }
  }
  ~CombinedPem() {
    if (!path_.empty()) unlink(path_.c_str());
  }
  const char* path() const { return path_.empty() ? nullptr : path_.c_str(); }

 private:
  std::string path_;
};

absl::StatusOr<mg_connection*> Connect(const std::string& host_port, const TlsFiles& tls) {
  auto hp = ParseHostPort(host_port);
  if (!hp.ok()) return hp.status();
  static std::once_flag init;
  std::call_once(init, [] { mg_init_library(0); });
  char error[256] = {};
  mg_connection* conn = nullptr;
  if (tls.enabled()) {
    if (absl::Status s = InitCivetwebTls(); !s.ok()) return s;
    CombinedPem client(tls);
    if (!tls.cert_file.empty() && client.path() == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot read ", tls.cert_file, " and its key ", tls.key_file));
    }
    mg_client_options o{};
    o.host = hp->host.c_str();
    o.port = hp->port;
    o.client_cert = client.path();
    o.server_cert = tls.ca_file.empty() ? kSystemCas : tls.ca_file.c_str();
    o.host_name = hp->host.c_str();
    conn = mg_connect_client_secure(&o, error, sizeof(error));
  } else {
    conn = mg_connect_client(hp->host.c_str(), hp->port, 0, error, sizeof(error));
  }
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
                                     int timeout_ms, size_t max_bytes, const TlsFiles& tls) {
  auto conn = Connect(host_port, tls);
  if (!conn.ok()) return conn.status();
  mg_printf(*conn, "GET %s HTTP/1.0\r\nHost: %s\r\nConnection: close\r\n\r\n", path.c_str(),
            host_port.c_str());
  return ReadResponse(*conn, host_port, path, timeout_ms, max_bytes);
}

absl::StatusOr<HttpResponse> HttpPost(const std::string& host_port, const std::string& path,
                                      const std::string& content_type, const std::string& body,
                                      int timeout_ms, size_t max_bytes, const TlsFiles& tls) {
  auto conn = Connect(host_port, tls);
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
