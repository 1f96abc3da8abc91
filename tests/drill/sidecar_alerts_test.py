#!/usr/bin/python3
"""First-hand alerts: the sidecar pages through Alertmanager by itself, within seconds.

A cluster on loopback (local_cluster.py: ps:0, ps:1, worker:0, worker:1) watched by one sidecar
started with --alertmanager_url pointing at a real Alertmanager (the shipped config, group_wait
1 s, delivering to webhook_receiver.py) AND at two that do not answer (a closed port, and an
address nobody routes to); a real Prometheus with the shipped rules (as shipped: no shortened
thresholds) scrapes it and sends to the same Alertmanager. Checks, in order:

  1. no fault, nothing pages (10 s with every task up);
  2. kill -9 worker:1: TrainscopeTaskDead with exactly {alertname, cluster, role, task,
     severity, incident} reaches the webhook, posted by the sidecar (its generatorURL), long
     before the rule's `for:` could fire, and `incident` is the id of the sidecar's incident
     with worker:1 as its cause; once Prometheus fires too (the rule joins the same id from
     trainscope_task_incident), Alertmanager holds ONE such alert (same labels, same
     fingerprint) in one group, and the webhook saw one group for it;
  3. worker:1 restarted: the alert resolves at the webhook;
  4. SIGSTOP ps:1: TrainscopeTaskHung from the sidecar; SIGCONT: resolved;
  5. worker:0 finishes (SIGUSR1, its state `done`; SIGTERM would be leaving): nothing pages about it;
  6. the unreachable Alertmanagers changed nothing: the posts to them are counted as failed
     (trainscope_sidecar_alerts_sent_total{status="failed"}), each is logged once, the sidecar
     answers throughout and stops within 2 s of SIGTERM.

The fault-to-webhook times are printed (not asserted: machines are noisy). Standard library.
"""

import json
import os
import re
import signal
import sys
import time
import urllib.parse

sys.dont_write_bytecode = True  # no __pycache__ in the source tree

from fire_drill import log, wait_for  # the drill's log and polling
from local_cluster import CLUSTER, LocalCluster, prom_query, test_main
from trainscope_testing import monitoring
from trainscope_testing.ports import free_port
from trainscope_testing.web import http_get, http_json

HERE = os.path.dirname(os.path.abspath(__file__))
# The rules' labels, and the incident that holds the task (the sidecar's and the rule's alike).
CONTRACT = {"alertname", "cluster", "role", "task", "severity", "incident"}
# Nobody answers here (TEST-NET-1, RFC 5737): a connect that hangs or fails at once.
BLACKHOLE = "http://192.0.2.1:9093"


class Webhook:
    def __init__(self, path):
        self.path = path

    def alerts(self, since=0):
        """(received, group_key, alert) of every alert in every notification since `since`."""
        out = []
        if not os.path.exists(self.path):
            return out
        with open(self.path) as f:
            for line in f:
                rec = json.loads(line)
                if rec["received"] >= since:
                    for a in rec["payload"].get("alerts", []):
                        out.append((rec["received"], rec["payload"].get("groupKey"), a))
        return out

    def find(self, since, alertname, labels, status):
        for received, _, a in self.alerts(since):
            lab = a.get("labels", {})
            if (lab.get("alertname") == alertname and a.get("status") == status
                    and all(lab.get(k) == v for k, v in labels.items())):
                return received, a
        return None


def start_monitoring(args, work, cluster, sidecar_port, am_port, webhook_port):
    promtool = monitoring.tool("promtool", "prometheus")
    rules = os.path.join(work, "alerts.yml")
    monitoring.render_rules(args.src, rules, promtool, overrides=[])
    prom_cfg = os.path.join(work, "prometheus.yml")
    prom_port = free_port()
    monitoring.render_prometheus(args.src, prom_cfg, promtool, [f"127.0.0.1:{sidecar_port}"],
                                 rules, f"127.0.0.1:{am_port}")
    am_cfg = os.path.join(work, "alertmanager.yml")
    monitoring.render_alertmanager(args.src, am_cfg, f"http://127.0.0.1:{webhook_port}/alerts")
    hook = os.path.join(work, "webhook.jsonl")
    cluster.add("webhook", [sys.executable, os.path.join(HERE, "webhook_receiver.py"),
                            "--port", str(webhook_port), "--out", hook])
    cluster.add("alertmanager", monitoring.argv_alertmanager(
        monitoring.tool("prometheus-alertmanager", "prometheus-alertmanager"), am_cfg,
        os.path.join(work, "am-data"), am_port))
    cluster.add("prometheus", monitoring.argv_prometheus(
        monitoring.tool("prometheus", "prometheus"), prom_cfg, os.path.join(work, "prom-data"),
        prom_port))
    for url in (f"http://127.0.0.1:{am_port}/-/ready", f"http://127.0.0.1:{prom_port}/-/ready",
                f"http://127.0.0.1:{webhook_port}/"):
        wait_for(url, lambda: http_get(url)[0] == 200, 30)
    return Webhook(hook), f"http://127.0.0.1:{prom_port}"


