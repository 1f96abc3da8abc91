#pragma once
// Who may act through the sidecar's HTTP API. Reads stay open; whatever changes a process (a
// fresh capture pauses every thread of the task) needs a credential: the bearer token of
// --api_token_file (`Authorization: Bearer <token>`, compared in constant time, the file read
// again when it changes), or a client certificate that the CA verified (mutual TLS). Refusals
// are counted by reason and logged once a minute per client address and reason; the token is
// never logged nor echoed. docs/security.md, "Credentials for actions". Private to the sidecar
// library.

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "trainscope/common/http_server.h"
#include "trainscope/sidecar/operator_proof.h"

namespace trainscope::sidecar {

struct ApiAuthOptions {
  std::string token_file;  // "" = no token: actions need a client certificate (else 403).
  double recheck_s = 1;    // How often the file is checked for a change, at most.
};

// Also the operator's credential that the exchange proves and checks (operator_proof.h).
// Thread-safe.
class ApiAuth final : public OperatorCredential {
 public:
  // Reads the token file. InvalidArgument, naming the file, when it cannot be read or holds
  // no usable token (at least 16 characters, no spaces: `openssl rand -hex 32 > FILE`).
  static absl::StatusOr<std::unique_ptr<ApiAuth>> Create(ApiAuthOptions options);

  // Empty when `request` may do `action` (words, plural: "fresh captures"); else the answer that
  // refuses it: 401 with `WWW-Authenticate: Bearer` (no or a wrong credential), or 403 (no
  // token file set, and no client certificate), saying how to get one.
  std::optional<HttpServer::Response> Refusal(const HttpServer::Request& request,
                                              std::string_view action);
  // Whether `request` holds the operator's credential (a client certificate or the token);
  // counts nothing. Reads that show program counters need it.
  bool Authorized(const HttpServer::Request& request);
  // Refusals so far by reason (no_credential, bad_token, no_token_file, and over the exchange
  // stale_credential, replayed_credential), each present.
  std::map<std::string, int64_t> refused() const;
  bool has_token() const { return !options_.token_file.empty(); }

  // OperatorCredential.
  std::string Token() override { return has_token() ? CurrentToken() : ""; }
  void CountRefusal(std::string_view reason) override;

 private:
  explicit ApiAuth(ApiAuthOptions options) : options_(std::move(options)) {}
  std::string CurrentToken();
  HttpServer::Response Refuse(const HttpServer::Request& request, const std::string& reason,
                              int status, std::string body);

  const ApiAuthOptions options_;
  mutable std::mutex mu_;  // Guards everything below.
  std::string token_ ABSL_GUARDED_BY(mu_);
  std::string file_version_ ABSL_GUARDED_BY(mu_);  // Inode, size and mtime of the file read.
  double checked_at_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, int64_t> refused_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, double> logged_at_ ABSL_GUARDED_BY(mu_);  // "address reason" -> time.
};

// The token in a token file's text: trimmed; InvalidArgument (in words, without the text) when
// it is empty, shorter than 16 characters, or holds spaces or control characters.
absl::StatusOr<std::string> ParseToken(std::string_view text);
// Whether two tokens are equal, in a time that depends only on the length of `given`.
bool SameToken(std::string_view given, std::string_view expected);

}  // namespace trainscope::sidecar
