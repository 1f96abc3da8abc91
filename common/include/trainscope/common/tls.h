#pragma once
// TLS files of one process, as its --tls_* flags give them (docs/security.md). Plain struct:
// the gRPC and HTTP layers each make their credentials from it.

#include <string>

namespace trainscope {

struct TlsFiles {
  // PEM certificate chain and private key this process presents, server and client side.
  std::string cert_file;
  std::string key_file;
  // PEM CA bundle. Set: peers' certificates are verified against it, and servers require
  // clients to present one it signed (mutual TLS). Empty with a certificate: TLS without
  // client certificates, servers verified against the system's CAs.
  std::string ca_file;

  bool enabled() const { return !cert_file.empty() || !ca_file.empty(); }
  bool mutual() const { return !ca_file.empty() && !cert_file.empty(); }
};

}  // namespace trainscope