def metric(sidecar, name, labels=""):
    _, body = http_get(f"http://{sidecar}/metrics")
    m = re.search(rf"^{re.escape(name)}{re.escape(labels)} ([0-9.e+]+)$", body.decode(), re.M)
    return float(m.group(1)) if m else None


def expect_page(hook, t0, alertname, labels, sidecar_url, failures, timeout=30):
    """Waits for the firing notification; checks its labels and sender. Seconds from t0."""
    hit = wait_for(f"{alertname} {labels} at the webhook",
                   lambda: hook.find(t0, alertname, labels, "firing"), timeout, interval=0.05)
    received, alert = hit
    lab = alert["labels"]
    if set(lab) != CONTRACT:
        failures.append(f"{alertname}: labels {sorted(lab)}, want exactly {sorted(CONTRACT)}")
    if not alert.get("generatorURL", "").startswith(sidecar_url):
        failures.append(f"{alertname}: first notification sent by {alert.get('generatorURL')}, "
                        f"not the sidecar {sidecar_url}")
    if "The sidecar" not in alert["annotations"].get("description", ""):
        failures.append(f"{alertname}: description lacks the sidecar's reason: "
                        f"{alert['annotations']}")
    log(f"  {alertname} {labels['role']}:{labels['task']} at the webhook {received - t0:.2f} s "
        f"after the fault: {alert['annotations'].get('summary')} (incident "
        f"{lab.get('incident')})")
    return received - t0, lab.get("incident")


def incident_of(sidecar, task):
    """The id of the sidecar's open incident with `task` as its cause, or None."""
    listed = http_json(f"http://{sidecar}/api/v1/incidents").get("incidents", [])
    return next((i["id"] for i in listed if i.get("open")
                 and i.get("cause", {}).get("task") == task), None)


def check_one_alert(am, prom, labels, failures):
    """With Prometheus firing too, Alertmanager holds one alert with these labels."""
    sel = ",".join(f'{k}="{v}"' for k, v in labels.items())
    wait_for("TrainscopeTaskDead firing in Prometheus too", lambda: prom_query(
        prom, f'ALERTS{{alertstate="firing",{sel}}}'), 40, interval=0.5)
    time.sleep(2)  # Prometheus's post reaches Alertmanager
    q = urllib.parse.urlencode([("filter", f'{k}="{v}"') for k, v in labels.items()])
    alerts = http_json(f"{am}/api/v2/alerts?{q}")
    groups = [g for g in http_json(f"{am}/api/v2/alerts/groups?{q}") if g.get("alerts")]
    if len(alerts) != 1 or len(groups) != 1:
        failures.append(f"Alertmanager holds {len(alerts)} alerts in {len(groups)} groups for "
                        f"{labels} with both senders firing; want 1 in 1: {alerts}")
    else:
        log(f"  one alert in Alertmanager with both senders (fingerprint "
            f"{alerts[0]['fingerprint']}, latest from {alerts[0].get('generatorURL')})")


