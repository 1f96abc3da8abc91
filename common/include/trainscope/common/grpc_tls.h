#pragma once
// gRPC credentials from the --tls_* files (docs/security.md), for every server and channel of
// trainscope: plain text when no file is given (the default), TLS or mutual TLS otherwise, with
// the files re-read every second so that a rotated certificate is served without a restart.
// Also: the names a caller's certificate gives (for identity checks), and one log line per
// refused TLS client instead of gRPC's own lines.

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_context.h"
#include "trainscope/common/tls.h"

namespace trainscope {

// How often the certificate files are re-read (gRPC's FileWatcherCertificateProvider).
inline constexpr unsigned kTlsRefreshSeconds = 1;

// Checks that the files of `tls` make sense together and can be read now (a certificate needs
// its key; `server`: a certificate is needed). The message names the flag and the file.
absl::Status CheckTlsFiles(const TlsFiles& tls, bool server);

// Server credentials: insecure when !tls.enabled(); else TLS with tls.cert_file/key_file and,
// with tls.ca_file, clients must present a certificate signed by it (mutual TLS).
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(const TlsFiles& tls);

// Channel credentials: insecure when !tls.enabled(); else TLS that verifies the server against
// tls.ca_file (the system's CAs when empty) and the host of the target, and presents
// tls.cert_file when given.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(
    const TlsFiles& tls);

// The names the caller's verified certificate gives: subject alternative names (DNS and IP)
// and the common name. Empty for a plain-text caller or one without a certificate.
std::vector<std::string> PeerCertificateNames(const grpc::ServerContextBase& context);

// OK when `host` (a host name or IP, as the cluster spec gives it) is among `names`; else
// PERMISSION_DENIED saying which names the certificate gives.
absl::Status CheckCertificateNamesHost(const std::vector<std::string>& names,
                                       const std::string& host);

// Replaces gRPC's log lines about failed TLS handshakes (several per attempt, in OpenSSL's words,
// none saying whose) with one line per reason and client host a minute, from the server's side:
// "<self> refused a TLS client[ at <addr>]: <why>", `self` being e.g. "ps:0 at 10.0.0.3:2222".
// gRPC 1.51 gives the client's address only when the client hung up; when the server refused
// the client's certificate it does not. A client's own failures are left to its calls' status.
// `write` takes each line (gRPC's log format when null). Other gRPC lines go out as before, at
// GRPC_VERBOSITY. Call before the first server starts; a later call replaces both. Thread-safe.
void LogTlsRefusalsAs(const std::string& self,
                      std::function<void(const std::string&)> write = nullptr);

}  // namespace trainscope
