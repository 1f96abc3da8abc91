// Posting first-hand alerts to Alertmanager; see alert_notifier.h.
#include "trainscope/sidecar/alert_notifier.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "spdlog/spdlog.h"
#include "trainscope/common/clock.h"
#include "trainscope/common/cluster_spec.h"
#include "trainscope/common/http_client.h"
#include "trainscope/common/secret_file.h"
#include "trainscope/sidecar/api.h"

namespace trainscope::sidecar {

namespace {

// One line of a credential file, without its line end; InvalidArgument when there is none.
absl::StatusOr<std::string> OneLine(const std::string& flag, const std::string& path,
                                    const std::string& shape) {
  auto text = ReadSecretFile(flag, path, 4096);
  if (!text.ok()) return text.status();
  std::string line(absl::StripTrailingAsciiWhitespace(*text));
  if (line.empty() || line.find_first_of("\r\n") != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " ", path, ": holds no single line (", shape, ")"));
  }
  return line;
}

bool TokenChar(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) ||
         std::string("!#$%&'*+-.^_`|~").find(c) != std::string::npos;
}

}  // namespace

absl::StatusOr<std::vector<std::string>> AlertmanagerHeaders(const AlertmanagerAuth& auth) {
  std::vector<std::string> out;
  if (!auth.basic_auth_file.empty() && !auth.bearer_token_file.empty()) {
    return absl::InvalidArgumentError(
        "--alertmanager_basic_auth_file and --alertmanager_bearer_token_file: give one of them");
  }
  if (!auth.basic_auth_file.empty()) {
    auto line = OneLine("--alertmanager_basic_auth_file", auth.basic_auth_file, "user:password");
    if (!line.ok()) return line.status();
    if (line->find(':') == std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat("--alertmanager_basic_auth_file ",
                                                     auth.basic_auth_file, ": not user:password"));
    }
    out.push_back(absl::StrCat("Authorization: Basic ", absl::Base64Escape(*line)));
  }
  if (!auth.bearer_token_file.empty()) {
    auto line = OneLine("--alertmanager_bearer_token_file", auth.bearer_token_file, "the token");
    if (!line.ok()) return line.status();
    if (line->find_first_of(" \t") != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--alertmanager_bearer_token_file ", auth.bearer_token_file, ": a token has no spaces"));
    }
    out.push_back(absl::StrCat("Authorization: Bearer ", *line));
  }
  if (auth.headers.size() > 32) {
    return absl::InvalidArgumentError("--alertmanager_header: at most 32");
  }
  for (const std::string& h : auth.headers) {
    const size_t colon = h.find(':');
    const std::string name = colon == std::string::npos ? "" : h.substr(0, colon);
    const std::string value(
        absl::StripAsciiWhitespace(colon == std::string::npos ? "" : h.substr(colon + 1)));
    const bool name_ok =
        !name.empty() && name.size() <= 128 && std::all_of(name.begin(), name.end(), TokenChar);
    const bool value_ok = value.size() <= 4096 &&
                          std::none_of(value.begin(), value.end(),
                                       [](char c) { return c == '\r' || c == '\n' || c == '\0'; });
    if (!name_ok || !value_ok) {
      return absl::InvalidArgumentError(absl::StrCat("--alertmanager_header ", CleanText(h, 80),
                                                     ": not \"Name: value\" (e.g. ",
                                                     "\"X-Scope-OrgID: team-a\")"));
    }
    if (absl::EqualsIgnoreCase(name, "authorization")) {
      return absl::InvalidArgumentError(
          "--alertmanager_header: no Authorization here; keep the credential in a file "
          "(--alertmanager_basic_auth_file or --alertmanager_bearer_token_file)");
    }
    out.push_back(absl::StrCat(name, ": ", value));
  }
  return out;
}

// One Alertmanager: its queue of alerts by key, and the thread that posts them.
class AlertNotifier::Endpoint : public std::enable_shared_from_this<Endpoint> {
 public:
  Endpoint(const std::string& url, const NotifierOptions& o) : url_(url), options_(o) {
    const bool https = absl::StartsWith(url, "https://");
    if (https) {
      tls_ = o.tls;
      // No --tls_* flags: the system's CAs verify the Alertmanager.
      if (!tls_.enabled()) tls_.ca_file = "/etc/ssl/certs/ca-certificates.crt";
    }
    std::string rest = url.substr(url.find("://") + 3);
    const size_t slash = rest.find('/');
    host_port_ = rest.substr(0, slash);
    path_ = absl::StrCat(slash == std::string::npos ? "" : rest.substr(slash), "/api/v2/alerts");
    if (absl::StartsWith(path_, "//")) path_ = path_.substr(1);
  }

