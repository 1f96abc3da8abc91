#!/usr/bin/python3
"""Writes trainscope's Grafana dashboards (dashboards/grafana/dashboards/*.json).

The JSON files are what users load; this script is how they are kept consistent (ids, grid,
variables, datasource). Edit here, run it, commit both:

    dashboards/tools/gen_dashboards.py            # rewrite the JSON files
    dashboards/tools/gen_dashboards.py --check    # exit 1 if the files differ (a ctest)
    dashboards/tools/gen_dashboards.py --config mine.json --out DIR   # your own selectors

Standard library only.
"""

import argparse
import json
import os
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from generated import write_or_check  # noqa: E402

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "grafana", "dashboards")
DS = {"type": "prometheus", "uid": "${datasource}"}

# The selectors, the monitoring-mixin way (node-exporter, kubernetes-mixin): nothing pins a scrape
# job. Panels tell the sidecars' series from the tasks' own by these selectors; by default they
# use the `sidecar_job` and `job` variables, which list the scrape jobs that export a metric only
# a sidecar (or only a task) exports, whatever the jobs are called. The variables' defaults are
# the jobs of the shipped scrape config (dashboards/prometheus/prometheus.yml). Override any key
# with --config FILE.json (and --out DIR) to render dashboards for another setup.
DEFAULT_CONFIG = {
    "sidecar_selector": 'job=~"$sidecar_job"',
    "task_selector": 'job=~"$job"',
    "sidecar_job_metric": "trainscope_sidecar_watched_tasks",
    "task_job_metric": "trainscope_task_info",
    "sidecar_job_default": "trainscope-sidecars",
    "task_job_default": "trainscope-tasks",
}
CONFIG = dict(DEFAULT_CONFIG)
SEL = 'cluster="$cluster", role=~"$role", task=~"$task"'
PS = 'trainscope\\\\.v1\\\\.ParameterService/.+'  # a regex, escaped for PromQL inside JSON
RI = "$__rate_interval"


def sel(*parts):
    """A label selector body from parts, skipping empty ones (a selector configured as '')."""
    return ", ".join(p for p in parts if p)


def SC():
    """The sidecars' own series (up, process_*, trainscope_sidecar_*)."""
    return CONFIG["sidecar_selector"]


def S():
    """The sidecars' series about the selected tasks (cluster, role, task as the sidecar writes
    them)."""
    return sel(CONFIG["sidecar_selector"], SEL)


def TJ():
    """The tasks' own series, any task."""
    return CONFIG["task_selector"]


def T():
    """The selected tasks' own series: cluster/role/task come from the scrape config."""
    return sel(CONFIG["task_selector"], SEL)


# Severity of each state, as the sidecar's page orders them (worst highest).
SEVERITY = [("done", -1), ("up", 0), ("slow", 1), ("stalled", 2), ("blocked", 3), ("missing", 4),
            ("unreachable", 5), ("hung", 6), ("dead", 7)]
STATE_COLORS = {"done": "blue", "up": "green", "slow": "yellow", "stalled": "orange", "blocked": "orange",
                "missing": "purple", "unreachable": "purple", "hung": "red", "dead": "dark-red"}


def state_score(selector):
    """One series per task whose value is its state's severity (0 up ... 7 dead)."""
    parts = [f'(max by (role, task) (trainscope_task_state{{{selector}, state="{s}"}} == 1) * {n})'
             for s, n in reversed(SEVERITY)]
    return " or ".join(parts)


def state_mappings():
    return [{"type": "value", "options": {
        str(n): {"text": s, "color": STATE_COLORS[s], "index": n} for s, n in SEVERITY}}]


def selected(value):
    """A variable's current value: one value chosen."""
    return {"selected": True, "text": [value], "value": [value]}


def query_variable(name, label, query, multi, include_all, current=None, sort=3,
                   all_value=".*"):
    """A Grafana query variable on ${datasource}; "All" selected unless current says."""
    v = {"name": name, "label": label, "type": "query", "datasource": DS,
         "query": {"query": query, "refId": f"trainscope-{name}"},
         "definition": query, "refresh": 2, "sort": sort, "multi": multi,
         "includeAll": include_all, "hide": 0, "regex": "", "options": []}
    if include_all and all_value is not None:
        v["allValue"] = all_value
    v["current"] = current or ({"selected": True, "text": ["All"], "value": ["$__all"]}
                               if include_all else {})
    return v


