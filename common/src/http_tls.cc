// TLS for the civetweb HTTP servers; see http_tls.h.
#include "trainscope/common/http_tls.h"

#include <civetweb.h>
#include <dlfcn.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "absl/strings/str_cat.h"

namespace trainscope {

// One consistent set of what the files held: the certificate, its chain, its key, and the CA
// store that verifies clients (null without a CA).
struct HttpTls::Loaded {
  X509* cert = nullptr;
  STACK_OF(X509) * chain = nullptr;
  EVP_PKEY* key = nullptr;
  X509_STORE* ca = nullptr;
  std::string fingerprint;  // inode, size, mtime of each file: what "changed" compares.

  ~Loaded() {
    X509_free(cert);
    sk_X509_pop_free(chain, X509_free);
    EVP_PKEY_free(key);
    X509_STORE_free(ca);
  }
};

namespace {

thread_local HttpTls* t_current = nullptr;

std::string OpenSslError() {
  unsigned long e = ERR_get_error();
  ERR_clear_error();
  if (e == 0) return "not PEM";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof(buf));
  return buf;
}

std::string FileStamp(const std::string& path) {
  if (path.empty()) return "-";
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return "missing";
  return absl::StrCat(st.st_ino, "/", st.st_size, "/", st.st_mtim.tv_sec, ".", st.st_mtim.tv_nsec);
}

std::string Fingerprint(const TlsFiles& f) {
  return absl::StrCat(FileStamp(f.cert_file), " ", FileStamp(f.key_file), " ",
                      FileStamp(f.ca_file));
}

absl::Status ReadChain(const std::string& path, HttpTls::Loaded* out) {
  FILE* f = std::fopen(path.c_str(), "r");
  if (f == nullptr) return absl::InvalidArgumentError(absl::StrCat("cannot read ", path));
  out->cert = PEM_read_X509(f, nullptr, nullptr, nullptr);
  out->chain = sk_X509_new_null();
  while (X509* extra = PEM_read_X509(f, nullptr, nullptr, nullptr)) sk_X509_push(out->chain, extra);
  ERR_clear_error();  // The loop ends on "no start line".
  std::fclose(f);
  if (out->cert == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(path, " holds no PEM certificate"));
  }
  return absl::OkStatus();
}

absl::Status ReadKey(const std::string& path, HttpTls::Loaded* out) {
  FILE* f = std::fopen(path.c_str(), "r");
  if (f == nullptr) return absl::InvalidArgumentError(absl::StrCat("cannot read ", path));
  out->key = PEM_read_PrivateKey(f, nullptr, nullptr, nullptr);
  std::fclose(f);
  if (out->key == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": no PEM private key (", OpenSslError(),
                                                   "); an encrypted key is not supported"));
  }
  if (X509_check_private_key(out->cert, out->key) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError(absl::StrCat(path, " is not the key of the certificate"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const HttpTls::Loaded>> Load(const TlsFiles& files) {
  auto loaded = std::make_shared<HttpTls::Loaded>();
  loaded->fingerprint = Fingerprint(files);
  if (files.cert_file.empty()) {
    return absl::InvalidArgumentError("TLS on HTTP needs --tls_cert_file and --tls_key_file");
  }
  const std::string key_file = files.key_file.empty() ? files.cert_file : files.key_file;
  if (absl::Status s = ReadChain(files.cert_file, loaded.get()); !s.ok()) return s;
  if (absl::Status s = ReadKey(key_file, loaded.get()); !s.ok()) return s;
  if (!files.ca_file.empty()) {
    loaded->ca = X509_STORE_new();
    if (X509_STORE_load_locations(loaded->ca, files.ca_file.c_str(), nullptr) != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(files.ca_file, ": no PEM CA certificate (", OpenSslError(), ")"));
    }
  }
  return std::shared_ptr<const HttpTls::Loaded>(std::move(loaded));
}

// Loads civetweb_openssl3_shim.cc's library so that civetweb can use OpenSSL 3: from
// $TRAINSCOPE_OPENSSL3_SHIM, beside the program, or where the build put it. Its path, or empty.
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
                                       "program (or at $TRAINSCOPE_OPENSSL3_SHIM)"
                                     : "libssl.so and libcrypto.so did not load");
  }();
  if (!error.empty()) return absl::FailedPreconditionError(error);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<HttpTls>> HttpTls::Create(const TlsFiles& files, Log log) {
  if (absl::Status s = InitCivetwebTls(); !s.ok()) return s;
  auto loaded = Load(files);
  if (!loaded.ok()) return loaded.status();
  std::unique_ptr<HttpTls> tls(new HttpTls(files, std::move(log)));
  std::lock_guard lock(tls->mu_);
  tls->loaded_ = *std::move(loaded);
  tls->last_check_ms_.store(NowMs());
  return tls;
}

HttpTls::~HttpTls() = default;

std::shared_ptr<const HttpTls::Loaded> HttpTls::current() const {
  std::lock_guard lock(mu_);
  return loaded_;
}

void HttpTls::MaybeReload(int64_t min_interval_ms) {
  const int64_t now = NowMs();
  int64_t last = last_check_ms_.load();
  if (now - last < min_interval_ms) return;
  // One handshake thread checks; the others go on with what is loaded.
  if (!last_check_ms_.compare_exchange_strong(last, now)) return;
  if (Fingerprint(files_) == current()->fingerprint) return;
  auto loaded = Load(files_);
  if (!loaded.ok()) {
    // Keep serving the last good pair; a rotation may be half written. The fingerprint is not
    // updated, so the next check tries again.
    if (log_)
      log_(absl::StrCat("TLS files changed but do not load yet: ", loaded.status().message()));
    return;
  }
  {
    std::lock_guard lock(mu_);
    loaded_ = *std::move(loaded);
  }
  reloads_.fetch_add(1);
  if (log_) log_(absl::StrCat("TLS files reloaded: ", files_.cert_file));
}

int HttpTls::SelectCertificate(SSL* ssl, void* self_ptr) {
  auto* self = static_cast<HttpTls*>(self_ptr);
  self->MaybeReload();
  std::shared_ptr<const Loaded> loaded = self->current();
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
