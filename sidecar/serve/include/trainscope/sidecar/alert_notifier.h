#pragma once
// Posts the sidecar's first-hand alerts (alerts.h) to one or more Alertmanagers
// (POST /api/v2/alerts), as Prometheus would: a new alert at once, every alert again each
// resend interval while it lasts (its endsAt a few intervals ahead, so the alerts of a sidecar
// that stops expire), and resolved (endsAt = now) once when it ends.
//
// Nothing here can hold up the sidecar: one thread evaluates (woken by Poke() on a state change,
// else every evaluate_interval_s), and each Alertmanager has its own thread and a queue of alerts
// keyed by their labels, so a newer update of an alert replaces an older one still waiting and the
// queue is bounded by the number of distinct alerts. A post that fails is retried with what is
// newest; an unreachable Alertmanager is logged once per change (failing / working again) and
// counted, never fatal.
//
// A task's alert carries the label `incident` (alerts.h), which appears with the incident, a
// tick after the state: a new alert waits up to incident_wait_s for it, so that it is posted
// once, with its incident. Once posted, an alert keeps the incident it was posted with (an
// alert is keyed by its labels without `incident`): a changed label would be a second alert.

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "trainscope/common/tls.h"
#include "trainscope/sidecar/alerts.h"

namespace trainscope::sidecar {

struct NotifierOptions {
  // Alertmanagers as host:port or http(s)://host:port[/path prefix].
  std::vector<std::string> urls;
  // For https:// ones: the CA that verifies them (else the system's CAs) and the certificate
  // presented when they ask for one.
  TlsFiles tls;
  // More header fields of every post, "Name: value": the Authorization of basic auth or a
  // bearer token, a tenant's X-Scope-OrgID (AlertmanagerHeaders).
  std::vector<std::string> headers;
  std::string generator_url;  // This sidecar's page.
  double resend_interval_s = 10;
  double ttl_intervals = 4;  // endsAt of a firing alert = now + ttl_intervals * resend.
  double evaluate_interval_s = 1;
  double incident_wait_s = 1;  // A task's new alert waits this long at most for its incident.
  int timeout_ms = 2000;       // Of one post's answer.
  size_t max_queued = 2000;    // Distinct alerts waiting per Alertmanager; more are dropped.
};

// How the sidecar authenticates to Alertmanagers that require it, as Prometheus's alerting
// config does (basic_auth, authorization, http_headers).
struct AlertmanagerAuth {
  std::string basic_auth_file;       // One line, "user:password".
  std::string bearer_token_file;     // One line, the token.
  std::vector<std::string> headers;  // "Name: value", e.g. "X-Scope-OrgID: team-a".
};

// The header fields of `auth`: the files read (secrets: secret_file.h, so one every user may
// read is refused) and each header checked. InvalidArgument, naming the flag and the fix, when
// a file cannot be read or holds no one-line credential, when both files are given, when a
// header is not "Name: value" (a token name, no line break) or names Authorization (use the
// files), or when there are more than 32 headers.
absl::StatusOr<std::vector<std::string>> AlertmanagerHeaders(const AlertmanagerAuth& auth);

struct NotifierStats {
  int64_t sent = 0;     // Alerts (firing or resolved) an Alertmanager accepted.
  int64_t failed = 0;   // Alerts in posts that failed (each retry counts again).
  int64_t dropped = 0;  // Alerts dropped from a full queue.
  int firing = 0;       // Alerts this sidecar says are firing now.
};

class AlertNotifier {
 public:
  // The Alertmanagers of repeated and comma-separated --alertmanager_url values, checked:
  // "host:port", "http://host:port[/prefix]" (normalized to it) and "https://host:port[/prefix]".
  static absl::StatusOr<std::vector<std::string>> ParseUrls(const std::vector<std::string>& flags);

  // `evaluate` says what is failing now; it runs on the notifier's thread.
  AlertNotifier(NotifierOptions options, std::function<std::vector<FiringAlert>()> evaluate);
  ~AlertNotifier();
  void Start();
  // Evaluates again now (cheap; for the watcher's thread after a state change).
  void Poke();
  // Stops evaluating. Returns within about 200 ms: a post still waiting on an Alertmanager is
  // left to finish (or time out) on its own.
  void Stop();
  NotifierStats stats() const;

  class Endpoint;

 private:
  void Loop();
  // Posts what is due; returns when a held alert falls due (Unix seconds; 0: none held).
  double Evaluate(double now);

  NotifierOptions options_;
  std::function<std::vector<FiringAlert>()> evaluate_;
  std::vector<std::shared_ptr<Endpoint>> endpoints_;
  struct Firing {
    FiringAlert alert;
    double first_seen = 0;
    double last_sent = 0;  // 0: not posted yet (held).
  };
  // By AlertKey of the labels without `incident`; the loop's thread only.
  std::map<std::string, Firing> firing_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool poked_ = false;
  bool stop_ = false;
  int firing_count_ = 0;
  std::thread thread_;
};

}  // namespace trainscope::sidecar
