#pragma once
// The --tls_* flags, the same in every binary (include only from a main.cc: CLI11 is heavy).

#include "CLI/CLI.hpp"
#include "trainscope/common/tls.h"

namespace trainscope {

inline void AddTlsFlags(CLI::App& app, TlsFiles& tls) {
  app.add_option("--tls_cert_file", tls.cert_file,
                 "PEM certificate (chain) to present on every listener and to every peer; "
                 "re-read when the file changes (docs/security.md)")
      ->envname("TRAINSCOPE_TLS_CERT_FILE");
  app.add_option("--tls_key_file", tls.key_file, "PEM private key of --tls_cert_file")
      ->envname("TRAINSCOPE_TLS_KEY_FILE");
  app.add_option("--tls_ca_file", tls.ca_file,
                 "PEM CA bundle: peers must present a certificate it signed (mutual TLS)")
      ->envname("TRAINSCOPE_TLS_CA_FILE");
}

}  // namespace trainscope