class Dashboard:
    def __init__(self, uid, title, description, tags, role_default=None):
        self.uid, self.title, self.description, self.tags = uid, title, description, tags
        self.role_default = role_default
        self.panels = []
        self.next_id = 1
        self.x = self.y = 0
        self.row_h = 0
        self.extra_vars = []
        self.links = []

    def row(self, title):
        self._newline()
        self.panels.append({"type": "row", "title": title, "id": self._id(), "collapsed": False,
                            "gridPos": {"h": 1, "w": 24, "x": 0, "y": self.y}, "panels": []})
        self.y += 1

    def _id(self):
        i = self.next_id
        self.next_id += 1
        return i

    def _newline(self):
        if self.x > 0:
            self.x, self.y, self.row_h = 0, self.y + self.row_h, 0

    def _place(self, w, h):
        if self.x + w > 24:
            self._newline()
        pos = {"h": h, "w": w, "x": self.x, "y": self.y}
        self.x += w
        self.row_h = max(self.row_h, h)
        return pos

    def panel(self, kind, title, targets, w=12, h=8, unit=None, description="", **extra):
        """targets: list of (expr, legend) or dicts; refIds A, B, ... in order."""
        ts = []
        for i, t in enumerate(targets):
            if isinstance(t, tuple):
                t = {"expr": t[0], "legendFormat": t[1]}
            t = {"datasource": DS, "refId": chr(ord("A") + i), "editorMode": "code",
                 "range": True, **t}
            if t.get("instant"):
                t["range"] = False
            ts.append(t)
        p = {"id": self._id(), "type": kind, "title": title, "description": description,
             "datasource": DS, "gridPos": self._place(w, h), "targets": ts}
        defaults = {"custom": {}}
        if kind == "timeseries":
            defaults["custom"] = {"drawStyle": "line", "lineWidth": 1, "fillOpacity": 10,
                                  "showPoints": "never", "spanNulls": False}
        if unit:
            defaults["unit"] = unit
        p["fieldConfig"] = {"defaults": defaults, "overrides": []}
        p["options"] = {}
        if kind == "timeseries":
            p["options"] = {"legend": {"displayMode": "table", "placement": "bottom",
                                       "calcs": ["lastNotNull", "max"]},
                            "tooltip": {"mode": "multi", "sort": "desc"}}
        for k, v in extra.items():
            if k == "defaults":
                p["fieldConfig"]["defaults"].update(v)
            elif k == "overrides":
                p["fieldConfig"]["overrides"] = v
            else:
                p[k] = v
        self.panels.append(p)
        return p

    def stat(self, title, expr, unit=None, w=4, h=4, thresholds=None, description=""):
        steps = thresholds or [{"color": "green", "value": None}]
        return self.panel("stat", title, [(expr, "")], w=w, h=h, unit=unit,
                          description=description,
                          defaults={"thresholds": {"mode": "absolute", "steps": steps}},
                          options={"reduceOptions": {"calcs": ["lastNotNull"], "fields": "",
                                                     "values": False},
                                   "colorMode": "background", "graphMode": "area",
                                   "textMode": "value"})

    def variables(self):
        role_current = None
        if self.role_default:
            role_current = selected(self.role_default)
        in_cluster = sel(SC(), 'cluster="$cluster"')
        return [
            {"name": "datasource", "label": "Prometheus", "type": "datasource",
             "query": "prometheus", "current": {}, "hide": 0, "regex": "", "options": [],
             "refresh": 1},
            # The scrape jobs, whatever their names: found by a metric only that kind exports.
            # "All" lists the jobs found (no allValue: `.*` would also match the other kind).
            query_variable("sidecar_job", "sidecars' scrape job",
                           f"label_values({CONFIG['sidecar_job_metric']}, job)", True, True,
                           selected(CONFIG["sidecar_job_default"]), all_value=None),
            query_variable("job", "tasks' scrape job",
                           f"label_values({CONFIG['task_job_metric']}, job)", True, True,
                           selected(CONFIG["task_job_default"]), all_value=None),
            query_variable("cluster", "cluster",
                           f"label_values(trainscope_task_up{{{SC()}}}, cluster)", False, False),
            query_variable("role", "role", f"label_values(trainscope_task_up{{{in_cluster}}}, role)", True, True,
                           role_current),
            query_variable("task", "task",
                           f"label_values(trainscope_task_up{{{in_cluster}, role=~\"$role\"}}, task)",
                           True, True),
        ] + self.extra_vars

    def json(self):
        return {
            "uid": self.uid, "title": self.title, "description": self.description,
            "tags": ["trainscope"] + self.tags, "editable": True, "graphTooltip": 1,
            "schemaVersion": 39, "version": 1, "refresh": "10s", "timezone": "",
            "time": {"from": "now-30m", "to": "now"}, "timepicker": {}, "fiscalYearStartMonth": 0,
            "liveNow": False, "weekStart": "",
            "annotations": {"list": [{
                "builtIn": 1, "datasource": {"type": "grafana", "uid": "-- Grafana --"},
                "enable": True, "hide": True, "iconColor": "rgba(0, 211, 255, 1)",
                "name": "Annotations & Alerts", "type": "dashboard"}]},
            "links": [{"title": "trainscope", "type": "dashboards", "tags": ["trainscope"],
                       "asDropdown": True, "includeVars": True, "keepTime": True}] + self.links,
            "templating": {"list": self.variables()},
            "panels": self.panels,
        }


