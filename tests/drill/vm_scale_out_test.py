#!/usr/bin/python3
"""The scale-out path on VictoriaMetrics: a vmagent per group of nodes, one store, vmalert.

The cluster of scale_out_test.py (local_cluster.py on loopback: ps:0 and worker:0 watched by
sidecar A, ps:1 and worker:1 by sidecar B), monitored by Debian's VictoriaMetrics (1.79): two
vmagents, each reading the shipped dashboards/prometheus/scale-out/agent.yml rendered for its
group (its sidecar, its node's tasks through /api/v1/sd?local=1) and writing to one
single-node victoria-metrics; vmalert evaluates the shipped alerts.yml on that store, writes
ALERTS back to it and notifies webhook_receiver.py (as it would Alertmanager). vmagent skips
three fields of agent.yml, which are flags here, and vmalert 1.79 refuses keep_firing_for
(monitoring.py: VMAGENT_SKIPPED_FIELDS, render_vmalert_rules); the test fails when agent.yml
gains another field vmagent would skip. On the store, every dashboard panel query must return
data (GPU panels excepted without a GPU); then worker:1 is killed with kill -9 and
TrainscopeTaskDead must fire for it: in vmalert, as ALERTS on the store, and at the notifier.
The times from the kill to each are printed.

Usage: vm_scale_out_test.py --bin BUILD/bin --src SOURCE_DIR [--out DIR]
Exit 0 when every check passed, 77 (skipped) without victoria-metrics, vmagent or vmalert
(apt-get install victoria-metrics), 1 then under CI=true (trainscope_testing.skips). Standard
library only.
"""

import json
import os
import shutil
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree

from fire_drill import has_gpu, log, wait_for  # the drill's log and polling
from local_cluster import CLUSTER, LocalCluster, prom_query, test_main
from trainscope_testing import dashboards, monitoring, skips
from trainscope_testing.ports import free_port
from trainscope_testing.web import http_get, http_json

HERE = os.path.dirname(os.path.abspath(__file__))
GROUPS = {"a": ["ps:0", "worker:0"], "b": ["ps:1", "worker:1"]}
VM_TOOLS = ("victoria-metrics", "vmagent", "vmalert")
# From the kill to each sign of the alert; they take 12-25 s (new series on the store lag).
KILL_TIMEOUT_S = 60


def healthy(url):
    return lambda: http_get(f"{url}/health")[0] == 200


def start_store(cluster, work):
    port = free_port()
    cluster.add("store", monitoring.argv_victoria_metrics(
        shutil.which("victoria-metrics"), os.path.join(work, "store-data"), port))
    store = f"127.0.0.1:{port}"
    wait_for("the store ready", healthy(f"http://{store}"), 30)
    return store


def start_agent(cluster, src, work, promtool, group, sidecar, store):
    config = os.path.join(work, f"agent-{group}.yml")
    monitoring.render_agent(src, config, promtool, [sidecar], store)
    vmagent = shutil.which("vmagent")
    monitoring.check_vmagent_config(vmagent, config)
    port = free_port()
    cluster.add(f"agent-{group}", monitoring.argv_vmagent(
        vmagent, config, os.path.join(work, f"agent-{group}-data"), port, store))
    agent = f"http://127.0.0.1:{port}"
    wait_for(f"agent {group} ready", healthy(agent), 30)
    return agent


def start_vmalert(cluster, src, work, promtool, store):
    """vmalert on the store, notifying a webhook receiver; (vmalert's url, the receiver's
    file of notifications)."""
    rules = os.path.join(work, "alerts.yml")
    vmalert = shutil.which("vmalert")
    monitoring.render_vmalert_rules(src, rules, promtool, vmalert)
    notified = os.path.join(work, "notifications.jsonl")
    hook = free_port()
    cluster.add("webhook", [sys.executable, os.path.join(HERE, "webhook_receiver.py"),
                            "--port", str(hook), "--out", notified])
    wait_for("the webhook receiver", lambda: http_get(f"http://127.0.0.1:{hook}/")[0] == 200,
             20)
    port = free_port()
    cluster.add("vmalert", monitoring.argv_vmalert(vmalert, rules, port, store,
                                                   f"http://127.0.0.1:{hook}"))
    url = f"http://127.0.0.1:{port}"
    wait_for("vmalert ready", healthy(url), 30)
    return url, notified


def check_halves(agents, failures):
    """Each agent scrapes its group's sidecar and tasks, and nothing of the other group."""
    for g, agent in agents.items():
        body = http_json(f"{agent}/api/v1/targets?state=active")
        got = sorted(t["labels"].get("role", "sidecar") + ":" + t["labels"].get("task", "")
                     for t in body["data"]["activeTargets"])
        want = sorted(["sidecar:"] + GROUPS[g])
        if got != want:
            failures.append(f"agent {g} scrapes {got}, want {want}")


def dead_alert(labels):
    return (labels.get("alertname") == "TrainscopeTaskDead" and labels.get("cluster") == CLUSTER
            and labels.get("role") == "worker" and labels.get("task") == "1")


