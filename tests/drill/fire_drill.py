#!/usr/bin/python3
"""The fire drill: every alert proven against a real cluster, sidecar, Prometheus and Alertmanager.

Starts, all on 127.0.0.1 and free ports, in a temporary folder:
  - a cluster of build/bin/linear_regression tasks (ps:0..2, worker:0..1, fault injection on)
    and build/bin/trainscope-sidecar watching them (DrillCluster: a
    trainscope_testing.training.TrainingCluster on one nodes.Loopback node),
  - Prometheus with dashboards/prometheus/prometheus.yml and alerts.yml, rendered with 1 s
    intervals and the drill's ports (and a few thresholds shortened; see RULE_OVERRIDES),
  - Alertmanager with dashboards/alertmanager/alertmanager.yml delivering to
    webhook_receiver.py (send_resolved on),
then causes each failure for real and asserts that the right alert reaches the webhook naming the
right task, and resolves when the failure is undone; it measures fault -> sidecar state ->
Prometheus firing -> webhook for each. Finally it runs every panel query of every dashboard over
the drill's time range and fails on any that errors or returns no data.

Only the processes it starts are touched, by pid; every wait is bounded.

Usage: fire_drill.py --bin BUILD/bin --src SOURCE_DIR [--out DIR] [--scenarios a,b] [--keep]; by
hand `scripts/python tests/drill/fire_drill.py ...` (its helpers, trainscope_testing, on
PYTHONPATH).
Writes DIR/report.json and DIR/report.md (default DIR: a temporary folder, removed unless
--keep or a failure). Exit 0 when every check passed. Standard library only.
"""

import argparse
import functools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

sys.dont_write_bytecode = True  # no __pycache__ in the source tree

import ps_restore  # beside this file
from trainscope_testing import dashboards, monitoring, nodes, training, waiting
from trainscope_testing.logs import logger
from trainscope_testing.monitoring import RULE_OVERRIDES
from trainscope_testing.ports import free_port
from trainscope_testing.waiting import HarnessError
from trainscope_testing.web import http_get, http_json

HERE = os.path.dirname(os.path.abspath(__file__))
CLUSTER = "drill"
STEP_DELAY_MS = 20
FEATURES = 90  # 3 equal shards of 30 floats (120 bytes), so the ps:0 budget below is exact.
PS0_BUDGET = 124  # bytes: 120 held = 97% (alerts above 90%), room for the 4-byte bias as well.
# worker:0 saves a checkpoint every this many of its steps (about 2-3 s at the drill's pace), so
# that a ps killed in ps-kill-restore comes back with its variables, and the checkpoint panels
# have data. By steps, not seconds: the scenario's bound on the steps lost is one interval.
CHECKPOINT_EVERY_STEPS = 100

# Every drill task's flags (also local_cluster.py's). Not training.TASK_FLAGS: only worker:0
# rides out failed steps; worker:1 goes on through a ps restart with the default tolerance
# (ps_restore.py).
TASK_FLAGS = ["--enable_fault_injection", "--steps", "100000000", "--log_every", "2000"]

INTERVALS = {"scrape": "1s", "evaluation": "1s", "http_sd_refresh": "1s",
             "am_group_wait": "1s", "am_group_interval": "1s"}


DrillError = HarnessError  # what the drill's helpers raise
log = logger("drill")
wait_for = functools.partial(waiting.wait_for, interval=0.1)  # the drill polls every 0.1 s


def has_gpu():
    return os.path.exists("/dev/nvidiactl") or subprocess.run(
        "ldconfig -p | grep -q libnvidia-ml.so.1", shell=True).returncode == 0


def api_fields(src, message):
    """{field name: optional?} of `message` in proto/trainscope/sidecar/v1/api.proto, the
    contract of the sidecar's JSON bodies (an optional field is absent when not known)."""
    with open(os.path.join(src, "proto/trainscope/sidecar/v1/api.proto")) as f:
        text = f.read()
    m = re.search(r"^message " + message + r" \{(.*?)^\}", text, re.S | re.M)
    if not m:
        raise DrillError(f"no message {message} in api.proto")
    return {name: bool(opt) for opt, name in
            re.findall(r"^\s*(optional\s+)?(?:repeated\s+)?[\w.]+\s+(\w+)\s*=\s*\d+;",
                       m.group(1), re.M)}


