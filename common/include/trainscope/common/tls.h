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

// gRPC reads copies of the files, in a private folder that only a whole, checked set replaces
// (common/src/grpc_tls.cc, StagedTls). Removes the folder; done at exit, so call it only before
// std::_Exit. A folder left by a killed process is removed by the user's next TLS process.
// Defined in trainscope::common_grpc.
void RemoveStagedTlsFiles();

}  // namespace trainscope
