#!/usr/bin/python3
"""The scale-out path: Prometheus agents per group of nodes, remote_write to one store.

A real cluster (local_cluster.py) of two nodes' worth of tasks on loopback: ps:0 and worker:0
watched by sidecar A, ps:1 and worker:1 by sidecar B (each receiving its own tasks' spans). Two
Prometheus agents (Debian's 2.42, --enable-feature=agent), each with the shipped
dashboards/prometheus/scale-out/agent.yml for its group (its sidecar, its node's tasks through
/api/v1/sd?local=1), write to one Prometheus with --web.enable-remote-write-receiver and the
shipped scale-out/store.yml (alerts.yml). On the store, every dashboard panel query must return
data (GPU panels excepted without a GPU); then worker:1 is killed with kill -9 and
TrainscopeTaskDead must fire on the store for it, through agent B. The times from the kill to
the sidecar's state and to the firing alert are printed.

Usage: scale_out_test.py --bin BUILD/bin --src SOURCE_DIR [--out DIR]
Exit 0 when every check passed. Standard library only.
"""

import os
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree

from fire_drill import has_gpu, log, wait_for  # the drill's log and polling
from local_cluster import CLUSTER, LocalCluster, prom_query, test_main
from trainscope_testing import dashboards, monitoring
from trainscope_testing.ports import free_port
from trainscope_testing.web import http_get, http_json

GROUPS = {"a": ["ps:0", "worker:0"], "b": ["ps:1", "worker:1"]}


def start_store(cluster, src, work, promtool):
    rules = os.path.join(work, "alerts.yml")
    monitoring.render_rules(src, rules, promtool)
    config = os.path.join(work, "store.yml")
    monitoring.render_store(src, config, promtool, rules, f"127.0.0.1:{free_port()}")
    port = free_port()
    cluster.add("store", monitoring.argv_prometheus(
        monitoring.tool("prometheus", "prometheus"), config, os.path.join(work, "store-data"),
        port) + ["--web.enable-remote-write-receiver"])
    store = f"127.0.0.1:{port}"
    wait_for("the store ready", lambda: http_get(f"http://{store}/-/ready")[0] == 200, 30)
    return store


def start_agent(cluster, src, work, promtool, group, sidecar, store):
    config = os.path.join(work, f"agent-{group}.yml")
    monitoring.render_agent(src, config, promtool, [sidecar], store)
    port = free_port()
    cluster.add(f"agent-{group}", monitoring.argv_prometheus_agent(
        monitoring.tool("prometheus", "prometheus"), config,
        os.path.join(work, f"agent-{group}-data"), port))
    wait_for(f"agent {group} ready",
             lambda: http_get(f"http://127.0.0.1:{port}/-/ready")[0] == 200, 30)
    return f"http://127.0.0.1:{port}"


def check_halves(cluster, agents, failures):
    """Each agent scrapes its group's sidecar and tasks, and nothing of the other group."""
    for g, agent in agents.items():
        body = http_json(f"{agent}/api/v1/targets?state=active")
        got = sorted(t["labels"].get("role", "sidecar") + ":" + t["labels"].get("task", "")
                     for t in body["data"]["activeTargets"])
        want = sorted(["sidecar:"] + GROUPS[g])
        if got != want:
            failures.append(f"agent {g} scrapes {got}, want {want}")


def kill_worker(cluster, store, failures):
    """kill -9 worker:1; TrainscopeTaskDead must fire on the store."""
    sel = (f'ALERTS{{alertname="TrainscopeTaskDead", alertstate="firing", cluster="{CLUSTER}", '
           'role="worker", task="1"}')
    t0 = time.time()
    cluster.kill("worker:1")
    t_state = None
    deadline = t0 + 90
    while time.time() < deadline:
        if t_state is None and cluster.states().get("worker:1") == "dead":
            t_state = time.time() - t0
        if prom_query(store, sel):
            log(f"kill -9 worker:1: sidecar says dead after {t_state or 0:.1f} s; "
                f"TrainscopeTaskDead firing on the store after {time.time() - t0:.1f} s")
            return
        time.sleep(0.2)
    firing = prom_query(store, 'ALERTS{alertstate="firing"}')
    failures.append("TrainscopeTaskDead for worker:1 did not fire on the store within 90 s; "
                    f"firing: {[a['metric'] for a in firing]}")


def run(args, work, failures):
    src = os.path.abspath(args.src)
    check_dashboards = dashboards.check_dashboards(src)
    promtool = monitoring.tool("promtool", "prometheus")
    cluster = LocalCluster(args.bin, work, groups=list(GROUPS.values()))
    try:
        sidecars = dict(zip(GROUPS, cluster.start_sidecars().values()))
        store = start_store(cluster, src, work, promtool)
        agents = {g: start_agent(cluster, src, work, promtool, g, sidecar, store)
                  for g, sidecar in sidecars.items()}
        prom = f"http://{store}"
        wait_for("both sidecars on the store", lambda: len(prom_query(
            prom, "trainscope_sidecar_watched_tasks")) == 2, 60, interval=0.5)
        start = time.time()
        cluster.exercise(settle_s=12)  # remote write sends every 5 s at most
        wait_for("every task's series on the store", lambda: len(prom_query(
            prom, f'trainscope_task_info{{cluster="{CLUSTER}"}}')) == len(cluster.task_node), 30,
            interval=0.5)
        end = time.time()
        check_halves(cluster, agents, failures)
        fixed = {"__rate_interval": "4s", "__interval": "2s", "__range": f"{int(end - start)}s"}
        entries, problems, _ = check_dashboards.run_queries(prom, src, start, end, fixed,
                                                            has_gpu=has_gpu())
        failures += problems
        ok = sum(1 for e in entries if e["result"] == "data")
        log(f"on the store: {ok} of {len(entries)} panel queries returned data; "
            f"{sum(1 for e in entries if e['result'].startswith('empty'))} allowed empty")
        kill_worker(cluster, prom, failures)
    finally:
        cluster.stop_all()


def main():
    return test_main(__doc__, run, "scale-out-")

if __name__ == "__main__":
    sys.exit(main())