class DrillCluster(training.TrainingCluster):
    """ps:0..2 and worker:0..1 with the drill's flags, and one sidecar watching them (paging
    Alertmanager at am_port first-hand), on one loopback node. Not thread-safe."""

    task_flags = TASK_FLAGS

    def __init__(self, bin_dir, work_dir, am_port, metrics_port=True):
        layout = training.Layout([(f"ps:{i}", 1) for i in range(3)]
                                 + [(f"worker:{i}", 1) for i in range(2)])
        super().__init__(
            nodes.Loopback(1, os.path.join(work_dir, "logs"), log=log), bin_dir, layout,
            CLUSTER, STEP_DELAY_MS, sidecar_args=[
                # First-hand alerts (dead, hung) straight to Alertmanager; the rules are the
                # backstop.
                "--alertmanager_url", f"127.0.0.1:{am_port}"],
            task_args=["--features", str(FEATURES),
                       "--checkpoint_dir", os.path.join(work_dir, "checkpoints"),
                       "--checkpoint_every_steps", str(CHECKPOINT_EVERY_STEPS),
                       "--checkpoint_every_s", "0",
                       *(["--metrics_port", "0"] if metrics_port else [])])
        self.prepare()

    def task_argv(self, task, tls_flags=None):
        argv = super().task_argv(task, tls_flags)
        if task == "ps:0":
            argv += ["--ps_memory_limit_bytes", str(PS0_BUDGET)]
        if task == "worker:0":
            # A short deadline is the point of the deadline scenario: its calls to ps:0 fail with
            # DEADLINE_EXCEEDED; the runtime retries them meanwhile, as it does by default.
            argv += ["--rpc_deadline_ms", "1000"]
        return argv


