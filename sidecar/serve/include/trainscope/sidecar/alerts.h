#pragma once
// The alerts a sidecar posts to Alertmanager itself, for what it knows first-hand: its own
// node's tasks dead or hung, its own node's task partitioned from a peer, and a peer node gone
// silent. Their labels are exactly those of the matching rules of
// dashboards/prometheus/alerts.yml (alertname, cluster, role, task, severity; peer_role and
// peer_task; node), so that Alertmanager, which keys an alert by its labels, shows one alert
// whether the sidecar, Prometheus or both send it. Pure functions over values.

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "trainscope/sidecar/cluster_view.h"
#include "trainscope/sidecar/incidents.h"

namespace trainscope::sidecar {

struct FiringAlert {
  std::map<std::string, std::string> labels;
  std::map<std::string, std::string> annotations;
  double starts_at = 0;  // Unix seconds: when the failure began.
  // Seen this long (by the notifier) before it is first posted: 0 for what the sidecar has
  // already confirmed (dead, hung, a silent node), a few seconds for a partition, which the
  // cluster view infers from a peer's failing calls and which a busy start-up can mimic briefly.
  double hold_s = 0;
};

struct AlertContext {
  std::string cluster;
  std::string sidecar_url;  // http://host:port/ of this sidecar: generatorURL, and the text.
  // The incidents open now: an alert about a task or node one of them holds or names as its
  // cause carries its id, summary and link (annotations: its labels stay the rules' own).
  std::shared_ptr<const IncidentsNow> incidents;
};

// What is failing now that this sidecar should page about. Never a task that is `done`.
std::vector<FiringAlert> FirstHandAlerts(const ClusterView& view, const AlertContext& context);

// A stable key of a label set (one alert in Alertmanager).
std::string AlertKey(const std::map<std::string, std::string>& labels);

// An alert as posted: firing until `ends_at` (Unix seconds), or resolved when ends_at <= now.
struct PostedAlert {
  FiringAlert alert;
  bool resolved = false;
  double resolved_at = 0;
};

// The body of POST /api/v2/alerts: a firing alert ends at now + ttl_s (it expires if this
// sidecar stops re-sending it), a resolved one at its resolved_at.
std::string AlertsToJson(const std::vector<PostedAlert>& alerts, const std::string& generator_url,
                         double now_unix, double ttl_s);

}  // namespace trainscope::sidecar