  void Start() {
    thread_ = std::thread([self = shared_from_this()] { self->Loop(); });
  }

  // Newer updates of an alert replace older ones still waiting.
  void Enqueue(const std::vector<PostedAlert>& alerts) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (const PostedAlert& a : alerts) Put(AlertKey(a.alert.labels), a, /*replace=*/true);
    }
    cv_.notify_one();
  }

  // Asks the thread to stop; waits for it until `deadline`, then lets it finish on its own (it
  // owns a reference to this endpoint).
  void Stop(std::chrono::steady_clock::time_point deadline) {
    std::unique_lock<std::mutex> lock(mu_);
    stop_ = true;
    cv_.notify_all();
    const bool done = cv_.wait_until(lock, deadline, [this] { return done_; });
    lock.unlock();
    if (!thread_.joinable()) return;
    if (done) {
      thread_.join();
    } else {
      thread_.detach();
    }
  }

  std::atomic<int64_t> sent{0}, failed{0}, dropped{0};

 private:
  void Put(const std::string& key, const PostedAlert& a, bool replace) {
    auto it = pending_.find(key);
    if (it != pending_.end()) {
      if (replace) it->second = a;
      return;
    }
    if (pending_.size() >= options_.max_queued) {
      dropped++;
      return;
    }
    pending_.emplace(key, a);
  }

  void Loop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      cv_.wait(lock, [this] { return stop_ || !pending_.empty(); });
      if (stop_) break;
      std::map<std::string, PostedAlert> batch;
      batch.swap(pending_);
      lock.unlock();
      const bool retry = !Post(batch);
      lock.lock();
      if (retry) {
        // Back in the queue unless something newer came meanwhile; try again in a second.
        for (const auto& [key, a] : batch) Put(key, a, /*replace=*/false);
        cv_.wait_for(lock, std::chrono::seconds(1), [this] { return stop_; });
      }
    }
    done_ = true;
    cv_.notify_all();
  }

  // False when the post should be retried (not reached, or a 5xx).
  bool Post(const std::map<std::string, PostedAlert>& batch) {
    std::vector<PostedAlert> alerts;
    for (const auto& [key, a] : batch) alerts.push_back(a);
    const std::string body = AlertsToJson(alerts, options_.generator_url, UnixSeconds(),
                                          options_.ttl_intervals * options_.resend_interval_s);
    auto r = HttpPost(host_port_, path_, "application/json", body, options_.timeout_ms, 1 << 20,
                      tls_, options_.headers);
    const int64_t n = static_cast<int64_t>(alerts.size());
    if (r.ok() && r->status >= 200 && r->status < 300) {
      sent += n;
      if (failing_) spdlog::info("trainscope-sidecar: posting alerts to {} works again", url_);
      failing_ = false;
      return true;
    }
    failed += n;
    const std::string why = r.ok() ? absl::StrCat("HTTP ", r->status, ": ", r->body.substr(0, 200))
                                   : std::string(r.status().message());
    if (!failing_) {
      spdlog::warn(
          "trainscope-sidecar: cannot post alerts to {}: {} (retrying; said once until "
          "it works again)",
          url_, why);
    }
    failing_ = true;
    return r.ok() && r->status < 500;  // A refused body is not retried.
  }

  const std::string url_;
  const NotifierOptions options_;
  std::string host_port_, path_;
  TlsFiles tls_;  // Enabled for an https:// Alertmanager.
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, PostedAlert> pending_;
  bool stop_ = false;
  bool done_ = false;
  bool failing_ = false;  // The posting thread's only.
  std::thread thread_;
};

absl::StatusOr<std::vector<std::string>> AlertNotifier::ParseUrls(
    const std::vector<std::string>& flags) {
  std::vector<std::string> out;
  for (const std::string& flag : flags) {
    for (absl::string_view part : absl::StrSplit(flag, ',', absl::SkipWhitespace())) {
      std::string url(absl::StripAsciiWhitespace(part));
      if (!absl::StartsWith(url, "http://") && !absl::StartsWith(url, "https://")) {
        url = "http://" + url;
      }
      while (absl::EndsWith(url, "/")) url.pop_back();
      const size_t start = url.find("://") + 3;
      std::string host_port = url.substr(start, url.find('/', start) - start);
      if (auto hp = ParseHostPort(host_port); !hp.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("--alertmanager_url ", url, ": ", hp.status().message()));
      }
      out.push_back(url);
    }
  }
  return out;
}

