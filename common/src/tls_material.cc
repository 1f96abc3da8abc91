// Reading the --tls_* files whole; see tls_material.h.
#include "tls_material.h"

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <sys/stat.h>

#include <fstream>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "trainscope/common/secret_file.h"

namespace trainscope {
namespace {

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

absl::Status ReadWhole(const std::string& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::InvalidArgumentError(absl::StrCat("cannot read ", path));
  out->assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  if (out->empty()) return absl::InvalidArgumentError(absl::StrCat(path, " is empty"));
  return absl::OkStatus();
}

// A memory BIO over `pem`, freed at scope end.
struct Bio {
  explicit Bio(const std::string& pem) : bio(BIO_new_mem_buf(pem.data(), int(pem.size()))) {}
  ~Bio() { BIO_free(bio); }
  BIO* bio;
};

absl::Status ParseChain(const std::string& path, TlsMaterial* out) {
  Bio in(out->cert_pem);
  out->cert = PEM_read_bio_X509(in.bio, nullptr, nullptr, nullptr);
  out->chain = sk_X509_new_null();
  while (X509* extra = PEM_read_bio_X509(in.bio, nullptr, nullptr, nullptr)) {
    sk_X509_push(out->chain, extra);
  }
  ERR_clear_error();  // The loop ends on "no start line".
  if (out->cert == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(path, " holds no whole PEM certificate"));
  }
  return absl::OkStatus();
}

absl::Status ParseKey(const std::string& path, TlsMaterial* out) {
  Bio in(out->key_pem);
  out->key = PEM_read_bio_PrivateKey(in.bio, nullptr, nullptr, nullptr);
  if (out->key == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": no whole PEM private key (",
                                                   OpenSslError(),
                                                   "); an encrypted key is not supported"));
  }
  if (X509_check_private_key(out->cert, out->key) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError(absl::StrCat(path, " is not the key of the certificate"));
  }
  return absl::OkStatus();
}

absl::Status ParseCa(const std::string& path, TlsMaterial* out) {
  Bio in(out->ca_pem);
  out->ca = X509_STORE_new();
  int certificates = 0;
  while (X509* ca = PEM_read_bio_X509(in.bio, nullptr, nullptr, nullptr)) {
    X509_STORE_add_cert(out->ca, ca);  // Takes its own reference.
    X509_free(ca);
    ++certificates;
  }
  ERR_clear_error();
  if (certificates == 0) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": no whole PEM CA certificate"));
  }
  return absl::OkStatus();
}

}  // namespace

TlsMaterial::~TlsMaterial() {
  X509_free(cert);
  sk_X509_pop_free(chain, X509_free);
  EVP_PKEY_free(key);
  X509_STORE_free(ca);
}

std::string TlsFingerprint(const TlsFiles& f) {
  return absl::StrCat(FileStamp(f.cert_file), " ", FileStamp(f.key_file), " ",
                      FileStamp(f.ca_file));
}

absl::StatusOr<std::shared_ptr<const TlsMaterial>> ReadTlsMaterial(const TlsFiles& files) {
  auto m = std::make_shared<TlsMaterial>();
  m->fingerprint = TlsFingerprint(files);
  if (!files.cert_file.empty()) {
    const std::string key_file = files.key_file.empty() ? files.cert_file : files.key_file;
    if (absl::Status s = ReadWhole(files.cert_file, &m->cert_pem); !s.ok()) return s;
    auto key = ReadSecretFile("--tls_key_file", key_file, 1 << 20);
    if (!key.ok()) return key.status();
    if (key->empty()) return absl::InvalidArgumentError(absl::StrCat(key_file, " is empty"));
    m->key_pem = *std::move(key);
    if (absl::Status s = ParseChain(files.cert_file, m.get()); !s.ok()) return s;
    if (absl::Status s = ParseKey(key_file, m.get()); !s.ok()) return s;
  }
  if (!files.ca_file.empty()) {
    if (absl::Status s = ReadWhole(files.ca_file, &m->ca_pem); !s.ok()) return s;
    if (absl::Status s = ParseCa(files.ca_file, m.get()); !s.ok()) return s;
  }
  if (TlsFingerprint(files) != m->fingerprint) {
    return absl::UnavailableError("the files changed while they were read");
  }
  return std::shared_ptr<const TlsMaterial>(std::move(m));
}

}  // namespace trainscope