def cluster_health():
    d = Dashboard("trainscope-cluster-health", "trainscope / Cluster health",
                  "Every task's state as its node's sidecar decides it, problems first; who "
                  "waits for whom; restarts; heartbeats.", ["health"])
    d.row("At a glance")
    red = [{"color": "green", "value": None}, {"color": "red", "value": 1}]
    d.stat("Tasks up", f"sum(trainscope_task_up{{{S()}}})", w=4,
           description="Tasks whose sidecar says up.")
    for state in ("dead", "hung", "blocked", "unreachable"):
        d.stat(f"{state.capitalize()}", f'sum(trainscope_task_state{{{S()}, state="{state}"}})',
               w=4, thresholds=red, description=f"Tasks in state {state}.")
    d.stat("Sidecars down", f'count(up{{{SC()}}} == 0) or vector(0)', w=4,
           thresholds=red, description="Sidecars Prometheus cannot scrape: their tasks' states "
                                       "are unknown.")
    d.panel("table", "Task states, problems first", [
        {"expr": f"sort_desc({state_score(S())})", "format": "table", "instant": True,
         "legendFormat": ""}], w=12, h=10,
        description="Severity 7 dead, 6 hung, 5 unreachable, 4 missing, 3 blocked, 2 stalled, "
                    "1 slow, 0 up, -1 done (finished). The reason in words is on the sidecar's "
                    "page.",
        defaults={"mappings": state_mappings()},
        transformations=[{"id": "organize", "options": {
            "excludeByName": {"Time": True}, "renameByName": {"Value": "state"}}}])
    d.panel("state-timeline", "States over time", [(state_score(S()), "{{role}}:{{task}}")],
            w=12, h=10, defaults={"mappings": state_mappings(), "color": {"mode": "thresholds"},
                                  "thresholds": {"mode": "absolute", "steps": [
                                      {"color": "blue", "value": None},
                                      {"color": "green", "value": 0},
                                      {"color": "yellow", "value": 1},
                                      {"color": "orange", "value": 2},
                                      {"color": "purple", "value": 4},
                                      {"color": "red", "value": 6}]}},
            options={"showValue": "never", "mergeValues": True, "rowHeight": 0.9})
    d.row("Who waits for whom")
    d.panel("table", "Blocked: waiting task -> peer, seconds", [
        {"expr": f"max by (role, task, peer_role, peer_task) "
                 f"(max_over_time(trainscope_task_blocked_seconds{{{S()}}}[$__range]))",
         "format": "table", "instant": True, "legendFormat": ""}], w=12, h=8, unit="s",
        description="Longest wait in the time range, per waiting task and the peer it waits "
                    "for (CreateSession or a barrier). Empty while nobody waits.",
        transformations=[{"id": "organize", "options": {
            "excludeByName": {"Time": True}, "renameByName": {"Value": "waited (max)"}}}])
    d.panel("timeseries", "Waiting in CreateSession", [
        (f"max by (role, task, peer_role, peer_task) (trainscope_task_blocked_seconds{{{S()}}})",
         "{{role}}:{{task}} -> {{peer_role}}:{{peer_task}}")], w=12, h=8, unit="s")
    d.row("Heartbeats and restarts")
    d.panel("timeseries", "Heartbeat age", [
        (f"max by (role, task) (trainscope_task_heartbeat_age_seconds{{{S()}}})",
         "{{role}}:{{task}}")], w=8, unit="s",
        description="Seconds since each task last answered its sidecar.")
    d.panel("timeseries", "Heartbeat latency p99", [
        (f"histogram_quantile(0.99, sum by (role, task, le) "
         f"(rate(trainscope_task_heartbeat_latency_seconds_bucket{{{S()}}}[{RI}])))",
         "{{role}}:{{task}}")], w=8, unit="s")
    d.panel("timeseries", "Failure suspicion (phi)", [
        (f"max by (role, task) (trainscope_task_heartbeat_suspicion{{{S()}}})",
         "{{role}}:{{task}}")], w=8,
        description="The detector's suspicion; 0 while answers come on time.")
    d.panel("timeseries", "Restarts", [
        (f"sum by (role, task) (increase(trainscope_task_restarts_total{{{S()}}}[{RI}]))",
         "{{role}}:{{task}}")], w=8, unit="short",
        description="New incarnations of each task.")
    d.panel("timeseries", "State changes", [
        (f"sum by (state) (increase(trainscope_task_state_transitions_total{{{S()}}}[{RI}]))",
         "{{state}}")], w=8, unit="short",
        description="Entries into each state, all selected tasks together.")
    d.panel("timeseries", "Sidecars", [
        (f"up{{{SC()}}}", "{{instance}} up"),
        (f"sum by (instance) (trainscope_sidecar_watched_tasks{{{SC()}}})",
         "{{instance}} watched tasks")], w=8)
    return d