def firing_in_vmalert(vmalert):
    alerts = http_json(f"{vmalert}/api/v1/alerts")["data"]["alerts"] or []  # null when none
    return any(dead_alert(a["labels"]) and a["state"] == "firing" for a in alerts)


def notified(path):
    """The alerts vmalert has sent to the notifier so far (webhook_receiver.py's file)."""
    if not os.path.exists(path):
        return []
    with open(path) as f:
        lines = [json.loads(line) for line in f if line.strip()]
    return [a for line in lines if isinstance(line["payload"], list) for a in line["payload"]]


def kill_worker(cluster, store, vmalert, notifications, failures):
    """kill -9 worker:1; TrainscopeTaskDead must fire in vmalert, on the store (ALERTS) and at
    the notifier, there with the labels of the sidecars' own alert (incident included) and no
    more."""
    sel = (f'ALERTS{{alertname="TrainscopeTaskDead", alertstate="firing", cluster="{CLUSTER}", '
           'role="worker", task="1"}')
    checks = {"sidecar says dead": lambda: cluster.states().get("worker:1") == "dead",
              "firing in vmalert": lambda: firing_in_vmalert(vmalert),
              "ALERTS firing on the store": lambda: prom_query(store, sel),
              "notified": lambda: any(dead_alert(a["labels"]) for a in notified(notifications))}
    seen = {}
    t0 = time.time()
    cluster.kill("worker:1")
    while time.time() < t0 + KILL_TIMEOUT_S and len(seen) < len(checks):
        for what, check in checks.items():
            try:
                if what not in seen and check():
                    seen[what] = time.time() - t0
            except OSError:  # a slow answer: asked again on the next round
                pass
        time.sleep(0.2)
    log("kill -9 worker:1: " + "; ".join(f"{w} after {s:.1f} s" for w, s in seen.items()))
    missing = [w for w in checks if w not in seen]
    if missing:
        firing = prom_query(store, 'ALERTS{alertstate="firing"}')
        failures.append(f"TrainscopeTaskDead for worker:1 within {KILL_TIMEOUT_S} s: not "
                        f"{missing}; firing on the store: {[a['metric'] for a in firing]}")
    sent = {tuple(sorted(a["labels"])) for a in notified(notifications) if dead_alert(a["labels"])}
    # The rule's labels, with the incident the sidecar names (joined from
    # trainscope_task_incident) once it is open.
    if sent - {("alertname", "cluster", "role", "severity", "task"),
               ("alertname", "cluster", "incident", "role", "severity", "task")}:
        failures.append(f"TrainscopeTaskDead sent with the labels {sorted(sent)}, not those of "
                        "the sidecars' alert (docs/alerts.md, \"One alert, two senders\")")


def run(args, work, failures):
    src = os.path.abspath(args.src)
    check_dashboards = dashboards.check_dashboards(src)
    promtool = monitoring.tool("promtool", "prometheus")
    cluster = LocalCluster(args.bin, work, groups=list(GROUPS.values()))
    try:
        sidecars = dict(zip(GROUPS, cluster.start_sidecars().values()))
        store = start_store(cluster, work)
        agents = {g: start_agent(cluster, src, work, promtool, g, sidecar, store)
                  for g, sidecar in sidecars.items()}
        vmalert, notifications = start_vmalert(cluster, src, work, promtool, store)
        prom = f"http://{store}"
        wait_for("both sidecars on the store", lambda: len(prom_query(
            prom, "trainscope_sidecar_watched_tasks")) == 2, 60, interval=0.5)
        start = time.time()
        cluster.exercise(settle_s=6)  # vmagent flushes every second
        wait_for("every task's series on the store", lambda: len(prom_query(
            prom, f'trainscope_task_info{{cluster="{CLUSTER}"}}')) == len(cluster.task_node), 30,
            interval=0.5)
        end = time.time()
        check_halves(agents, failures)
        fixed = {"__rate_interval": "4s", "__interval": "2s", "__range": f"{int(end - start)}s"}
        entries, problems, _ = check_dashboards.run_queries(prom, src, start, end, fixed,
                                                            has_gpu=has_gpu())
        failures += problems
        ok = sum(1 for e in entries if e["result"] == "data")
        log(f"on the store: {ok} of {len(entries)} panel queries returned data; "
            f"{sum(1 for e in entries if e['result'].startswith('empty'))} allowed empty")
        kill_worker(cluster, prom, vmalert, notifications, failures)
    finally:
        for p in cluster.c.procs:  # before the store: it would retry its last writes
            if p.name == "vmalert":
                p.stop()
        cluster.stop_all()


def main():
    missing = [t for t in VM_TOOLS if not shutil.which(t)]
    if missing:
        skips.skip("the VictoriaMetrics scale-out test",
                   f"no {', '.join(missing)} (apt-get install victoria-metrics)")
    return test_main(__doc__, run, "vm-scale-out-")


if __name__ == "__main__":
    sys.exit(main())
