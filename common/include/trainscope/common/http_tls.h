#pragma once
// TLS for the HTTP servers (the sidecar's page and API, a task's /metrics; http_server.h): one
// OpenSSL setup shared by both, from the --tls_* files. The server creates its SSL_CTX and hands
// it to ConfigureServer; the certificate is then chosen per handshake from what HttpTls last
// read, so a rotated certificate, key or CA is served from the next handshake on, with no
// restart and no refused connection (docs/security.md, "HTTP listeners").
//
//   auto tls = HttpTls::Create(files, log);              // reads and checks the files
//   auto server = HttpServer::Start(addresses, port, handler, tls->get());

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "trainscope/common/tls.h"

struct ssl_st;

namespace trainscope {

struct TlsMaterial;  // src/tls_material.h

// Thread-safe. Must outlive every server configured with it.
class HttpTls {
 public:
  using Log = std::function<void(const std::string&)>;
  // Reads the certificate chain and key (they must match) and the CA. InvalidArgument naming
  // the file when one cannot be read. `log` hears of reloads and failed reloads (may be null).
  static absl::StatusOr<std::unique_ptr<HttpTls>> Create(const TlsFiles& files, Log log = nullptr);
  ~HttpTls();

  // Re-reads the files when one of them changed (inode, size or mtime), at most once per
  // `min_interval_ms`. A pair that does not read whole (a rotation half written) keeps the
  // last good one and is tried again later. Called at each handshake.
  void MaybeReload(int64_t min_interval_ms = 1000);
  // How many times a changed set of files was loaded since Create.
  uint64_t reloads() const { return reloads_.load(); }
  bool requires_client_certificate() const { return files_.mutual(); }

  // Sets up `ssl_ctx` (an SSL_CTX*: TLS 1.2 at least, our certificate per handshake, client
  // certificates required with a CA). Returns 1.
  int ConfigureServer(void* ssl_ctx);

 private:
  explicit HttpTls(TlsFiles files, Log log) : files_(std::move(files)), log_(std::move(log)) {}
  static int SelectCertificate(::ssl_st* ssl, void* self);
  std::shared_ptr<const TlsMaterial> current() const;

  const TlsFiles files_;
  const Log log_;
  mutable std::mutex mu_;
  std::shared_ptr<const TlsMaterial> loaded_ ABSL_GUARDED_BY(mu_);
  std::string last_error_ ABSL_GUARDED_BY(mu_);  // Why the files last tried did not load.
  std::atomic<int64_t> last_check_ms_{0};
  std::atomic<uint64_t> reloads_{0};
};

}  // namespace trainscope
