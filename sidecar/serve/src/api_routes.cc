// The sidecar's HTTP routes; see api_routes.h.
#include "trainscope/sidecar/api_routes.h"

#include <algorithm>
#include <memory>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "status_page.h"
#include "trainscope/common/clock.h"
#include "trainscope/sidecar/names.h"

namespace trainscope::sidecar {
namespace {

bool IsTraceId(std::string_view id) {
  return id.size() == 32 && std::all_of(id.begin(), id.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

RequestFilter FilterFrom(const std::string& query) {
  RequestFilter f;
  f.method = QueryParam(query, "method");
  f.ps = QueryParam(query, "ps");
  int limit = 0;
  if (absl::SimpleAtoi(QueryParam(query, "limit"), &limit) && limit > 0) {
    f.limit = static_cast<size_t>(std::min(limit, 1000));
  }
  return f;
}

HttpServer::Response Json(std::string body) { return {200, "application/json", std::move(body)}; }

// The HTTP status that answers a failed call.
int HttpStatusOf(const absl::Status& s) {
  switch (s.code()) {
    case absl::StatusCode::kInvalidArgument:
      return 400;
    case absl::StatusCode::kNotFound:
      return 404;
    case absl::StatusCode::kFailedPrecondition:
      return 409;
    case absl::StatusCode::kResourceExhausted:
      return 413;
    case absl::StatusCode::kDeadlineExceeded:
      return 504;
    case absl::StatusCode::kCancelled:
      return 499;  // The client left: nobody reads it.
    default:
      return 503;
  }
}

// The newest picture; an empty one before the wiring's first tick.
std::shared_ptr<const Picture> PictureOf(const ApiSources& s) {
  static const auto* const kNone = new std::shared_ptr<const Picture>(std::make_shared<Picture>(
      Picture{.view = {}, .incidents = std::make_shared<const IncidentsNow>()}));
  std::shared_ptr<const Picture> now = s.picture->Now();
  return now ? now : *kNone;
}

// /api/v1/tasks: the cluster view's tasks (?local=1: this node's), or only ?task=NAME.
HttpServer::Response ServeTasks(const ApiSources& s, const HttpServer::Request& r) {
  pb::TaskList list =
      ToTaskList(s.cluster_name, PictureOf(s)->view, QueryParam(r.query, "local") == "1");
  const std::string task = QueryParam(r.query, "task");
  if (!task.empty()) {
    auto* tasks = list.mutable_tasks();
    tasks->erase(std::remove_if(tasks->begin(), tasks->end(),
                                [&](const pb::TaskView& t) { return t.name() != task; }),
                 tasks->end());
  }
  return Json(ToJson(list));
}

// /api/v1/traces/<trace id>: one kept trace, 400 for a malformed id, 404 for one not kept.
HttpServer::Response ServeTrace(const ApiSources& s, const HttpServer::Request& r) {
  std::string id = absl::AsciiStrToLower(r.path.substr(names::kPathTracesPrefix.size()));
  if (!IsTraceId(id)) {
    return HttpServer::Response{400, "text/plain; charset=utf-8",
                                "a trace id is 32 hex digits: /api/v1/traces/<trace id>\n"};
  }
  auto detail = s.traces->Trace(id, MonotonicSeconds());
  if (!detail) {
    return HttpServer::Response{
        404, "text/plain; charset=utf-8",
        absl::StrCat("trace ", id,
                     " is not kept here (neither slow nor failed, or already forgotten)\n")};
  }
  return Json(ApiJson(ToProto(*detail)));
}

// Whether `r` holds the operator's credential: without it, snapshots are shown without their
// program counters (the tasks' address layout).
bool Authorized(const ApiSources& s, const HttpServer::Request& r) {
  return s.auth != nullptr && s.auth->Authorized(r);
}

void StripEvidence(pb::Incident* incident) {
  for (pb::IncidentEvidence& e : *incident->mutable_evidence()) {
    if (e.has_snapshot()) StripAddresses(e.mutable_snapshot());
  }
}

// /api/v1/stacks: a task's snapshots as JSON (or ?format=text); ?fresh=1 takes one first and
// needs a credential.
HttpServer::Response ServeStacks(const ApiSources& s, const HttpServer::Request& r) {
  const bool fresh = QueryParam(r.query, "fresh") == "1";
  if (fresh) {
    if (s.auth == nullptr) {
      return HttpServer::Response{403, "text/plain; charset=utf-8",
                                  "fresh captures need a credential\n"};
    }
    if (auto refusal = s.auth->Refusal(r, "fresh captures")) return *std::move(refusal);
  }
  auto list = s.stacks(QueryParam(r.query, "task"), fresh, [r] { return r.Gone(); });
  if (!list.ok()) {
    return HttpServer::Response{HttpStatusOf(list.status()), "text/plain; charset=utf-8",
                                absl::StrCat(list.status().message(), "\n")};
  }
  if (!Authorized(s, r)) {
    for (pb::StackSnapshot& snapshot : *list->mutable_snapshots()) StripAddresses(&snapshot);
  }
  if (QueryParam(r.query, "format") == "text") {
    return HttpServer::Response{200, "text/plain; charset=utf-8",
                                StacksToText(*list, UnixSeconds())};
  }
  return Json(ToJson(*list));
}

// /api/v1/incidents: open first, then the recent (?limit=N, at most 1000), with the goodput and
// why the store takes no writes, when it does not. Without their evidence (the snapshots are
// large): /api/v1/incidents/<id> has it.
HttpServer::Response ServeIncidents(const ApiSources& s, const HttpServer::Request& r,
                                    const std::string& node) {
  pb::IncidentList list;
  list.set_cluster(s.cluster_name);
  list.set_node(node);
  if (s.store_error) list.set_store_error(s.store_error());
  int limit = 100;
  if (int asked = 0; absl::SimpleAtoi(QueryParam(r.query, "limit"), &asked)) {
    limit = std::clamp(asked, 0, 1000);
  }
  const std::shared_ptr<const Picture> picture = PictureOf(s);
  const IncidentsNow& now = *picture->incidents;
  *list.mutable_goodput() = now.goodput;
  for (const pb::Incident& in : now.incidents) {
    if (list.incidents_size() >= limit) break;
    pb::Incident* out = list.add_incidents();
    *out = in;
    for (pb::IncidentEvidence& e : *out->mutable_evidence()) e.clear_snapshot();
  }
  return Json(ApiJson(list));
}

// /api/v1/incidents/<id>: one incident with its evidence, also by an id it had here before it
// took its owner's (an alert posted before still links to it); 404 naming what is kept.
HttpServer::Response ServeIncident(const ApiSources& s, const HttpServer::Request& r) {
  const std::string id = r.path.substr(names::kPathIncidentsPrefix.size());
  const std::shared_ptr<const Picture> picture = PictureOf(s);
  if (const pb::Incident* in = FindIncident(picture->incidents->incidents, id)) {
    if (Authorized(s, r)) return Json(ApiJson(*in));
    pb::Incident stripped = *in;
    StripEvidence(&stripped);
    return Json(ApiJson(stripped));
  }
  return HttpServer::Response{404, "text/plain; charset=utf-8",
                              absl::StrCat("no incident ", CleanText(id, 64),
                                           " here (GET /api/v1/incidents lists those kept)\n")};
}

// /api/v1/evidence?incident=ID&node=NODE&from=UNIX&to=UNIX: what the sidecar of NODE (this
// one without node) holds of an incident, and the requests it kept of the window (to: now).
HttpServer::Response ServeEvidence(const ApiSources& s, const HttpServer::Request& r) {
  const std::string id = QueryParam(r.query, "incident");
  double from = 0;
  double to = UnixSeconds();
  const std::string from_text = QueryParam(r.query, "from");
  const std::string to_text = QueryParam(r.query, "to");
  if (id.empty() || id.size() > 64 || (!from_text.empty() && !absl::SimpleAtod(from_text, &from)) ||
      (!to_text.empty() && !absl::SimpleAtod(to_text, &to)) || !s.evidence) {
    return HttpServer::Response{
        400, "text/plain; charset=utf-8",
        "name an incident: /api/v1/evidence?incident=inc-3f2a9c0d1e4b (&node=HOST:PORT: another "
        "node's sidecar; &from=, &to=: the window of the requests wanted, unix seconds)\n"};
  }
  auto evidence = s.evidence(QueryParam(r.query, "node"), id, from, to);
  if (!evidence.ok()) {
    return HttpServer::Response{HttpStatusOf(evidence.status()), "text/plain; charset=utf-8",
                                absl::StrCat(evidence.status().message(), "\n")};
  }
  if (!Authorized(s, r)) StripEvidence(evidence->mutable_incident());
  return Json(ApiJson(*evidence));
}

}  // namespace

void AddApiRoutes(ApiSources sources, HttpRoutes* routes) {
  auto s = std::make_shared<const ApiSources>(std::move(sources));
  routes->Exact(std::string(names::kPathMetrics), [s](const HttpServer::Request&) {
    return HttpServer::Response{200, "text/plain; version=0.0.4; charset=utf-8", s->metrics()};
  });
  routes->Exact(std::string(names::kPathTasks),
                [s](const HttpServer::Request& r) { return ServeTasks(*s, r); });
  routes->Exact(std::string(names::kPathSd), [s](const HttpServer::Request& r) {
    return Json(SdJson(PictureOf(*s)->view.tasks, QueryParam(r.query, "local") == "1"));
  });
  routes->Exact(std::string(names::kPathTracesSlow), [s](const HttpServer::Request& r) {
    return Json(ApiJson(ToRequestList(s->traces->Slow(FilterFrom(r.query), MonotonicSeconds()),
                                      s->slow_window_s, s->slow_per_key)));
  });
  routes->Exact(std::string(names::kPathTracesErrors), [s](const HttpServer::Request& r) {
    return Json(ApiJson(ToRequestList(s->traces->Errors(FilterFrom(r.query), MonotonicSeconds()))));
  });
  routes->Prefix(std::string(names::kPathTracesPrefix),
                 [s](const HttpServer::Request& r) { return ServeTrace(*s, r); });
  routes->Exact(std::string(names::kPathStacks),
                [s](const HttpServer::Request& r) { return ServeStacks(*s, r); });
  routes->Exact(std::string(names::kPathIncidents),
                [s](const HttpServer::Request& r) { return ServeIncidents(*s, r, s->node); });
  routes->Prefix(std::string(names::kPathIncidentsPrefix),
                 [s](const HttpServer::Request& r) { return ServeIncident(*s, r); });
  routes->Exact(std::string(names::kPathEvidence),
                [s](const HttpServer::Request& r) { return ServeEvidence(*s, r); });
  routes->Exact(std::string(names::kPathHealthz), [](const HttpServer::Request&) {
    return HttpServer::Response{200, "text/plain; charset=utf-8", "ok\n"};
  });
  auto page = [](const HttpServer::Request&) {
    return HttpServer::Response{200, "text/html; charset=utf-8", std::string(StatusPageHtml())};
  };
  routes->Exact(std::string(names::kPathStatusPage), page);
  routes->Exact("/index.html", page);
}

}  // namespace trainscope::sidecar
