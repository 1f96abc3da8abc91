#pragma once
// What the --tls_* files hold, read once and checked whole: the certificate chain parses, the
// key is the certificate's, the CA bundle parses. Both TLS layers take only such a set, so a
// rotation caught half written (an empty or truncated file, a new certificate with the old
// key) keeps the last good set in use instead of reaching OpenSSL or gRPC. Internal to common/.

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "trainscope/common/tls.h"

// OpenSSL's types, declared as <openssl/types.h> does, so that this header stays light.
struct x509_st;
struct evp_pkey_st;
struct x509_store_st;
struct stack_st_X509;

namespace trainscope {

struct TlsMaterial {
  // The bytes as read (PEM), and the same parsed. cert/key are empty/null for a client that
  // presents no certificate; ca_pem/ca for TLS without a CA.
  std::string cert_pem, key_pem, ca_pem;
  x509_st* cert = nullptr;
  stack_st_X509* chain = nullptr;  // The certificates after the first one.
  evp_pkey_st* key = nullptr;
  x509_store_st* ca = nullptr;
  // inode, size and mtime of each file when read: what "changed" compares.
  std::string fingerprint;

  TlsMaterial() = default;
  TlsMaterial(const TlsMaterial&) = delete;
  TlsMaterial& operator=(const TlsMaterial&) = delete;
  ~TlsMaterial();
};

// inode, size and mtime of each of the files ("missing" for one that is not there).
std::string TlsFingerprint(const TlsFiles& files);

// Reads and checks the files. InvalidArgument naming the file and what is wrong with it;
// Unavailable when a file changed while it was read (try again).
absl::StatusOr<std::shared_ptr<const TlsMaterial>> ReadTlsMaterial(const TlsFiles& files);

}  // namespace trainscope
