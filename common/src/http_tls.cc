// TLS for the HTTP servers; see http_tls.h.
#include "trainscope/common/http_tls.h"

#include <openssl/ssl.h>

#include <chrono>

#include "absl/strings/str_cat.h"
#include "tls_material.h"

namespace trainscope {

namespace {

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

absl::StatusOr<std::unique_ptr<HttpTls>> HttpTls::Create(const TlsFiles& files, Log log) {
  if (files.cert_file.empty()) {
    return absl::InvalidArgumentError("TLS on HTTP needs --tls_cert_file and --tls_key_file");
  }
  auto loaded = ReadTlsMaterial(files);
  if (!loaded.ok()) return loaded.status();
  std::unique_ptr<HttpTls> tls(new HttpTls(files, std::move(log)));
  std::lock_guard lock(tls->mu_);
  tls->loaded_ = *std::move(loaded);
  tls->last_check_ms_.store(NowMs());
  return tls;
}

HttpTls::~HttpTls() = default;

std::shared_ptr<const TlsMaterial> HttpTls::current() const {
  std::lock_guard lock(mu_);
  return loaded_;
}

void HttpTls::MaybeReload(int64_t min_interval_ms) {
  const int64_t now = NowMs();
  int64_t last = last_check_ms_.load();
  if (now - last < min_interval_ms) return;
  // One handshake thread checks; the others go on with what is loaded.
  if (!last_check_ms_.compare_exchange_strong(last, now)) return;
  if (TlsFingerprint(files_) == current()->fingerprint) return;
  auto loaded = ReadTlsMaterial(files_);
  if (!loaded.ok()) {
    // Keep serving the last good pair; a rotation may be half written. The fingerprint is not
    // updated, so the next check tries again; the reason is logged once, not every second.
    const std::string why(loaded.status().message());
    bool said;
    {
      std::lock_guard lock(mu_);
      said = why == last_error_;
      last_error_ = why;
    }
    if (log_ && !said) log_(absl::StrCat("TLS files changed but do not load yet: ", why));
    return;
  }
  {
    std::lock_guard lock(mu_);
    loaded_ = *std::move(loaded);
    last_error_.clear();
  }
  reloads_.fetch_add(1);
  if (log_) log_(absl::StrCat("TLS files reloaded: ", files_.cert_file));
}

int HttpTls::SelectCertificate(SSL* ssl, void* self_ptr) {
  auto* self = static_cast<HttpTls*>(self_ptr);
  self->MaybeReload();
  std::shared_ptr<const TlsMaterial> loaded = self->current();
  if (SSL_use_cert_and_key(ssl, loaded->cert, loaded->key, loaded->chain, 1) != 1) return 0;
  if (loaded->ca != nullptr && SSL_set1_verify_cert_store(ssl, loaded->ca) != 1) return 0;
  return 1;
}

int HttpTls::ConfigureServer(void* ssl_ctx) {
  auto* ctx = static_cast<SSL_CTX*>(ssl_ctx);
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  SSL_CTX_set_cert_cb(ctx, &HttpTls::SelectCertificate, this);
  if (files_.mutual()) {
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  }
  return 1;
}

}  // namespace trainscope