def rpc_latency():
    d = Dashboard("trainscope-rpc-latency", "trainscope / RPC latency",
                  "gRPC call latency (gRFC A66 histograms) by method and peer role, errors by "
                  "status, deadlines.", ["rpc"])
    d.row("Latency")
    for side, metric in (("client attempts", "grpc_client_attempt_duration_seconds"),
                         ("server calls", "grpc_server_call_duration_seconds")):
        d.panel("timeseries", f"Latency of {side}: p50 / p90 / p99", [
            (f"histogram_quantile({q}, sum by (grpc_method, peer_role, le) "
             f"(rate({metric}_bucket{{{T()}}}[{RI}])))",
             f"p{int(q * 100)} {{{{grpc_method}}}} ({{{{peer_role}}}})")
            for q in (0.5, 0.9, 0.99)], w=12, h=9, unit="s")
    d.panel("heatmap", "Client attempt latency heatmap", [
        {"expr": f"sum by (le) (increase(grpc_client_attempt_duration_seconds_bucket{{{T()}}}[{RI}]))",
         "format": "heatmap", "legendFormat": "{{le}}"}], w=12, h=9, unit="s",
        options={"calculate": False, "yAxis": {"unit": "s"}, "cellGap": 1,
                 "color": {"mode": "scheme", "scheme": "Oranges", "steps": 64},
                 "rowsFrame": {"layout": "auto"}})
    d.panel("timeseries", "Call latency with retries (client view) p99", [
        (f"histogram_quantile(0.99, sum by (grpc_method, le) "
         f"(rate(grpc_client_call_duration_seconds_bucket{{{T()}}}[{RI}])))",
         "{{grpc_method}}")], w=12, h=9, unit="s")
    d.row("Rates and errors")
    d.panel("timeseries", "Client attempts by status", [
        (f"sum by (grpc_method, grpc_status) "
         f"(rate(grpc_client_attempt_duration_seconds_count{{{T()}}}[{RI}]))",
         "{{grpc_method}} {{grpc_status}}"),
        (f"sum by (grpc_method) (rate(grpc_client_attempt_started_total{{{T()}}}[{RI}]))",
         "{{grpc_method}} started")], w=12, unit="reqps")
    d.panel("timeseries", "Server calls by status", [
        (f"sum by (grpc_method, grpc_status) "
         f"(rate(grpc_server_call_duration_seconds_count{{{T()}}}[{RI}]))",
         "{{grpc_method}} {{grpc_status}}"),
        (f"sum by (grpc_method) (rate(grpc_server_call_started_total{{{T()}}}[{RI}]))",
         "{{grpc_method}} started")], w=12, unit="reqps")
    d.panel("timeseries", "Errors by status (not OK)", [
        (f"sum by (grpc_method, grpc_status) "
         f"(rate(grpc_client_attempt_duration_seconds_count{{{T()}, grpc_status!=\"OK\"}}[{RI}]))",
         "client {{grpc_method}} {{grpc_status}}"),
        (f"sum by (grpc_method, grpc_status) "
         f"(rate(grpc_server_call_duration_seconds_count{{{T()}, grpc_status!=\"OK\"}}[{RI}]))",
         "server {{grpc_method}} {{grpc_status}}")], w=12, unit="reqps",
        description="Empty while every call succeeds.")
    d.panel("timeseries", "DEADLINE_EXCEEDED rate", [
        (f"sum by (role, task, grpc_method, peer_role) "
         f"(rate(grpc_client_attempt_duration_seconds_count{{{T()}, "
         f"grpc_status=\"DEADLINE_EXCEEDED\"}}[{RI}]))",
         "{{role}}:{{task}} {{grpc_method}} -> {{peer_role}}")], w=12, unit="reqps",
        description="Client attempts that ran out of their deadline, per calling task. Empty "
                    "while none does.")
    d.row("Deadlines")
    d.panel("timeseries", "Calls near their deadline", [
        (f"sum by (grpc_method) (rate(trainscope_rpc_client_deadline_used_ratio_count{{{T()}}}[{RI}])) "
         f"- sum by (grpc_method) (rate(trainscope_rpc_client_deadline_used_ratio_bucket{{{T()}, "
         f"le=\"0.75\"}}[{RI}]))", "{{grpc_method}} > 75% of deadline"),
        (f"sum by (grpc_method) (rate(trainscope_rpc_client_deadline_used_ratio_count{{{T()}}}[{RI}])) "
         f"- sum by (grpc_method) (rate(trainscope_rpc_client_deadline_used_ratio_bucket{{{T()}, "
         f"le=\"0.95\"}}[{RI}]))", "{{grpc_method}} > 95% of deadline")], w=8, unit="reqps",
        description="Calls that used most of their deadline: the next to fail DEADLINE_EXCEEDED.")
    d.panel("timeseries", "Share of deadline used p50 / p99", [
        (f"histogram_quantile({q}, sum by (grpc_method, le) "
         f"(rate(trainscope_rpc_client_deadline_used_ratio_bucket{{{T()}}}[{RI}])))",
         f"p{int(q * 100)} {{{{grpc_method}}}}") for q in (0.5, 0.99)], w=8,
        unit="percentunit")
    d.panel("timeseries", "Deadline given", [
        (f"histogram_quantile(0.5, sum by (grpc_method, le) "
         f"(rate(trainscope_rpc_client_deadline_seconds_bucket{{{T()}}}[{RI}])))",
         "{{grpc_method}}")], w=8, unit="s")
    d.row("Messages and tracing")
    d.panel("timeseries", "Message size p99", [
        (f"histogram_quantile(0.99, sum by (grpc_method, le) "
         f"(rate(grpc_client_attempt_sent_total_compressed_message_size_bytes_bucket{{{T()}}}[{RI}])))",
         "sent {{grpc_method}}"),
        (f"histogram_quantile(0.99, sum by (grpc_method, le) "
         f"(rate(grpc_client_attempt_rcvd_total_compressed_message_size_bytes_bucket{{{T()}}}[{RI}])))",
         "received {{grpc_method}}"),
        (f"histogram_quantile(0.99, sum by (grpc_method, le) "
         f"(rate(grpc_server_call_rcvd_total_compressed_message_size_bytes_bucket{{{T()}}}[{RI}])))",
         "server received {{grpc_method}}"),
        (f"histogram_quantile(0.99, sum by (grpc_method, le) "
         f"(rate(grpc_server_call_sent_total_compressed_message_size_bytes_bucket{{{T()}}}[{RI}])))",
         "server sent {{grpc_method}}")], w=12, unit="bytes")
    d.panel("timeseries", "Spans", [
        (f"sum(rate(trainscope_trace_spans_started_total{{{T()}}}[{RI}]))", "started"),
        (f"sum(rate(trainscope_trace_spans_exported_total{{{T()}}}[{RI}]))", "exported"),
        (f"sum(rate(trainscope_trace_spans_dropped_total{{{T()}}}[{RI}]))", "dropped"),
        (f"sum(rate(trainscope_trace_export_failures_total{{{T()}}}[{RI}]))", "export failures")],
        w=12, unit="ops",
        description="The tasks' trace pipeline: dropped spans mean a full export queue.")
    return d


