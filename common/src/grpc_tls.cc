// gRPC credentials from the --tls_* files; see grpc_tls.h.
#include "trainscope/common/grpc_tls.h"

#include <grpc/support/log.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "grpcpp/security/tls_certificate_provider.h"
#include "grpcpp/security/tls_credentials_options.h"
#include "tls_material.h"
#include "trainscope/common/rpc_error.h"
#include "trainscope/common/secret_file.h"

// gRPC's own line writer (exported by libgpr, not declared in its public headers).
void gpr_default_log(gpr_log_func_args* args);

namespace trainscope {
namespace {

namespace gx = grpc::experimental;

// A PEM file the flag names, with `pem_tag` in it; a private key's file (secret) must also be
// private to its owner and group (secret_file.h).
absl::Status CheckReadable(const std::string& flag, const std::string& path,
                           absl::string_view pem_tag, bool secret = false) {
  constexpr size_t kMaxPemBytes = 1 << 20;
  std::string text;
  if (secret) {
    auto read = ReadSecretFile(flag, path, kMaxPemBytes);
    if (!read.ok()) return read.status();
    text = *std::move(read);
  } else {
    std::ifstream in(path);
    if (!in) return absl::InvalidArgumentError(absl::StrCat(flag, " ", path, ": cannot read it"));
    text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  if (!absl::StrContains(text, "-----BEGIN") || !absl::StrContains(text, pem_tag)) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " ", path, ": not a PEM file with a ", pem_tag, " in it"));
  }
  return absl::OkStatus();
}

void WriteTlsLogLine(const std::string& line);

// gRPC 1.51's FileWatcherCertificateProvider hands whatever it reads to the handshaker, and an
// empty certificate file aborts the process (tls_security_connector.cc: "assertion failed:
// !cert_pair_list[i].cert_chain().empty()"): that is what a certificate written in place looks
// like for a moment, so a rotation could kill a ps. gRPC therefore never reads the user's files.
// It reads copies in a private folder (0700, in /dev/shm when there is one) that only a whole,
// checked set (tls_material.h) replaces, the key and chain in one file renamed into place, so
// it sees either the last good set or the next. One thread per process watches every set.
class StagedTls {
 public:
  static StagedTls& Instance() {
    static auto* self = new StagedTls;  // Never destroyed: the watcher outlives main.
    return *self;
  }

  // The staged copies of `files`, made on first use and kept up to date from then on.
  static absl::StatusOr<TlsFiles> For(const TlsFiles& files) {
    StagedTls& self = Instance();
    std::lock_guard lock(self.mu_);
    const std::string id = absl::StrCat(files.cert_file, "\n", files.key_file, "\n", files.ca_file);
    auto it = self.sets_.find(id);
    if (it != self.sets_.end()) return it->second.staged;
    auto material = ReadTlsMaterial(files);
    if (!material.ok()) return material.status();
    if (self.dir_.empty()) {
      if (absl::Status s = self.MakeDir(); !s.ok()) return s;
    }
    Set set{files, {}, (*material)->fingerprint, ""};
    const std::string prefix = absl::StrCat(self.dir_, "/", self.sets_.size());
    if (!files.cert_file.empty()) set.staged.cert_file = set.staged.key_file = prefix + ".pem";
    if (!files.ca_file.empty()) set.staged.ca_file = prefix + ".ca.pem";
    if (absl::Status s = Write(set.staged, **material); !s.ok()) return s;
    TlsFiles staged = set.staged;
    self.sets_.emplace(id, std::move(set));
    if (!self.watching_) {
      self.watching_ = true;
      std::thread([&self] { self.Watch(); }).detach();
    }
    return staged;
  }

 private:
  struct Set {
    TlsFiles source, staged;
    std::string fingerprint;  // Of the source files last staged (or last tried).
    std::string error;        // Why the source files last tried do not load ("" when they did).
  };

  absl::Status MakeDir() {
    struct stat st {};
    const char* tmp = std::getenv("TMPDIR");
    std::string base = stat("/dev/shm", &st) == 0 && access("/dev/shm", W_OK) == 0 ? "/dev/shm"
                       : tmp != nullptr && *tmp != 0                               ? tmp
                                                                                   : "/tmp";
    RemoveLeftovers(base);
    std::string dir = absl::StrCat(base, "/trainscope-tls-", getpid(), "-XXXXXX");
    if (mkdtemp(dir.data()) == nullptr) {
      return absl::InternalError(
          absl::StrCat("cannot make a private folder in ", base,
                       " for the TLS files gRPC reads: ", std::strerror(errno)));
    }
    dir_ = dir;
    std::atexit(&RemoveStagedTlsFiles);
    return absl::OkStatus();
  }