def run(args, work, failures):
    am_port, webhook_port, closed_port = free_port(), free_port(), free_port()
    am = f"http://127.0.0.1:{am_port}"
    cluster = LocalCluster(args.bin, work, num_ps=2, num_workers=2, sidecar_args=[
        "--alertmanager_url", f"127.0.0.1:{am_port},127.0.0.1:{closed_port}",
        "--alertmanager_url", BLACKHOLE])
    try:
        # The sidecar first (Prometheus's config names it), then the monitoring, then tasks.
        sidecar, = cluster.start_sidecars().values()
        sidecar_url = f"http://{sidecar}/"
        hook, prom = start_monitoring(args, work, cluster, sidecar.split(":")[1], am_port,
                                      webhook_port)
        for name in ("ps:0", "ps:1", "worker:0", "worker:1"):
            cluster.start_task(name)
        cluster.wait_all_up()

        log("1. no fault for 10 s: nothing may page")
        quiet_from = time.time()
        time.sleep(10)
        if hook.alerts(quiet_from):
            failures.append(f"a no-fault run paged: {hook.alerts(quiet_from)}")

        log("2. kill -9 worker:1: TrainscopeTaskDead from the sidecar")
        dead = {"cluster": CLUSTER, "role": "worker", "task": "1"}
        t0 = time.time()
        cluster.kill("worker:1")
        times = {}
        times["dead"], incident = expect_page(hook, t0, "TrainscopeTaskDead", dead, sidecar_url,
                                              failures)
        if incident != incident_of(sidecar, "worker:1"):
            failures.append(f"the page names incident {incident}; the sidecar's incident of "
                            f"worker:1 is {incident_of(sidecar, 'worker:1')}")
        check_one_alert(am, prom, dict(dead, alertname="TrainscopeTaskDead", incident=incident),
                        failures)

        log("3. worker:1 restarted: resolved")
        t_undo = time.time()
        cluster.start_task("worker:1")
        hit = wait_for("resolved TrainscopeTaskDead", lambda: hook.find(
            t_undo, "TrainscopeTaskDead", dead, "resolved"), 60, interval=0.1)
        log(f"  resolved at the webhook {hit[0] - t_undo:.2f} s after the restart")
        groups = {g for _, g, a in hook.alerts(t0)
                  if a["labels"].get("alertname") == "TrainscopeTaskDead"}
        if len(groups) != 1:
            failures.append(f"TrainscopeTaskDead reached the webhook in {len(groups)} groups "
                            f"(two senders not merged?): {groups}")
        cluster.wait_state("worker:1", "up", 60)

        log("4. SIGSTOP ps:1: TrainscopeTaskHung from the sidecar; SIGCONT: resolved")
        hung = {"cluster": CLUSTER, "role": "ps", "task": "1"}
        t0 = time.time()
        cluster.kill("ps:1", signal.SIGSTOP)
        times["hung"], _ = expect_page(hook, t0, "TrainscopeTaskHung", hung, sidecar_url,
                                       failures)
        t_undo = time.time()
        cluster.kill("ps:1", signal.SIGCONT)
        hit = wait_for("resolved TrainscopeTaskHung", lambda: hook.find(
            t_undo, "TrainscopeTaskHung", hung, "resolved"), 60, interval=0.1)
        log(f"  resolved at the webhook {hit[0] - t_undo:.2f} s after SIGCONT")
        cluster.wait_state("ps:1", "up", 60)

        log("5. worker:0 finishes (SIGUSR1): done, and nothing pages about it")
        t_done = time.time()
        cluster.kill("worker:0", signal.SIGUSR1)
        cluster.wait_state("worker:0", "done", 30)
        time.sleep(8)
        about = [a for _, _, a in hook.alerts(t_done) if a["labels"].get("role") == "worker"
                 and a["labels"].get("task") == "0"]
        if about:
            failures.append(f"a finished worker paged: {about}")

        log("6. the unreachable Alertmanagers changed nothing")
        failed = metric(sidecar, "trainscope_sidecar_alerts_sent_total", '{status="failed"}')
        ok = metric(sidecar, "trainscope_sidecar_alerts_sent_total", '{status="ok"}')
        if not failed or not ok:
            failures.append(f"alerts_sent_total: ok {ok}, failed {failed}; want both > 0")
        side = cluster.sidecars["n1"]
        with open(side.log_path, errors="replace") as f:
            text = f.read()
        for url in (f"http://127.0.0.1:{closed_port}", BLACKHOLE):
            n = text.count(f"cannot post alerts to {url}:")
            if n != 1:
                failures.append(f"the failure to post to {url} was logged {n} times, want once")
        t_stop = time.time()
        side.popen.send_signal(signal.SIGTERM)
        side.popen.wait(10)
        stop_s = time.time() - t_stop
        if stop_s > 2:
            failures.append(f"the sidecar took {stop_s:.1f} s to stop (unreachable "
                            "Alertmanagers must not hold it)")
        log(f"fault to webhook: dead {times['dead']:.2f} s, hung {times['hung']:.2f} s; posts: "
            f"{ok:.0f} ok, {failed:.0f} failed; sidecar stopped in {stop_s:.2f} s")
        with open(os.path.join(work, "times.json"), "w") as f:
            json.dump(times, f)
    finally:
        cluster.stop_all()


if __name__ == "__main__":
    sys.exit(test_main(__doc__, run, "sidecar-alerts-"))