def parameter_servers():
    P = sel(TJ(), 'cluster="$cluster", role="ps", task=~"$task"')
    PEER = sel(TJ(), 'cluster="$cluster", peer_role="ps"')
    d = Dashboard("trainscope-parameter-servers", "trainscope / Parameter servers",
                  "Request rate and latency per ps, the slowest ps as the workers see it, queue "
                  "and apply time, memory against the budget, and the way to slow traces.",
                  ["ps"], role_default="ps")
    d.extra_vars = [
        query_variable("sidecar", "sidecar", f"label_values(up{{{SC()}}}, instance)", False,
                       False, sort=1),
        {"name": "trace_url", "label": "trace viewer", "type": "textbox", "hide": 0,
         "query": "http://localhost:16686/trace/",
         "current": {"text": "http://localhost:16686/trace/",
                     "value": "http://localhost:16686/trace/"},
         "description": "Prefix of a trace's page: Jaeger http://JAEGER:16686/trace/, "
                        "Tempo (Grafana) /explore?left={\"queries\":[{\"query\":\""},
    ]
    d.links = [{"title": "Slow ps requests (sidecar JSON)", "type": "link", "targetBlank": True,
                "url": "http://${sidecar}/api/v1/traces/slow"},
               {"title": "Sidecar page", "type": "link", "targetBlank": True,
                "url": "http://${sidecar}/"}]
    d.row("Requests")
    d.panel("timeseries", "Requests per ps", [
        (f"sum by (task, grpc_method) (rate(grpc_server_call_duration_seconds_count{{{P}, "
         f"grpc_method=~\"{PS}\"}}[{RI}]))", "ps:{{task}} {{grpc_method}}")], w=12,
        unit="reqps")
    d.panel("timeseries", "Latency per ps p99 (server)", [
        (f"histogram_quantile(0.99, sum by (task, grpc_method, le) "
         f"(rate(grpc_server_call_duration_seconds_bucket{{{P}, grpc_method=~\"{PS}\"}}[{RI}])))",
         "ps:{{task}} {{grpc_method}}")], w=12, unit="s")
    slowest = (f"topk(5, sum by (peer_task) (rate(trainscope_rpc_peer_latency_seconds_total{{"
               f"{PEER}}}[{RI}])) / sum by (peer_task) "
               f"(rate(trainscope_rpc_peer_calls_total{{{PEER}}}"
               f"[{RI}])))")
    d.panel("bargauge", "Slowest ps (mean latency the workers see)", [
        {"expr": slowest, "legendFormat": "ps:{{peer_task}}", "instant": True}], w=8, h=9,
        unit="s", options={"orientation": "horizontal", "displayMode": "gradient",
                           "reduceOptions": {"calcs": ["lastNotNull"], "values": False}},
        description="From the workers' per-peer counters (no histogram per peer). Click a bar "
                    "for that ps's slow requests.",
        defaults={"links": [{"title": "Slow requests of ps:${__field.labels.peer_task}",
                             "url": "http://${sidecar}/api/v1/traces/slow?ps=ps:"
                                    "${__field.labels.peer_task}", "targetBlank": True}]})
    d.panel("timeseries", "Mean latency to each ps (workers' view)", [
        (f"sum by (peer_task) (rate(trainscope_rpc_peer_latency_seconds_total{{{PEER}}}"
         f"[{RI}])) / sum by (peer_task) (rate(trainscope_rpc_peer_calls_total{{"
         f"{PEER}}}[{RI}]))", "ps:{{peer_task}}")], w=8, h=9,
        unit="s")
    d.panel("timeseries", "Error share per ps (workers' view)", [
        (f"sum by (peer_task) (rate(trainscope_rpc_peer_errors_total{{{PEER}}}"
         f"[{RI}])) / sum by (peer_task) (rate(trainscope_rpc_peer_calls_total{{"
         f"{PEER}}}[{RI}]))", "ps:{{peer_task}}")], w=8, h=9,
        unit="percentunit")
    d.row("Inside the ps")
    for title, metric in (("Queue time p50 / p99", "trainscope_ps_queue_seconds"),
                          ("Apply time p50 / p99", "trainscope_ps_apply_seconds"),
                          ("Push to apply p50 / p99", "trainscope_ps_push_to_apply_seconds")):
        d.panel("timeseries", title, [
            (f"histogram_quantile({q}, sum by (task, le) (rate({metric}_bucket{{{P}}}[{RI}])))",
             f"p{int(q * 100)} ps:{{{{task}}}}") for q in (0.5, 0.99)], w=8, unit="s")
    d.panel("timeseries", "Updates applied", [
        (f"sum by (task) (rate(trainscope_ps_updates_applied_total{{{P}}}[{RI}]))",
         "ps:{{task}}")], w=8, unit="ops")
    d.panel("timeseries", "Requests in flight", [
        (f"sum by (task) (trainscope_ps_inflight_requests{{{P}}})", "ps:{{task}}")], w=8)
    d.panel("timeseries", "Variables held", [
        (f"sum by (task) (trainscope_ps_variables{{{P}}})", "ps:{{task}}")], w=8)
    d.row("Memory")
    d.panel("timeseries", "Bytes held vs budget", [
        (f"sum by (task) (trainscope_ps_bytes_held{{{P}}})", "ps:{{task}} held"),
        (f"sum by (task) (trainscope_ps_memory_limit_bytes{{{P}}} > 0)", "ps:{{task}} budget")],
        w=12, unit="bytes",
        description="A ps without a budget (--ps_memory_limit_bytes 0) shows no budget line.")
    d.panel("bargauge", "Share of budget held", [
        {"expr": f"sum by (task) (trainscope_ps_bytes_held{{{P}}}) / sum by (task) "
                 f"(trainscope_ps_memory_limit_bytes{{{P}}} > 0)",
         "legendFormat": "ps:{{task}}", "instant": True}], w=6, unit="percentunit",
        options={"orientation": "horizontal", "displayMode": "gradient",
                 "reduceOptions": {"calcs": ["lastNotNull"], "values": False}},
        defaults={"min": 0, "max": 1, "thresholds": {"mode": "absolute", "steps": [
            {"color": "green", "value": None}, {"color": "orange", "value": 0.75},
            {"color": "red", "value": 0.9}]}},
        description="TrainscopePsMemoryNearBudget fires above 90%. Empty when no ps has a "
                    "budget.")
    d.panel("timeseries", "Resident memory per ps", [
        (f"sum by (task) (process_resident_memory_bytes{{{P}}})",
         "ps:{{task}}")], w=6, unit="bytes")
    d.row("Slow requests")
    d.panel("text", "Slow ps requests and their traces", [], w=24, h=5,
            options={"mode": "markdown", "content": (
                "The sidecar of each node keeps the slowest ps requests and every failed one, "
                "with their trace ids and where the time went (network, queue, apply):\n\n"
                "* [slow requests on ${sidecar}](http://${sidecar}/api/v1/traces/slow) (JSON), "
                "also on [its page](http://${sidecar}/)\n"
                "* open a trace id in your trace viewer: `${trace_url}<trace id>` (set the "
                "*trace viewer* variable above to your Jaeger or Tempo)\n"
                "* [failed requests](http://${sidecar}/api/v1/traces/errors); one trace: "
                "`http://${sidecar}/api/v1/traces/<trace id>`\n"
                "* with the Infinity data source installed, the tables below list them; their "
                "trace id column links to the viewer.")})
    columns = [("trace_id", "trace id", "string"), ("start_time", "start", "string"),
               ("method", "method", "string"), ("worker", "worker", "string"),
               ("ps", "ps", "string"), ("duration_ms", "total ms", "number"),
               ("network_ms", "network ms", "number"), ("queue_ms", "queue ms", "number"),
               ("apply_ms", "apply ms", "number"), ("read_ms", "read ms", "number"),
               ("status", "status", "string"), ("error", "error", "string")]
    for title, path, desc in (
            ("Slowest ps requests (from the sidecar)", "slow",
             "The slowest requests per method and ps over the sidecar's window, with where the "
             "time went."),
            ("Failed ps requests (from the sidecar)", "errors",
             "Every failed ps request the sidecar still holds (DEADLINE_EXCEEDED first among "
             "them when a ps is too slow).")):
        t = d.panel("table", title, [], w=24, h=8,
                    description=desc + " Needs the Infinity data source plugin "
                                "(yesoreyeram-infinity-datasource), provisioned as 'trainscope "
                                "sidecars'. Reads /api/v1/traces/" + path + " of ${sidecar}.")
        t["datasource"] = {"type": "yesoreyeram-infinity-datasource",
                           "uid": "trainscope-sidecars"}
        t["targets"] = [{
            "refId": "A", "datasource": t["datasource"], "type": "json", "source": "url",
            "format": "table", "parser": "backend",
            "url": f"http://${{sidecar}}/api/v1/traces/{path}",
            "url_options": {"method": "GET"}, "root_selector": "requests",
            "columns": [{"selector": c, "text": n, "type": ty} for c, n, ty in columns]}]
        t["fieldConfig"]["overrides"] = [{
            "matcher": {"id": "byName", "options": "trace id"},
            "properties": [{"id": "links", "value": [{
                "title": "Open trace ${__value.raw}", "url": "${trace_url}${__value.raw}",
                "targetBlank": True}]}]}]
    d.panel("timeseries", "Sidecars as trace agents", [
        (f"sum by (instance) (rate(trainscope_sidecar_traces_spans_received_total{{{SC()}}}[{RI}]))",
         "{{instance}} received/s"),
        (f"sum by (instance, reason) (rate(trainscope_sidecar_traces_spans_dropped_total{{{SC()}}}"
         f"[{RI}]))", "{{instance}} dropped/s ({{reason}})"),
        (f"sum by (instance) (rate(trainscope_sidecar_traces_forwarded_spans_total{{{SC()}}}[{RI}]))",
         "{{instance}} forwarded/s")], w=12, unit="ops",
        description="Spans the sidecars receive over OTLP, drop (by reason) and forward "
                    "upstream. Dropped and forwarded stay empty while nothing is dropped and no "
                    "--otlp_upstream is set.")
    d.panel("timeseries", "Spans kept by the sidecars", [
        (f"sum by (instance) (trainscope_sidecar_traces_spans_kept{{{SC()}}})",
         "{{instance}} spans"),
        (f"sum by (instance) (trainscope_sidecar_traces_kept_bytes{{{SC()}}})",
         "{{instance}} bytes")], w=12,
        overrides=[{"matcher": {"id": "byRegexp", "options": ".*bytes"},
                    "properties": [{"id": "unit", "value": "bytes"}]}])
    return d


