// Credentials for the sidecar's actions; see api_auth.h.
#include "trainscope/sidecar/api_auth.h"

#include <sys/stat.h>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"
#include "trainscope/common/clock.h"
#include "trainscope/common/secret_file.h"

namespace trainscope::sidecar {
namespace {

constexpr size_t kMinTokenLength = 16;
constexpr size_t kMaxTokenLength = 4096;
constexpr size_t kMaxLogKeys = 4096;  // Client addresses x reasons remembered for the log.
constexpr double kLogEvery = 60;

std::string_view Trim(std::string_view s) {
  const auto space = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; };
  while (!s.empty() && space(s.front())) s.remove_prefix(1);
  while (!s.empty() && space(s.back())) s.remove_suffix(1);
  return s;
}

// Inode, size and modification time: what changes when the file is rewritten or replaced.
std::string FileVersion(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return "";
  return absl::StrCat(st.st_ino, ":", st.st_size, ":", st.st_mtim.tv_sec, ".", st.st_mtim.tv_nsec);
}

absl::StatusOr<std::string> ReadToken(const std::string& path) {
  auto text = ReadSecretFile("--api_token_file", path, kMaxTokenLength + 2);
  if (!text.ok()) return text.status();
  auto token = ParseToken(*text);
  if (!token.ok())
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", token.status().message()));
  return token;
}

// The token of "Bearer <token>" (the scheme in any case); "" when the header is another scheme.
std::string_view BearerToken(std::string_view header) {
  header = Trim(header);
  constexpr std::string_view kScheme = "bearer";
  if (header.size() <= kScheme.size() || header[kScheme.size()] != ' ') return "";
  for (size_t i = 0; i < kScheme.size(); ++i) {
    if (absl::ascii_tolower(static_cast<unsigned char>(header[i])) != kScheme[i]) return "";
  }
  return Trim(header.substr(kScheme.size()));
}

}  // namespace

absl::StatusOr<std::string> ParseToken(std::string_view text) {
  const std::string_view token = Trim(text);
  if (token.empty()) {
    return absl::InvalidArgumentError(
        "holds no token (make one: openssl rand -hex 32 > FILE; chmod 600 FILE)");
  }
  if (token.size() > kMaxTokenLength) {
    return absl::InvalidArgumentError(
        absl::StrCat("holds more than ", kMaxTokenLength, " bytes: not a token"));
  }
  for (char c : token) {
    if (static_cast<unsigned char>(c) <= ' ' || c == 0x7f) {
      return absl::InvalidArgumentError(
          "the token holds spaces or control characters (one line, e.g. openssl rand -hex 32)");
    }
  }
  if (token.size() < kMinTokenLength) {
    return absl::InvalidArgumentError(
        absl::StrCat("the token is shorter than ", kMinTokenLength,
                     " characters: too easy to guess (make one: openssl rand -hex 32 > FILE)"));
  }
  return std::string(token);
}

bool SameToken(std::string_view given, std::string_view expected) {
  if (expected.empty()) return false;
  unsigned char diff = given.size() == expected.size() ? 0 : 1;
  for (size_t i = 0; i < given.size(); ++i) {
    diff |= static_cast<unsigned char>(given[i] ^ expected[i % expected.size()]);
  }
  return diff == 0;
}

absl::StatusOr<std::unique_ptr<ApiAuth>> ApiAuth::Create(ApiAuthOptions options) {
  std::unique_ptr<ApiAuth> auth(new ApiAuth(std::move(options)));
  const std::string& path = auth->options_.token_file;
  if (path.empty()) return auth;
  auto token = ReadToken(path);
  if (!token.ok()) return token.status();
  std::lock_guard lock(auth->mu_);
  auth->token_ = *std::move(token);
  auth->file_version_ = FileVersion(path);
  auth->checked_at_ = MonotonicSeconds();
  return auth;
}

