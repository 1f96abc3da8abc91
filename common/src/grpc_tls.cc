// gRPC credentials from the --tls_* files; see grpc_tls.h.
#include "trainscope/common/grpc_tls.h"

#include <grpc/support/log.h>

#include <chrono>
#include <fstream>
#include <map>
#include <mutex>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "grpcpp/security/tls_certificate_provider.h"
#include "grpcpp/security/tls_credentials_options.h"
#include "trainscope/common/rpc_error.h"

// gRPC's own line writer (exported by libgpr, not declared in its public headers).
void gpr_default_log(gpr_log_func_args* args);

namespace trainscope {
namespace {

namespace gx = grpc::experimental;

absl::Status CheckReadable(const std::string& flag, const std::string& path,
                           absl::string_view pem_tag) {
  std::ifstream in(path);
  if (!in) return absl::InvalidArgumentError(absl::StrCat(flag, " ", path, ": cannot read it"));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!absl::StrContains(text, "-----BEGIN") || !absl::StrContains(text, pem_tag)) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " ", path, ": not a PEM file with a ", pem_tag, " in it"));
  }
  return absl::OkStatus();
}

std::shared_ptr<gx::FileWatcherCertificateProvider> Provider(const TlsFiles& tls) {
  return std::make_shared<gx::FileWatcherCertificateProvider>(tls.key_file, tls.cert_file,
                                                              tls.ca_file, kTlsRefreshSeconds);
}

}  // namespace

absl::Status CheckTlsFiles(const TlsFiles& tls, bool server) {
  if (!tls.enabled()) return absl::OkStatus();
  if (tls.cert_file.empty() != tls.key_file.empty()) {
    return absl::InvalidArgumentError(
        "--tls_cert_file and --tls_key_file go together: give both or neither");
  }
  if (server && tls.cert_file.empty()) {
    return absl::InvalidArgumentError(
        "--tls_ca_file without --tls_cert_file: a TLS server needs a certificate and key");
  }
  absl::Status st = absl::OkStatus();
  if (!tls.cert_file.empty()) {
    st.Update(CheckReadable("--tls_cert_file", tls.cert_file, "CERTIFICATE"));
    st.Update(CheckReadable("--tls_key_file", tls.key_file, "PRIVATE KEY"));
  }
  if (!tls.ca_file.empty()) st.Update(CheckReadable("--tls_ca_file", tls.ca_file, "CERTIFICATE"));
  return st;
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const TlsFiles& tls) {
  if (!tls.enabled()) return grpc::InsecureServerCredentials();
  if (absl::Status st = CheckTlsFiles(tls, /*server=*/true); !st.ok()) return st;
  gx::TlsServerCredentialsOptions options(Provider(tls));
  options.watch_identity_key_cert_pairs();
  if (tls.mutual()) {
    options.watch_root_certs();
    options.set_cert_request_type(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  } else {
    options.set_cert_request_type(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  }
  return gx::TlsServerCredentials(options);
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(
    const TlsFiles& tls) {
  if (!tls.enabled()) return grpc::InsecureChannelCredentials();
  if (absl::Status st = CheckTlsFiles(tls, /*server=*/false); !st.ok()) return st;
  gx::TlsChannelCredentialsOptions options;
  options.set_certificate_provider(Provider(tls));
  if (!tls.ca_file.empty()) options.watch_root_certs();
  if (!tls.cert_file.empty()) options.watch_identity_key_cert_pairs();
  SetTlsClient(tls.cert_file.empty() ? TlsClient::kWithoutCertificate
                                     : TlsClient::kWithCertificate);
  return gx::TlsCredentials(options);
}

std::vector<std::string> PeerCertificateNames(const grpc::ServerContext& context) {
  std::vector<std::string> names;
  std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
  if (!auth || !auth->IsPeerAuthenticated()) return names;
  for (const char* property : {"x509_subject_alternative_name", "x509_common_name"}) {
    for (const grpc::string_ref& value : auth->FindPropertyValues(property)) {
      names.emplace_back(value.data(), value.size());
    }
  }
  return names;
}

absl::Status CheckCertificateNamesHost(const std::vector<std::string>& names,
                                       const std::string& host) {
  for (const std::string& name : names) {
    if (absl::EqualsIgnoreCase(name, host)) return absl::OkStatus();
  }
  return absl::PermissionDeniedError(
      absl::StrCat("its certificate names ", names.empty() ? "nothing" : absl::StrJoin(names, ", "),
                   ", not ", host, " (the host the cluster spec gives it)"));
}

namespace {

// Who the refusals are logged as, and when each reason was last logged.
struct RefusalLog {
  std::mutex mu;
  std::string server;                                                 // Guarded by mu.
  std::map<std::string, std::chrono::steady_clock::time_point> last;  // Guarded by mu.
};

RefusalLog& Refusals() {
  static auto* log = new RefusalLog;
  return *log;
}

// True for gRPC's lines about a failed TLS handshake (from either side of it).
bool IsHandshakeFailureLine(absl::string_view message) {
  return absl::StartsWith(message, "Handshake failed") ||
         absl::StartsWith(message, "No match found for server name");
}

void LogHook(gpr_log_func_args* args) {
  const absl::string_view message = args->message ? args->message : "";
  if (!IsHandshakeFailureLine(message)) {
    gpr_default_log(args);
    return;
  }
  const std::string words = TlsFailureWords(message);
  // A client's own failures reach its caller as a status, which says them with the address.
  if (words.empty() || absl::StartsWith(message, "No match found")) return;
  RefusalLog& log = Refusals();
  std::string line;
  {
    std::lock_guard lock(log.mu);
    auto now = std::chrono::steady_clock::now();
    auto [it, fresh] = log.last.try_emplace(words, now);
    if (!fresh && now - it->second < std::chrono::minutes(1)) return;
    it->second = now;
    // gRPC does not say which peer; this line stands for a minute of the same.
    line = absl::StrCat(log.server, ": TLS handshake with a peer failed: ", words,
                        " (not repeated for a minute)");
  }
  gpr_log_func_args out = *args;
  out.severity = GPR_LOG_SEVERITY_ERROR;
  out.message = line.c_str();
  gpr_default_log(&out);
}

}  // namespace

void LogTlsRefusalsAs(const std::string& self) {
  {
    std::lock_guard lock(Refusals().mu);
    Refusals().server = self;
  }
  gpr_set_log_function(LogHook);
}

}  // namespace trainscope