def resources():
    d = Dashboard("trainscope-resources", "trainscope / Resources",
                  "CPU, memory, threads and file descriptors per task and per node; GPUs where "
                  "present.", ["resources"])
    node = 'label_replace({expr}, "node", "$1", "instance", "(.*):[0-9]+")'
    d.row("Per task")
    d.panel("timeseries", "CPU per task", [
        (f"sum by (role, task) (rate(process_cpu_seconds_total{{{T()}}}[{RI}]))",
         "{{role}}:{{task}}")], w=12, unit="percentunit",
        description="Cores used (1.0 = one core).")
    d.panel("timeseries", "Resident memory per task", [
        (f"sum by (role, task) (process_resident_memory_bytes{{{T()}}})", "{{role}}:{{task}}")],
        w=12, unit="bytes")
    d.panel("timeseries", "Threads per task", [
        (f"sum by (role, task) (process_threads{{{T()}}})", "{{role}}:{{task}}")], w=8)
    d.panel("timeseries", "Open fds per task (share of the limit)", [
        (f"sum by (role, task) (process_open_fds{{{T()}}}) / sum by (role, task) "
         f"(process_max_fds{{{T()}}})", "{{role}}:{{task}}")], w=8, unit="percentunit")
    d.panel("timeseries", "Uptime per task", [
        (f"time() - max by (role, task) (process_start_time_seconds{{{T()}}})",
         "{{role}}:{{task}}")], w=8, unit="s")
    d.panel("timeseries", "Memory as the sidecar sees it", [
        (f"max by (role, task) (trainscope_task_resident_memory_bytes{{{S()}}})",
         "{{role}}:{{task}}")], w=8, unit="bytes",
        description="From the heartbeat: there even when the task's /metrics is not scraped.")
    d.panel("timeseries", "CPU as the sidecar sees it", [
        (f"sum by (role, task) (rate(trainscope_task_cpu_seconds_total{{{S()}}}[{RI}]))",
         "{{role}}:{{task}}")], w=8, unit="percentunit")
    d.panel("timeseries", "Threads and fds as the sidecar sees them", [
        (f"max by (role, task) (trainscope_task_threads{{{S()}}})", "{{role}}:{{task}} threads"),
        (f"max by (role, task) (trainscope_task_open_fds{{{S()}}})", "{{role}}:{{task}} fds")],
        w=8)
    d.row("Per node")
    d.panel("timeseries", "Node CPU by mode", [
        ("max by (node, mode) (" + node.format(
            expr=f"rate(trainscope_node_cpu_seconds_total{{{T()}}}[{RI}])") + ")",
         "{{node}} {{mode}}")], w=12, unit="percentunit",
        description="Every task reports its node; the max per node removes the duplicates.")
    d.panel("timeseries", "Node memory", [
        ("max by (node) (" + node.format(expr=f"trainscope_node_memory_total_bytes{{{T()}}}") + ")",
         "{{node}} total"),
        ("max by (node) (" + node.format(
            expr=f"trainscope_node_memory_available_bytes{{{T()}}}") + ")",
         "{{node}} available")], w=12, unit="bytes")
    d.panel("timeseries", "Sidecar footprint", [
        (f"process_resident_memory_bytes{{{SC()}}}", "{{instance}} memory"),
        (f"rate(process_cpu_seconds_total{{{SC()}}}[{RI}])",
         "{{instance}} cpu")], w=12,
        overrides=[{"matcher": {"id": "byRegexp", "options": ".*memory"},
                    "properties": [{"id": "unit", "value": "bytes"}]}])
    d.row("GPU")
    gpu_note = "Only where an NVIDIA GPU and its driver are present; empty otherwise."
    d.panel("timeseries", "GPU utilization", [
        (f"max by (role, task, gpu) (trainscope_gpu_utilization_ratio{{{T()}}})",
         "{{role}}:{{task}} gpu {{gpu}}")], w=12, unit="percentunit", description=gpu_note)
    d.panel("timeseries", "GPU memory used / total", [
        (f"max by (role, task, gpu) (trainscope_gpu_memory_used_bytes{{{T()}}}) / max by (role, "
         f"task, gpu) (trainscope_gpu_memory_total_bytes{{{T()}}})",
         "{{role}}:{{task}} gpu {{gpu}}")], w=12, unit="percentunit", description=gpu_note)
    return d


