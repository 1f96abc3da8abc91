// gRPC credentials from the --tls_* files; see grpc_tls.h.
#include "trainscope/common/grpc_tls.h"

#include <grpc/support/log.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
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

// Who the refusals are logged as, where they go, and when each was last logged.
struct RefusalLog {
  std::mutex mu;
  std::string self;                                                   // Guarded by mu.
  std::function<void(const std::string&)> write;                      // Guarded by mu.
  std::map<std::string, std::chrono::steady_clock::time_point> last;  // Guarded by mu.
  // The least severe of gRPC's own lines still written (GRPC_VERBOSITY, ERROR by default):
  // the hook sees DEBUG lines only to catch the server's "Handshaking failed" line.
  gpr_log_severity verbosity = GPR_LOG_SEVERITY_ERROR;
};

RefusalLog& Refusals() {
  static auto* log = new RefusalLog;
  return *log;
}

gpr_log_severity VerbosityFromEnv() {
  const char* env = std::getenv("GRPC_VERBOSITY");
  const std::string v = env ? absl::AsciiStrToUpper(env) : "";
  if (v == "DEBUG") return GPR_LOG_SEVERITY_DEBUG;
  if (v == "INFO") return GPR_LOG_SEVERITY_INFO;
  return GPR_LOG_SEVERITY_ERROR;
}

// The peer's address in gRPC's error text (target_address:"ipv4:10.0.0.3:4711"), or "".
std::string PeerAddress(absl::string_view message) {
  constexpr absl::string_view kKey = "target_address:\"";
  size_t at = message.find(kKey);
  if (at == absl::string_view::npos) return "";
  absl::string_view rest = message.substr(at + kKey.size());
  rest = rest.substr(0, rest.find('"'));
  absl::ConsumePrefix(&rest, "ipv4:");
  absl::ConsumePrefix(&rest, "ipv6:");
  return std::string(rest);
}

// chttp2_server's "Handshaking failed: <error>" (DEBUG), the one line that is surely the
// server's side of a handshake, as "refused a TLS client ..." or "" when it is not about TLS.
std::string ServerRefusal(absl::string_view message, std::string* key) {
  const std::string peer = PeerAddress(message);
  std::string words = TlsFailureWords(message);
  if (words.empty() && absl::StrContains(message, "Handshake read failed")) {
    // The client hung up mid-handshake: it does not trust our certificate (or is no TLS client).
    words =
        "it closed the connection during the handshake (does it not trust this task's "
        "certificate? its log says)";
  }
  if (words.empty()) return "";
  // One line per reason and client host a minute.
  *key = absl::StrCat(words, "@", peer.substr(0, peer.rfind(':')));
  return absl::StrCat("refused a TLS client", peer.empty() ? "" : " at ", peer, ": ", words,
                      peer.empty() ? " (gRPC does not say which client)" : "");
}

void LogHook(gpr_log_func_args* args) {
  const absl::string_view message = args->message ? args->message : "";
  RefusalLog& log = Refusals();
  if (absl::StartsWith(message, "Handshake failed with fatal error") ||
      absl::StartsWith(message, "No match found for server name")) {
    return;  // Either side's, said better below (server) or in the call's status (client).
  }
  std::string key;
  std::string refusal =
      absl::StartsWith(message, "Handshaking failed") ? ServerRefusal(message, &key) : "";
  if (refusal.empty()) {
    if (args->severity >= log.verbosity) gpr_default_log(args);
    return;
  }
  std::function<void(const std::string&)> write;
  std::string line;
  {
    std::lock_guard lock(log.mu);
    auto now = std::chrono::steady_clock::now();
    auto [it, fresh] = log.last.try_emplace(key, now);
    if (!fresh && now - it->second < std::chrono::minutes(1)) return;
    it->second = now;
    line = absl::StrCat(log.self, " ", refusal, " (not repeated for a minute)");
    write = log.write;
  }
  if (write) {
    write(line);
    return;
  }
  gpr_log_func_args out = *args;
  out.severity = GPR_LOG_SEVERITY_ERROR;
  out.message = line.c_str();
  gpr_default_log(&out);
}

}  // namespace

void LogTlsRefusalsAs(const std::string& self, std::function<void(const std::string&)> write) {
  RefusalLog& log = Refusals();
  {
    std::lock_guard lock(log.mu);
    log.self = self;
    log.write = std::move(write);
    log.verbosity = VerbosityFromEnv();
  }
  gpr_set_log_function(LogHook);
  // gRPC logs a server's failed handshake only at DEBUG; the hook drops the other DEBUG and
  // INFO lines (a few per connection, none per call) unless GRPC_VERBOSITY asked for them.
  gpr_set_log_verbosity(GPR_LOG_SEVERITY_DEBUG);
}

}  // namespace trainscope
