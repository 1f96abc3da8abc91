// TLS for the civetweb HTTP servers; see http_tls.h.
#include "trainscope/common/http_tls.h"

#include <civetweb.h>
#include <dlfcn.h>
#include <openssl/ssl.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tls_material.h"

namespace trainscope {

namespace {

thread_local HttpTls* t_current = nullptr;

// Loads civetweb_openssl3_shim.cc's library so that civetweb can use OpenSSL 3: from
// $TRAINSCOPE_OPENSSL3_SHIM, beside the program, where the build put it, or where the packages
// install it. Its path, or empty.
std::string LoadOpenSsl3Shim() {
  std::vector<std::string> candidates;
  if (const char* env = std::getenv("TRAINSCOPE_OPENSSL3_SHIM")) candidates.push_back(env);
  char exe[4096] = {};
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n > 0) {
    std::string dir(exe, static_cast<size_t>(n));
    candidates.push_back(dir.substr(0, dir.rfind('/') + 1) + "libtrainscope_openssl3_shim.so");
  }
  candidates.push_back(TRAINSCOPE_OPENSSL3_SHIM_BUILT);
  candidates.push_back(TRAINSCOPE_OPENSSL3_SHIM_INSTALLED);
  for (const std::string& path : candidates) {
    if (!path.empty() && dlopen(path.c_str(), RTLD_NOW) != nullptr) return path;
  }
  return "";
}

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

absl::Status InitCivetwebTls() {
  // civetweb loads libssl at run time, once, when asked for TLS (before its first mg_start
  // with TLS ports); without it, it refuses them with only "Error initializing SSL context".
  static const std::string error = [] {
    const std::string shim = LoadOpenSsl3Shim();
    if ((mg_init_library(MG_FEATURES_TLS) & MG_FEATURES_TLS) != 0) return std::string();
    return absl::StrCat("civetweb cannot load OpenSSL 3 for HTTPS: ",
                        shim.empty() ? "libtrainscope_openssl3_shim.so not found beside the "
                                       "program, in " TRAINSCOPE_OPENSSL3_SHIM_INSTALLED
                                       " (package trainscope-sidecar) or at "
                                       "$TRAINSCOPE_OPENSSL3_SHIM"
                                     : "libssl.so and libcrypto.so did not load");
  }();
  if (!error.empty()) return absl::FailedPreconditionError(error);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<HttpTls>> HttpTls::Create(const TlsFiles& files, Log log) {
  if (absl::Status s = InitCivetwebTls(); !s.ok()) return s;
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

ScopedHttpTls::ScopedHttpTls(HttpTls* tls) : previous_(t_current) { t_current = tls; }
ScopedHttpTls::~ScopedHttpTls() { t_current = previous_; }

int HttpTlsInitSsl(void* ssl_ctx, void* /*user_data*/) {
  return t_current == nullptr ? -1 : t_current->ConfigureServer(ssl_ctx);
}

std::string CivetwebPort(const std::string& host, int port, bool tls) {
  const bool v6 = host.find(':') != std::string::npos;
  return absl::StrCat(v6 ? "[" : "", host, v6 ? "]" : "", ":", port, tls ? "s" : "");
}

}  // namespace trainscope