def training():
    d = Dashboard("trainscope-training", "trainscope / Training",
                  "Steps, step time, loss, throughput and stragglers.", ["training"])
    W = f'{T()}, role=~"worker|chief"'
    d.row("Progress")
    d.panel("timeseries", "Steps per second", [
        (f"sum by (role, task) (rate(trainscope_training_steps_total{{{T()}}}[{RI}]))",
         "{{role}}:{{task}}"),
        (f"sum(rate(trainscope_training_steps_total{{{T()}}}[{RI}]))", "all")], w=12,
        unit="ops")
    d.panel("timeseries", "Examples per second", [
        (f"sum by (role, task) (rate(trainscope_training_examples_total{{{T()}}}[{RI}]))",
         "{{role}}:{{task}}"),
        (f"sum(trainscope_training_examples_per_second{{{T()}}})", "all (reported)")], w=12,
        unit="ops")
    d.panel("timeseries", "Step time p50 / p99", [
        (f"histogram_quantile({q}, sum by (role, task, le) "
         f"(rate(trainscope_training_step_duration_seconds_bucket{{{T()}}}[{RI}])))",
         f"p{int(q * 100)} {{{{role}}}}:{{{{task}}}}") for q in (0.5, 0.99)], w=12, unit="s")
    d.panel("timeseries", "Loss", [
        (f"max by (role, task) (trainscope_training_loss{{{T()}}})", "{{role}}:{{task}}")],
        w=12)
    goodput(d)
    d.row("Stragglers")
    d.panel("bargauge", "Step rate relative to the median worker", [
        {"expr": f"sum by (role, task) (rate(trainscope_training_steps_total{{{W}}}[5m])) / "
                 f"scalar(quantile(0.5, sum by (role, task) "
                 f"(rate(trainscope_training_steps_total{{{W}}}[5m]))))",
         "legendFormat": "{{role}}:{{task}}", "instant": True}], w=12, h=9,
        unit="percentunit",
        options={"orientation": "horizontal", "displayMode": "gradient",
                 "reduceOptions": {"calcs": ["lastNotNull"], "values": False}},
        defaults={"min": 0, "thresholds": {"mode": "absolute", "steps": [
            {"color": "red", "value": None}, {"color": "orange", "value": 0.5},
            {"color": "green", "value": 0.8}]}},
        description="1.0 = as fast as the median; a straggler is well below.")
    d.panel("timeseries", "Last step time (sidecar view)", [
        (f"max by (role, task) (trainscope_task_last_step_seconds{{{S()}}})",
         "{{role}}:{{task}}")], w=12, h=9, unit="s",
        description="The duration of each task's latest step, from its heartbeat.")
    d.panel("bargauge", "Slowest worker -> ps edges", [
        {"expr": f"max by (role, task, peer_role, peer_task) "
                 f"(trainscope_task_peer_latency_seconds{{{S()}}})",
         "legendFormat": "{{role}}:{{task}} -> {{peer_role}}:{{peer_task}}", "instant": True}],
        w=24, h=8, unit="s",
        options={"orientation": "horizontal", "displayMode": "gradient",
                 "reduceOptions": {"calcs": ["lastNotNull"], "values": False}},
        description="The worker x ps map: each sidecar's 5 slowest edges from its workers to a "
                    "ps (10 s median). One edge far above its row and column is a slow link: "
                    "the worker's reason names it (trainscope_task_slow_link is 1 while it "
                    "lasts); a whole column is a slow ps.")
    d.row("Session")
    d.panel("state-timeline", "CreateSession phase", [
        (f"max by (role, task, phase) (trainscope_session_phase{{{T()}}}) == 1",
         "{{role}}:{{task}} {{phase}}")], w=12, h=8)
    d.panel("timeseries", "Waiting for peers in CreateSession", [
        (f"max by (role, task, peer_role, peer_task) (trainscope_session_waiting_seconds{{{T()}}})",
         "{{role}}:{{task}} -> {{peer_role}}:{{peer_task}}")], w=12, h=8, unit="s")
    checkpoints(d)
    return d