AlertNotifier::AlertNotifier(NotifierOptions options,
                             std::function<std::vector<FiringAlert>()> evaluate)
    : options_(std::move(options)), evaluate_(std::move(evaluate)) {
  for (const std::string& url : options_.urls) {
    endpoints_.push_back(std::make_shared<Endpoint>(url, options_));
  }
}

AlertNotifier::~AlertNotifier() { Stop(); }

void AlertNotifier::Start() {
  for (auto& e : endpoints_) e->Start();
  thread_ = std::thread([this] { Loop(); });
}

void AlertNotifier::Poke() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    poked_ = true;
  }
  cv_.notify_one();
}

void AlertNotifier::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return;
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
  for (auto& e : endpoints_) e->Stop(deadline);
}

NotifierStats AlertNotifier::stats() const {
  NotifierStats s;
  for (const auto& e : endpoints_) {
    s.sent += e->sent;
    s.failed += e->failed;
    s.dropped += e->dropped;
  }
  std::lock_guard<std::mutex> lock(mu_);
  s.firing = firing_count_;
  return s;
}

void AlertNotifier::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  const auto period = std::chrono::duration<double>(options_.evaluate_interval_s);
  double due = 0;  // When a held alert falls due; 0: none held.
  while (!stop_) {
    const auto wait =
        due > 0 ? std::min<std::chrono::duration<double>>(
                      period, std::chrono::duration<double>(std::max(0.0, due - UnixSeconds())))
                : period;
    cv_.wait_for(lock, wait, [this] { return stop_ || poked_; });
    if (stop_) break;
    poked_ = false;
    lock.unlock();
    due = Evaluate(UnixSeconds());
    lock.lock();
    firing_count_ = static_cast<int>(std::count_if(
        firing_.begin(), firing_.end(), [](const auto& f) { return f.second.last_sent > 0; }));
  }
}

double AlertNotifier::Evaluate(double now) {
  std::vector<PostedAlert> batch;
  double due = 0;
  auto hold_until = [&due](double t) { due = due == 0 ? t : std::min(due, t); };
  std::set<std::string> current;
  for (FiringAlert& a : evaluate_()) {
    std::map<std::string, std::string> identity = a.labels;
    identity.erase("incident");
    const std::string key = AlertKey(identity);
    current.insert(key);
    auto [it, added] = firing_.try_emplace(key, Firing{a, now, 0});
    Firing& f = it->second;
    if (!added) {
      a.starts_at = f.alert.starts_at;                 // The first one stands.
      if (f.last_sent > 0) a.labels = f.alert.labels;  // As posted, incident included.
      f.alert = std::move(a);
    }
    if (now - f.first_seen < f.alert.hold_s) {  // Not yet.
      hold_until(f.first_seen + f.alert.hold_s);
      continue;
    }
    if (f.last_sent == 0 && f.alert.labels.count("task") && !f.alert.labels.count("incident") &&
        now - f.first_seen < options_.incident_wait_s) {
      hold_until(f.first_seen + options_.incident_wait_s);
      continue;  // Its incident is a tick away: posted once, with it.
    }
    if (f.last_sent > 0 && now - f.last_sent < options_.resend_interval_s) continue;
    if (f.last_sent == 0) {
      spdlog::info("trainscope-sidecar: alert {} firing: {}", f.alert.labels["alertname"],
                   f.alert.annotations["summary"]);
    }
    f.last_sent = now;
    batch.push_back({f.alert});
  }
  for (auto it = firing_.begin(); it != firing_.end();) {
    if (current.count(it->first)) {
      ++it;
      continue;
    }
    if (it->second.last_sent > 0) {  // Held ones were never posted: nothing to resolve.
      spdlog::info("trainscope-sidecar: alert {} resolved: {}",
                   it->second.alert.labels["alertname"], it->second.alert.annotations["summary"]);
      batch.push_back({it->second.alert, /*resolved=*/true, /*resolved_at=*/now});
    }
    it = firing_.erase(it);
  }
  if (!batch.empty()) {
    for (auto& e : endpoints_) e->Enqueue(batch);
  }
  return due;
}

}  // namespace trainscope::sidecar