  // The folders of processes of this user that are gone (killed before they could remove
  // theirs): they hold private keys.
  static void RemoveLeftovers(const std::string& base) {
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(base, ec)) {
      const std::string name = entry.path().filename().string();
      int pid = 0;
      struct stat st {};
      if (std::sscanf(name.c_str(), "trainscope-tls-%d-", &pid) != 1 || pid <= 0) continue;
      if (stat(entry.path().c_str(), &st) != 0 || st.st_uid != getuid()) continue;
      if (kill(pid, 0) == 0 || errno != ESRCH) continue;
      std::filesystem::remove_all(entry.path(), ec);
    }
  }

 public:
  void RemoveDir() {
    std::lock_guard lock(mu_);
    if (dir_.empty()) return;
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
    dir_.clear();
    sets_.clear();
  }

 private:
  // Each file is written beside its place, then renamed over it.
  static absl::Status Write(const TlsFiles& staged, const TlsMaterial& m) {
    auto put = [](const std::string& path, const std::string& text) -> absl::Status {
      const std::string tmp = path + ".new";
      {
        std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
        out << text;
        if (!out.flush()) return absl::InternalError(absl::StrCat("cannot write ", tmp));
      }
      chmod(tmp.c_str(), 0600);
      if (std::rename(tmp.c_str(), path.c_str()) != 0) {
        return absl::InternalError(absl::StrCat("cannot rename ", tmp, ": ", std::strerror(errno)));
      }
      return absl::OkStatus();
    };
    absl::Status st = absl::OkStatus();
    if (!staged.ca_file.empty()) st.Update(put(staged.ca_file, m.ca_pem));
    if (!staged.cert_file.empty()) st.Update(put(staged.cert_file, m.key_pem + "\n" + m.cert_pem));
    return st;
  }

  void Watch() {
    for (;;) {
      std::this_thread::sleep_for(std::chrono::milliseconds(250));
      std::vector<std::string> lines;
      {
        std::lock_guard lock(mu_);
        for (auto& [id, set] : sets_) Refresh(set, &lines);
      }
      for (const std::string& line : lines) WriteTlsLogLine(line);
    }
  }

  static void Refresh(Set& set, std::vector<std::string>* lines) {
    const std::string now = TlsFingerprint(set.source);
    if (now == set.fingerprint && set.error.empty()) return;
    auto material = ReadTlsMaterial(set.source);
    absl::Status st = material.ok() ? Write(set.staged, **material) : material.status();
    if (!st.ok()) {
      // Keep the last good set; a rotation may be half written. Said once per reason.
      if (std::string(st.message()) != set.error) {
        lines->push_back(
            absl::StrCat("TLS files changed but do not load yet (gRPC keeps the "
                         "last good ones): ",
                         st.message()));
      }
      set.error = std::string(st.message());
      set.fingerprint = now;
      return;
    }
    set.fingerprint = (*material)->fingerprint;
    set.error.clear();
    lines->push_back(absl::StrCat("TLS files reloaded for gRPC: ", set.source.cert_file.empty()
                                                                       ? set.source.ca_file
                                                                       : set.source.cert_file));
  }

  std::mutex mu_;
  std::string dir_;                  // Guarded by mu_.
  std::map<std::string, Set> sets_;  // By source files. Guarded by mu_.
  bool watching_ = false;            // Guarded by mu_.
};

std::shared_ptr<gx::FileWatcherCertificateProvider> Provider(const TlsFiles& staged) {
  return std::make_shared<gx::FileWatcherCertificateProvider>(staged.key_file, staged.cert_file,
                                                              staged.ca_file, kTlsRefreshSeconds);
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
    st.Update(CheckReadable("--tls_key_file", tls.key_file, "PRIVATE KEY", /*secret=*/true));
  }
  if (!tls.ca_file.empty()) st.Update(CheckReadable("--tls_ca_file", tls.ca_file, "CERTIFICATE"));
  return st;
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const TlsFiles& tls) {
  if (!tls.enabled()) return grpc::InsecureServerCredentials();
  if (absl::Status st = CheckTlsFiles(tls, /*server=*/true); !st.ok()) return st;
  auto staged = StagedTls::For(tls);
  if (!staged.ok()) return staged.status();
  gx::TlsServerCredentialsOptions options(Provider(*staged));
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
  auto staged = StagedTls::For(tls);
  if (!staged.ok()) return staged.status();
  gx::TlsChannelCredentialsOptions options;
  options.set_certificate_provider(Provider(*staged));
  if (!tls.ca_file.empty()) options.watch_root_certs();
  if (!tls.cert_file.empty()) options.watch_identity_key_cert_pairs();
  SetTlsClient(tls.cert_file.empty() ? TlsClient::kWithoutCertificate
                                     : TlsClient::kWithCertificate);
  return gx::TlsCredentials(options);
}

std::vector<std::string> PeerCertificateNames(const grpc::ServerContextBase& context) {
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

// A line of this file's own (not gRPC's) to where the refusals go.
void WriteTlsLogLine(const std::string& line) {
  RefusalLog& log = Refusals();
  std::function<void(const std::string&)> write;
  {
    std::lock_guard lock(log.mu);
    write = log.write;
  }
  if (write) {
    write(line);
  } else {
    gpr_log(GPR_ERROR, "%s", line.c_str());
  }
}

}  // namespace

void RemoveStagedTlsFiles() { StagedTls::Instance().RemoveDir(); }

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