class Drill:
    def __init__(self, args):
        self.args = args
        self.bin = os.path.abspath(args.bin)
        self.src = os.path.abspath(args.src)
        self.dir = os.path.abspath(args.out) if args.out else tempfile.mkdtemp(prefix="drill-")
        os.makedirs(self.dir, exist_ok=True)
        # A folder reused from an earlier run: start from empty data (only what we write).
        for old in ("prom-data", "am-data", "logs", "checkpoints"):
            shutil.rmtree(os.path.join(self.dir, old), ignore_errors=True)
        self.cluster = None  # a DrillCluster, once preflight has passed
        self.results = []
        self.failures = []
        self.notes = []
        self.start_time = time.time()

    # ---------------------------------------------------------------- set-up

    def need(self, path, what):
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            raise DrillError(f"MISSING: {what} ({path})")
        return path

    def preflight(self):
        self.lr = self.need(os.path.join(self.bin, "linear_regression"), "the example program")
        self.need(os.path.join(self.bin, "trainscope-sidecar"), "the sidecar")
        self.need(os.path.join(self.bin, "trainscopectl"), "trainscopectl")
        self.prometheus = self.need(shutil.which("prometheus") or "/usr/bin/prometheus",
                                    "prometheus (apt-get install prometheus)")
        self.promtool = self.need(shutil.which("promtool") or "/usr/bin/promtool", "promtool")
        self.alertmanager = self.need(
            shutil.which("prometheus-alertmanager") or "/usr/bin/prometheus-alertmanager",
            "prometheus-alertmanager (apt-get install prometheus-alertmanager)")
        helptext = subprocess.run([self.lr, "--help"], capture_output=True, text=True).stdout
        for flag in ("--enable_fault_injection", "--cluster_name", "--rpc_deadline_ms",
                     "--ps_memory_limit_bytes", "--step_delay_ms"):
            if flag not in helptext:
                raise DrillError(f"MISSING: linear_regression has no {flag}")
        self.has_metrics_port = "--metrics_port" in helptext

    @property
    def tasks(self):
        """"ps:0" -> the task's Proc (ps_restore.py reads their logs)."""
        return self.cluster.tasks

    def start_task(self, name):
        return self.cluster.start_task(name)

    def start_sidecar(self):
        """(Re)starts the sidecar on its port and waits for /healthz."""
        self.cluster.start_sidecar(1)
        self.cluster.wait_sidecar(1)

    def render_configs(self):
        """The shipped rules, scrape config and Alertmanager config, for this drill."""
        try:
            self.rules_path = os.path.join(self.dir, "alerts.drill.yml")
            monitoring.render_rules(self.src, self.rules_path, self.promtool)
            self.prom_config = os.path.join(self.dir, "prometheus.yml")
            monitoring.render_prometheus(
                self.src, self.prom_config, self.promtool, [f"127.0.0.1:{self.sidecar_port}"],
                self.rules_path, f"127.0.0.1:{self.am_port}", INTERVALS["scrape"])
            self.am_config = os.path.join(self.dir, "alertmanager.yml")
            monitoring.render_alertmanager(
                self.src, self.am_config, f"http://127.0.0.1:{self.webhook_port}/alerts",
                INTERVALS["am_group_wait"], INTERVALS["am_group_interval"])
        except monitoring.RenderError as e:
            raise DrillError(str(e))

    def start_monitoring(self):
        self.webhook_log = os.path.join(self.dir, "webhook.jsonl")
        open(self.webhook_log, "w").close()
        spawn = functools.partial(self.cluster.c.spawn, 1)  # beside the cluster
        spawn([sys.executable, os.path.join(HERE, "webhook_receiver.py"), "--port",
               str(self.webhook_port), "--out", self.webhook_log], name="webhook")
        spawn(monitoring.argv_alertmanager(self.alertmanager, self.am_config,
                                           os.path.join(self.dir, "am-data"), self.am_port),
              name="alertmanager")
        spawn(monitoring.argv_prometheus(self.prometheus, self.prom_config,
                                         os.path.join(self.dir, "prom-data"), self.prom_port),
              name="prometheus")
        wait_for("the webhook receiver", lambda: http_get(
            f"http://127.0.0.1:{self.webhook_port}/")[0] == 200, 15)
        wait_for("Alertmanager ready", lambda: http_get(
            f"http://127.0.0.1:{self.am_port}/-/ready")[0] == 200, 30)
        wait_for("Prometheus ready", lambda: http_get(
            f"http://127.0.0.1:{self.prom_port}/-/ready")[0] == 200, 30)

    # ---------------------------------------------------------------- observing

    def tasks_view(self):
        return self.cluster.view(1, local=True)["tasks"]

    def state_of(self, name):
        return self.cluster.states().get(name)

    def prom_query(self, expr, at=None):
        q = {"query": expr}
        if at:
            q["time"] = f"{at:.3f}"
        body = http_json(f"http://127.0.0.1:{self.prom_port}/api/v1/query?"
                         + urllib.parse.urlencode(q), timeout=10)
        if body.get("status") != "success":
            raise DrillError(f"query failed: {expr}: {body}")
        return body["data"]["result"]

    def notifications(self, since):
        out = []
        with open(self.webhook_log) as f:
            for line in f:
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue
                if rec["received"] < since:
                    continue
                for a in rec["payload"].get("alerts", []):
                    out.append((rec["received"], a))
        return out

    def find_notification(self, since, alertname, labels, status):
        for received, a in self.notifications(since):
            lab = a.get("labels", {})
            if (lab.get("alertname") == alertname and a.get("status") == status
                    and all(lab.get(k) == v for k, v in labels.items())):
                return received, a
        return None

    def firing_in_prometheus(self, alertname, labels):
        sel = ",".join([f'alertname="{alertname}"', 'alertstate="firing"']
                       + [f'{k}="{v}"' for k, v in labels.items()])
        return bool(self.prom_query(f"ALERTS{{{sel}}}"))

    # ---------------------------------------------------------------- scenarios

    def wait_healthy(self, timeout=60):
        """Restarts tasks that exited (as a supervisor would) and waits until all are up."""
        for name, p in self.tasks.items():
            if not p.alive() and name in self.should_run:
                last = self.results[-1]["scenario"] if self.results else "start-up"
                log(f"{name} exited (code {p.returncode}); restarting it")
                self.notes.append(f"{name} exited with code {p.returncode} during "
                                  f"{last} and was restarted")
                self.start_task(name)

        def all_up():
            view = self.cluster.states()
            bad = {n: view.get(n) for n in self.should_run if view.get(n) != "up"}
            self._not_up = bad
            return not bad
        try:
            wait_for("every task up", all_up, timeout, interval=0.2)
        except DrillError as e:
            raise DrillError(f"{e}; not up: {self._not_up}")

    def run_scenario(self, name, alertname, labels, fault, undo, detect=None, resolve=True,
                     timeout=120, resolve_timeout=150):
        """fault() starts the failure and returns its time; undo() ends it."""
        log(f"scenario {name}: expecting {alertname} {labels}")
        res = {"scenario": name, "alert": alertname, "labels": labels, "ok": False}
        self.results.append(res)
        try:
            t0 = fault()
            res["fault_at"] = t0
            t_detect = t_prom = None
            deadline = t0 + timeout
            while time.time() < deadline:
                now = time.time()
                if detect and t_detect is None:
                    try:
                        if self.state_of(detect[0]) == detect[1]:
                            t_detect = now
                    except (OSError, ValueError):
                        pass
                if t_prom is None:
                    try:
                        if self.firing_in_prometheus(alertname, labels):
                            t_prom = now
                    except (OSError, ValueError, DrillError):
                        pass
                hit = self.find_notification(t0, alertname, labels, "firing")
                if hit:
                    break
                time.sleep(0.1)
            else:
                firing = self.prom_query('ALERTS{alertstate="firing"}')
                raise DrillError(
                    f"no firing {alertname} {labels} at the webhook within {timeout} s; "
                    f"firing in Prometheus: "
                    f"{[(a['metric'].get('alertname'), a['metric'].get('role'), a['metric'].get('task')) for a in firing]}")
            t_hook, alert = hit
            res["webhook_firing_s"] = round(t_hook - t0, 2)
            if t_detect:
                res["sidecar_state_s"] = round(t_detect - t0, 2)
            if t_prom:
                res["prometheus_firing_s"] = round(t_prom - t0, 2)
            res["sent_by"] = ("sidecar" if alert.get("generatorURL", "").startswith(
                f"http://127.0.0.1:{self.sidecar_port}/") else "Prometheus")
            res["summary"] = alert.get("annotations", {}).get("summary", "")
            res["description"] = alert.get("annotations", {}).get("description", "")
            log(f"  firing at the webhook after {t_hook - t0:.1f} s: {res['summary']}")
            want = f"{labels.get('role', '')}:{labels.get('task', '')}"
            if "role" in labels and want not in res["summary"] + res["description"]:
                raise DrillError(f"the alert does not name {want}: {res['summary']}")
            if not resolve:
                res["ok"] = True
                res["resolved"] = "not exercised"
                return res
            t_undo = undo()
            res["undo_at"] = t_undo
            hit = wait_for(f"resolved {alertname} {labels} at the webhook",
                           lambda: self.find_notification(t_undo, alertname, labels, "resolved"),
                           resolve_timeout, interval=0.2)
            res["webhook_resolved_s"] = round(hit[0] - t_undo, 2)
            log(f"  resolved at the webhook {hit[0] - t_undo:.1f} s after the fault was undone")
            res["ok"] = True
        except DrillError as e:
            res["error"] = str(e)
            self.failures.append(f"scenario {name}: {e}")
            log(f"  FAILED: {e}")
            try:
                if undo and "undo_at" not in res and "fault_at" in res:
                    undo()
            except Exception as e2:  # noqa: BLE001 (best effort clean-up)
                log(f"  undo failed: {e2}")
        return res

    def scenario_blocked(self):
        # The cluster started without ps:2: both workers wait for it in CreateSession.
        def fault():
            return self.workers_started_at

        def undo():
            t = time.time()
            self.start_task("ps:2")
            self.should_run.add("ps:2")
            self.variables_placed_at = t  # CreateSession completes, variables get placed
            return t
        self.run_scenario("ps-never-starts", "TrainscopeTaskBlocked",
                          {"cluster": CLUSTER, "role": "worker", "task": "0", "peer_role": "ps",
                           "peer_task": "2"}, fault, undo, detect=("worker:0", "blocked"))

    def scenario_memory(self):
        # ps:0 has a budget its variables fill to 97%; measured from the moment the workers
        # could place them (ps:2 started, CreateSession done).
        self.run_scenario("ps-memory-near-budget", "TrainscopePsMemoryNearBudget",
                          {"cluster": CLUSTER, "role": "ps", "task": "0"},
                          lambda: getattr(self, "variables_placed_at", self.ps0_started_at),
                          None, resolve=False)

    def scenario_kill_worker(self):
        def fault():
            t = time.time()
            self.cluster.kill("worker:1")
            return t

        def undo():
            t = time.time()
            self.start_task("worker:1")
            return t
        self.run_scenario("kill-9-worker", "TrainscopeTaskDead",
                          {"cluster": CLUSTER, "role": "worker", "task": "1"}, fault, undo,
                          detect=("worker:1", "dead"))

    def scenario_stop_ps(self):
        def fault():
            t = time.time()
            self.cluster.kill("ps:1", signal.SIGSTOP)
            return t

        def undo():
            t = time.time()
            self.cluster.kill("ps:1", signal.SIGCONT)
            return t
        self.run_scenario("sigstop-ps", "TrainscopeTaskHung",
                          {"cluster": CLUSTER, "role": "ps", "task": "1"}, fault, undo,
                          detect=("ps:1", "hung"))

    def inject(self, task, delay_ms):
        self.cluster.fault(task, parameter_delay_ms=delay_ms)
        return time.time()

    def scenario_slow_ps(self):
        # Slower than the 500 ms threshold, well inside the workers' deadlines. The sidecar calls
        # ps:2 slow by its own figures: TrainscopePsSlow pages, and inhibits the latency alert
        # of the same ps (never at the webhook: not among CONSEQUENCES).
        self.run_scenario("slow-ps", "TrainscopePsSlow",
                          {"cluster": CLUSTER, "role": "ps", "task": "2"},
                          lambda: self.inject("ps:2", 700), lambda: self.inject("ps:2", 0),
                          detect=("ps:2", "slow"), resolve_timeout=150)

    def scenario_deadline(self):
        # Past worker:0's 1 s deadline.
        self.run_scenario("ps-past-deadline", "TrainscopeDeadlineExceededRateHigh",
                          {"cluster": CLUSTER, "role": "ps", "task": "0"},
                          lambda: self.inject("ps:0", 1500), lambda: self.inject("ps:0", 0),
                          resolve_timeout=150)

    def scenario_restarts(self):
        # worker:1 is killed and restarted until the sidecar has counted 3 restarts (a crash
        # loop): TrainscopeTaskRestarting, measured from the third restart.
        def restarts():
            for t in self.tasks_view():
                if f"{t['role']}:{t['task']}" == "worker:1":
                    return int(t.get("restarts", 0))
            return 0

        def fault():
            t = time.time()
            for _ in range(4):
                if restarts() >= 3:
                    break
                t = time.time()
                self.cluster.kill("worker:1")
                self.start_task("worker:1")
                wait_for("worker:1 up again", lambda: self.state_of("worker:1") == "up", 30,
                         interval=0.1)
            return t
        self.run_scenario("crash-loop", "TrainscopeTaskRestarting",
                          {"cluster": CLUSTER, "role": "worker", "task": "1"}, fault, None,
                          resolve=False, timeout=60)

    def scenario_sidecar_down(self):
        instance = f"127.0.0.1:{self.sidecar_port}"

        def fault():
            t = time.time()
            self.cluster.kill("sidecar:n1")
            return t

        def undo():
            t = time.time()
            self.start_sidecar()
            return t
        self.run_scenario("sidecar-down", "TrainscopeSidecarDown",
                          {"job": "trainscope-sidecars", "instance": instance}, fault, undo)

    def scenario_ps_kill_restore(self):
        log("scenario ps-kill-restore: kill -9 ps:1 mid-training, restart it; expecting its "
            "checkpoint restored, the workers going on, at most one interval lost")
        ps_restore.scenario(self, CLUSTER, CHECKPOINT_EVERY_STEPS, HELPERS)

    # ---------------------------------------------------------------- dashboards

    def run_panel_queries(self):
        """Every panel query over the drill's time range, the variables resolved as Grafana
        would (the job variables find the shipped jobs by metric name)."""
        check_dashboards = dashboards.check_dashboards(self.src)
        end = time.time()
        fixed = {"__rate_interval": "4s", "__interval": "2s",
                 "__range": f"{int(end - self.start_time) + 1}s"}
        qres, problems, self.dashboard_variables = check_dashboards.run_queries(
            f"http://127.0.0.1:{self.prom_port}", self.src, self.start_time, end, fixed,
            has_gpu=has_gpu())
        self.failures += problems
        self.query_results = qres
        ok = sum(1 for e in qres if e["result"] == "data")
        log(f"panel queries: {ok} of {len(qres)} returned data; "
            f"{sum(1 for e in qres if e['result'].startswith('empty'))} allowed empty")

    def check_json_panels(self):
        """The panels that read the sidecar's JSON rather than Prometheus. Run before the
        sidecar-down scenario: a restarted sidecar starts with an empty trace memory."""
        check_dashboards = dashboards.check_dashboards(self.src)
        json_sources = []
        check_dashboards.check(self.src, json_sources)
        values = {"sidecar": f"127.0.0.1:{self.sidecar_port}"}
        # The panels that read the sidecar's JSON (slow and failed ps requests, with trace
        # ids): each must list requests with the columns the panel shows, and the slow list
        # must hold requests of the ps slowed on purpose.
        if not json_sources:
            self.failures.append("no dashboard panel reads the sidecar's trace lists")
        self.json_panels = []
        for js in json_sources:
            url = check_dashboards.substitute(js["url"], values)
            entry = {"dashboard": js["dashboard"], "panel": js["title"], "url": url}
            self.json_panels.append(entry)
            try:
                body = json.loads(http_get(url, timeout=5)[1])
                items = body.get(js["root_selector"]) if js["root_selector"] else body
                if not isinstance(items, list) or not items:
                    raise DrillError(f"no requests under {js['root_selector']!r}")
                # Each column is a field of RequestSummary (api.proto); one without presence
                # is in every request, an optional one only where it is known (absent else).
                fields = api_fields(self.src, "RequestSummary")
                unknown = [c for c in js["columns"] if c not in fields]
                if unknown:
                    raise DrillError(f"the panel's columns {unknown} are not fields of "
                                     "RequestSummary in proto/trainscope/sidecar/v1/api.proto")
                missing = [c for c in js["columns"] if not fields[c] and c not in items[0]]
                if missing:
                    raise DrillError(f"the requests lack the panel's columns {missing}")
                if not all(i.get("trace_id") for i in items):
                    raise DrillError("requests without a trace_id (the panel links by it)")
                entry["result"] = f"{len(items)} requests"
                if url.endswith("/slow") and not any(i.get("ps") in ("ps:0", "ps:2")
                                                     for i in items):
                    raise DrillError("no request of the ps slowed on purpose (ps:0, ps:2): "
                                     f"{sorted({i.get('ps') for i in items})}")
                if url.endswith("/slow"):
                    self.slow_traces = items[:5]
            except urllib.error.HTTPError as e:
                entry["result"] = f"HTTP {e.code}"
                self.failures.append(f"panel {js['title']}: {url} answers {e.code}")
            except (OSError, ValueError, DrillError) as e:
                entry["result"] = f"error: {e}"
                self.failures.append(f"panel {js['title']}: {url}: {e}")
        log("JSON panels: " + "; ".join(f"{e['panel']}: {e.get('result')}"
                                         for e in self.json_panels))

    # ---------------------------------------------------------------- the run

    def run(self):
        self.preflight()
        if not self.has_metrics_port:
            self.notes.append("linear_regression has no --metrics_port yet: tasks cannot be "
                              "scraped, RPC/ps/training alerts and panels cannot pass")
        for attr in ("am_port", "prom_port", "webhook_port"):
            setattr(self, attr, free_port())
        self.cluster = DrillCluster(self.bin, self.dir, self.am_port, self.has_metrics_port)
        self.sidecar_port = self.cluster.http_ports["n1"]  # the configs name it
        self.render_configs()
        self.start_monitoring()
        self.should_run = {"ps:0", "ps:1", "worker:0", "worker:1"}
        self.start_sidecar()
        for name in ("ps:0", "ps:1"):
            self.start_task(name)
        self.ps0_started_at = time.time()
        for name in ("worker:0", "worker:1"):
            self.start_task(name)
        self.workers_started_at = time.time()
        wanted = [s.strip() for s in self.args.scenarios.split(",")] if self.args.scenarios \
            else None
        scenarios = [
            ("ps-never-starts", self.scenario_blocked),
            ("ps-memory-near-budget", self.scenario_memory),
            ("kill-9-worker", self.scenario_kill_worker),
            ("sigstop-ps", self.scenario_stop_ps),
            ("slow-ps", self.scenario_slow_ps),
            ("ps-past-deadline", self.scenario_deadline),
            ("crash-loop", self.scenario_restarts),
            ("ps-kill-restore", self.scenario_ps_kill_restore),
            ("sidecar-down", self.scenario_sidecar_down),
        ]
        if wanted is None or "ps-never-starts" in wanted:
            scenarios[0][1]()
        else:
            self.start_task("ps:2")
            self.should_run.add("ps:2")
        json_checked = False
        for name, fn in scenarios[1:]:
            if wanted is not None and name not in wanted:
                continue
            if name == "sidecar-down" and not self.args.skip_queries:
                self.check_json_panels()
                json_checked = True
            try:
                self.wait_healthy()
            except DrillError as e:
                self.failures.append(f"before {name}: {e}")
                log(f"FAILED before {name}: {e}")
                break
            fn()
        if wanted is None:
            ps_restore.finish_job(self, HELPERS)
            self.check_no_false_alarms()
        if not self.args.skip_queries:
            if not json_checked:
                self.check_json_panels()
            self.run_panel_queries()

    # Alerts that are right to fire as a consequence of a scenario, besides the one it expects.
    CONSEQUENCES = {
        ("TrainscopeTaskBlocked", "worker", "1"): "ps-never-starts: both workers wait for ps:2",
        ("TrainscopePsLatencyHigh", "ps", "0"): "ps-past-deadline: ps:0 is 1.5 s slow",
        ("TrainscopePsSlow", "ps", "0"): "ps-past-deadline: ps:0 is 1.5 s slow by its own figures",
        # While ps:1 is stopped the workers' calls to it time out for real; the rate stays high
        # for a while after SIGCONT, when the hung alert no longer inhibits it.
        ("TrainscopeDeadlineExceededRateHigh", "ps", "1"):
            "sigstop-ps: calls to the stopped ps:1 exceeded their deadline",
        ("TrainscopePsLatencyHigh", "ps", "1"): "sigstop-ps: calls to the stopped ps:1 were slow",
        # The workers wait on the stopped ps:1 (inhibited while its alert fires; may outlive it).
        ("TrainscopeTaskStalled", "worker", "0"): "sigstop-ps: worker:0 waits on the stopped ps:1",
        ("TrainscopeTaskStalled", "worker", "1"): "sigstop-ps: worker:1 waits on the stopped ps:1",
        ("TrainscopeTaskBlocked", "worker", "0"): "sigstop-ps: worker:0 waits on the stopped ps:1",
        ("TrainscopeTaskBlocked", "worker", "1"): "sigstop-ps: worker:1 waits on the stopped ps:1",
        # Killed and restarted 1 s later: the sidecar may see the process gone and page first-hand
        # before the new one answers (resolved when it does).
        ("TrainscopeTaskDead", "ps", "1"): "ps-kill-restore: ps:1 was dead until restarted",
    }

    def check_no_false_alarms(self):
        """Every alert that reached the webhook is one a scenario caused."""
        expected = {(r["alert"], r["labels"].get("role"), r["labels"].get("task"))
                    for r in self.results}
        unexpected = set()
        for _, a in self.notifications(0):
            lab = a.get("labels", {})
            key = (lab.get("alertname"), lab.get("role"), lab.get("task"))
            if key not in expected and key not in self.CONSEQUENCES:
                unexpected.add(key)
        for alertname, role, task in sorted(unexpected, key=str):
            self.failures.append(f"unexpected alert (a false alarm?): {alertname} "
                                 f"{role}:{task}")

    def stop_all(self):
        # Workers first (they would log their ps leaving), then the ps, then the rest.
        if self.cluster:
            self.cluster.c.destroy(first=("worker", "ps"))

    def report(self):
        rep = {"ok": not self.failures, "failures": self.failures, "notes": self.notes,
               "intervals": INTERVALS,
               "rule_overrides": [{"alert": a, "change": why} for a, _, _, why in RULE_OVERRIDES],
               "scenarios": self.results,
               "panel_queries": getattr(self, "query_results", []),
               "dashboard_variables": getattr(self, "dashboard_variables", {}),
               "json_panels": getattr(self, "json_panels", []),
               "slow_requests_sample": getattr(self, "slow_traces", []),
               "duration_s": round(time.time() - self.start_time, 1)}
        with open(os.path.join(self.dir, "report.json"), "w") as f:
            json.dump(rep, f, indent=1)
        lines = ["| scenario | alert (task) | sidecar state | Prometheus firing | webhook "
                 "firing (sent by) | webhook resolved after undo |",
                 "| --- | --- | --- | --- | --- | --- |"]
        for r in self.results:
            who = f"{r['labels'].get('role', r['labels'].get('instance', ''))}"
            if "task" in r["labels"]:
                who += f":{r['labels']['task']}"
            if "peer_task" in r["labels"]:
                who += f" -> {r['labels']['peer_role']}:{r['labels']['peer_task']}"

            def fmt(key):
                v = r.get(key)
                return f"{v:.1f} s" if isinstance(v, (int, float)) else (v or "-")
            lines.append(f"| {r['scenario']} | {r['alert']} ({who}) | {fmt('sidecar_state_s')} "
                         f"| {fmt('prometheus_firing_s')} | {fmt('webhook_firing_s')} "
                         f"({r.get('sent_by', '-')}) | "
                         f"{fmt('webhook_resolved_s') if r.get('ok') else 'FAILED'} |")
        md = "\n".join(lines) + "\n"
        for r in self.results:
            if r["scenario"] == "ps-kill-restore":
                md += f"\nps-kill-restore: {ps_restore.summary(r)}\n"
        with open(os.path.join(self.dir, "report.md"), "w") as f:
            f.write(md)
        print(md)
        for n in self.notes:
            log(f"note: {n}")
        return rep