def goodput(d):
    """The ledger (sidecar/diagnose/ledger.h): every worker second as one outcome, and the
    seconds lost to incidents by their kind."""
    L = f'{S()}, role=~"worker|chief"'
    d.row("Goodput")
    d.panel("timeseries", "Goodput", [
        (f'sum(rate(trainscope_training_seconds_total{{{L}, outcome="productive"}}[5m])) / '
         f'sum(rate(trainscope_training_seconds_total{{{L}, outcome!="idle"}}[5m]))',
         "productive share")], w=8, unit="percentunit",
        defaults={"min": 0, "max": 1},
        description="The share of the workers' time (not idle: before the session or done) "
                    "spent training, over 5 minutes, from the sidecars' ledger.")
    d.panel("timeseries", "Worker time by outcome", [
        (f"sum by (outcome) (rate(trainscope_training_seconds_total{{{L}}}[{RI}]))",
         "{{outcome}}")], w=8, unit="short",
        description="Worker-seconds per second: productive, waiting (held by an incident), "
                    "down, redone (after a checkpoint restore), idle.")
    d.panel("timeseries", "Training time lost by cause", [
        (f'max by (kind) (rate(trainscope_incident_lost_seconds_total{{{SC()}, '
         f'cluster="$cluster"}}[{RI}]))', "{{kind}}")], w=8, unit="short",
        description="Worker-seconds per second lost to incidents, by the incident's kind (dead, "
                    "hung, partition, slow, ...). Each sidecar counts the whole cluster as it "
                    "sees it: max, not sum. The incidents are at the sidecar's "
                    "/api/v1/incidents and `trainscopectl incidents`.")


def checkpoints(d):
    """Checkpoint age, restores and saves (docs/runtime.md, Checkpoints): how far back a ps
    that restarts now would go, and whether the ps that did restart came back with one."""
    d.row("Checkpoints")
    d.panel("timeseries", "Checkpoint age", [
        (f"max by (role, task) (trainscope_checkpoint_age_seconds{{{T()}}})",
         "{{role}}:{{task}}")], w=8, h=8, unit="s",
        defaults={"thresholds": {"mode": "absolute", "steps": [
            {"color": "green", "value": None}, {"color": "red", "value": 1800}]},
            "custom": {"drawStyle": "line", "lineWidth": 1, "fillOpacity": 10,
                       "showPoints": "never", "spanNulls": False,
                       "thresholdsStyle": {"mode": "line"}}},
        description="Seconds since the saving task (the chief, or worker:0) wrote the newest "
                    "checkpoint: the steps a ps restarted now loses. The line is "
                    "TrainscopeCheckpointStale's threshold (30 min, for 5 min). A sawtooth is "
                    "healthy; a ramp means saves fail or stopped.")
    d.panel("timeseries", "Restarts and checkpoint restores", [
        (f"max by (role, task) (trainscope_task_restarts_total{{{S()}}})",
         "{{role}}:{{task}} restarts (sidecar)"),
        (f"max by (role, task) (trainscope_checkpoint_restores_total{{{T()}}})",
         "{{role}}:{{task}} restores (this process)")], w=8, h=8, unit="short",
        description="Restarts the sidecar saw (new incarnations) beside restores from a "
                    "checkpoint: a ps counts 1 when its process loaded its variables from one, a "
                    "worker 1 each time it went back to a restored step. A ps restart without a "
                    "restore lost its variables (the workers fail with that cause); the "
                    "sidecar's reason for a restored ps says from which step.")
    d.panel("timeseries", "Checkpoint writes", [
        (f"max by (role, task) (trainscope_checkpoint_duration_seconds{{{T()}}})",
         "{{role}}:{{task}} write time"),
        (f"sum by (role, task) (increase(trainscope_checkpoint_failures_total{{{T()}}}[{RI}]))",
         "{{role}}:{{task}} failed writes")], w=8, h=8, unit="s",
        overrides=[{"matcher": {"id": "byRegexp", "options": ".*failed writes"},
                    "properties": [{"id": "unit", "value": "short"},
                                   {"id": "custom.axisPlacement", "value": "right"}]}],
        description="How long the newest checkpoint took to write (on the saver's writer "
                    "thread, not the step), and failed writes (look for \"could not save the "
                    "checkpoint\" in the saver's log).")


DASHBOARDS = {
    "cluster-health": cluster_health,
    "rpc-latency": rpc_latency,
    "parameter-servers": parameter_servers,
    "resources": resources,
    "training": training,
}


def render(config=None):
    """{file name: JSON text} of every dashboard, with DEFAULT_CONFIG updated by config."""
    unknown = set(config or {}) - set(DEFAULT_CONFIG)
    if unknown:
        raise ValueError(f"unknown config keys {sorted(unknown)}; known: {sorted(DEFAULT_CONFIG)}")
    CONFIG.clear()
    CONFIG.update(DEFAULT_CONFIG, **(config or {}))
    return {f"{name}.json": json.dumps(build().json(), indent=2, sort_keys=False) + "\n"
            for name, build in DASHBOARDS.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if the files differ")
    ap.add_argument("--out", default=OUT, help="folder to write (default: the shipped one)")
    ap.add_argument("--config", help="JSON object overriding DEFAULT_CONFIG's selectors")
    args = ap.parse_args()
    config = None
    if args.config:
        with open(args.config) as f:
            config = json.load(f)
    try:
        files = render(config)
    except ValueError as e:
        print(f"gen_dashboards: {args.config}: {e}", file=sys.stderr)
        return 2
    return write_or_check(args.out, files, args.check, "dashboards/tools/gen_dashboards.py")


if __name__ == "__main__":
    sys.exit(main())