// The token now: the file is read again when it has changed (checked at most every
// recheck_s); a file that does not read as a token keeps the last good one.
std::string ApiAuth::CurrentToken() {
  std::lock_guard lock(mu_);
  const double now = MonotonicSeconds();
  if (now - checked_at_ < options_.recheck_s) return token_;
  checked_at_ = now;
  const std::string version = FileVersion(options_.token_file);
  if (version == file_version_) return token_;
  auto token = ReadToken(options_.token_file);
  if (!token.ok()) {
    spdlog::warn(
        "trainscope-sidecar: --api_token_file changed but does not read as a token (the "
        "last good one stays in use): {}",
        std::string(token.status().message()));
    return token_;
  }
  file_version_ = version;
  token_ = *std::move(token);
  spdlog::info("trainscope-sidecar: API token read again from {}", options_.token_file);
  return token_;
}

std::optional<HttpServer::Response> ApiAuth::Refusal(const HttpServer::Request& request,
                                                     std::string_view action) {
  if (request.client_certificate) return std::nullopt;
  const std::string what(action);
  const std::string how =
      "(docs/security.md, \"Credentials for actions\"; trainscopectl: --api_token_file FILE)";
  if (!has_token()) {
    return Refuse(request, "no_token_file", 403,
                  absl::StrCat(what,
                               " need a credential: start the sidecar with --api_token_file "
                               "FILE (openssl rand -hex 32 > FILE) and send Authorization: "
                               "Bearer <its token>, or use mutual TLS ",
                               how, "\n"));
  }
  const std::string_view given = BearerToken(request.authorization);
  if (given.empty()) {
    return Refuse(request, "no_credential", 401,
                  absl::StrCat(what,
                               " need a credential: send Authorization: Bearer <the token in "
                               "the sidecar's --api_token_file> ",
                               how, "\n"));
  }
  if (!SameToken(given, CurrentToken())) {
    return Refuse(request, "bad_token", 401,
                  absl::StrCat(what,
                               " refused: the bearer token is not this sidecar's "
                               "(--api_token_file)\n"));
  }
  return std::nullopt;
}

bool ApiAuth::Authorized(const HttpServer::Request& request) {
  if (request.client_certificate) return true;
  if (!has_token()) return false;
  const std::string_view given = BearerToken(request.authorization);
  return !given.empty() && SameToken(given, CurrentToken());
}

void ApiAuth::CountRefusal(std::string_view reason) {
  std::lock_guard lock(mu_);
  ++refused_[std::string(reason)];
}

HttpServer::Response ApiAuth::Refuse(const HttpServer::Request& request, const std::string& reason,
                                     int status, std::string body) {
  bool log = false;
  {
    std::lock_guard lock(mu_);
    ++refused_[reason];
    const double now = MonotonicSeconds();
    if (logged_at_.size() >= kMaxLogKeys) logged_at_.clear();
    double& last =
        logged_at_.try_emplace(request.client_address + " " + reason, -1e300).first->second;
    if (now - last >= kLogEvery) {
      last = now;
      log = true;
    }
  }
  if (log) {
    spdlog::warn("trainscope-sidecar: refused {} {} from {}: {} (not repeated for a minute)",
                 request.path, status, request.client_address, reason);
  }
  HttpServer::Response r{status, "text/plain; charset=utf-8", std::move(body), {}};
  if (status == 401) {
    r.headers.emplace_back("WWW-Authenticate",
                           reason == "bad_token"
                               ? "Bearer realm=\"trainscope-sidecar\", error=\"invalid_token\""
                               : "Bearer realm=\"trainscope-sidecar\"");
  }
  return r;
}

std::map<std::string, int64_t> ApiAuth::refused() const {
  std::lock_guard lock(mu_);
  std::map<std::string, int64_t> out = {{"no_credential", 0},
                                        {"bad_token", 0},
                                        {"no_token_file", 0},
                                        {"stale_credential", 0},
                                        {"replayed_credential", 0}};
  for (const auto& [reason, n] : refused_) out[reason] = n;
  return out;
}

}  // namespace trainscope::sidecar