# What ps_restore.py needs of this module (passed, not imported: this file runs as __main__).
HELPERS = argparse.Namespace(wait_for=wait_for, DrillError=DrillError, log=log)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", required=True, help="folder with linear_regression, "
                                                 "trainscope-sidecar, trainscopectl")
    ap.add_argument("--src", required=True, help="the source tree (dashboards/ and docs)")
    ap.add_argument("--out", help="folder for configs, data, logs and the report")
    ap.add_argument("--scenarios", help="comma-separated subset (default: all)")
    ap.add_argument("--skip_queries", action="store_true", help="do not run the panel queries")
    ap.add_argument("--keep", action="store_true", help="keep the folder even when passing")
    args = ap.parse_args()
    drill = Drill(args)
    log(f"working in {drill.dir}")

    def on_signal(signum, frame):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, on_signal)
    try:
        drill.run()
    except DrillError as e:
        drill.failures.append(str(e))
        log(f"FAILED: {e}")
    except KeyboardInterrupt:
        drill.failures.append("interrupted")
    except Exception as e:  # noqa: BLE001 (a bug in the drill: still stop everything, report)
        import traceback
        traceback.print_exc()
        drill.failures.append(f"drill error: {e!r}")
    finally:
        drill.stop_all()
    rep = drill.report()
    if drill.failures:
        log("failures:\n  " + "\n  ".join(drill.failures))
        for p in drill.cluster.c.procs if drill.cluster else []:
            if p.name in ("sidecar:n1", "prometheus", "alertmanager") or p.name in drill.tasks:
                log(f"--- last lines of {p.name} ({p.log_path}):\n{p.tail(8)}")
        log(f"everything is in {drill.dir}")
        return 1
    log(f"PASSED in {rep['duration_s']} s")
    if not args.keep and not args.out:
        shutil.rmtree(drill.dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
