#!/usr/bin/python3
"""The dashboards under scrape jobs named otherwise: every panel query returns data.

A user's own scrape config calls the jobs `trainscope-sidecar` and `trainscope-tasks-static`
(not the shipped `trainscope-sidecars` and `trainscope-tasks`). On a real cluster
(local_cluster.py: linear_regression tasks and a trainscope-sidecar on loopback, exercised so
that every panel has something to show) and a real Prometheus (Debian's, the shipped
prometheus.yml and alerts.yml rendered with those job names by monitoring.py), the dashboards'
variables are resolved as Grafana would (the job variables find the jobs by metric name) and
every panel query must return data; only GPU panels may be empty, on a machine without a GPU.

Usage: job_names_test.py --bin BUILD/bin --src SOURCE_DIR [--out DIR]
Exit 0 when every check passed. Standard library only.
"""

import os
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree

from fire_drill import has_gpu, log, wait_for  # the drill's log and polling
from local_cluster import LocalCluster, prom_query, test_main
from trainscope_testing import dashboards, monitoring
from trainscope_testing.ports import free_port
from trainscope_testing.web import http_get

JOBS = {"trainscope-sidecars": "trainscope-sidecar", "trainscope-tasks": "trainscope-tasks-static"}


def run(args, work, failures):
    src = os.path.abspath(args.src)
    check_dashboards = dashboards.check_dashboards(src)
    cluster = LocalCluster(args.bin, work)
    try:
        sidecar, = cluster.start_sidecars().values()
        promtool = monitoring.tool("promtool", "prometheus")
        rules = os.path.join(work, "alerts.yml")
        monitoring.render_rules(src, rules, promtool)
        config = os.path.join(work, "prometheus.yml")
        monitoring.render_prometheus(src, config, promtool, [sidecar], rules,
                                     f"127.0.0.1:{free_port()}", "1s", jobs=JOBS)
        port = free_port()
        cluster.add("prometheus", monitoring.argv_prometheus(
            monitoring.tool("prometheus", "prometheus"), config, os.path.join(work, "data"),
            port))
        prom = f"http://127.0.0.1:{port}"
        wait_for("Prometheus ready", lambda: http_get(f"{prom}/-/ready")[0] == 200, 30)
        wait_for("the sidecar scraped", lambda: prom_query(prom, "up == 1"), 30, interval=0.2)
        start = time.time()
        cluster.exercise(prom=prom)
        end = time.time()
        fixed = {"__rate_interval": "4s", "__interval": "2s", "__range": f"{int(end - start)}s"}
        entries, problems, variables = check_dashboards.run_queries(
            prom, src, start, end, fixed, has_gpu=has_gpu())
        failures += problems
        for uid, values in sorted(variables.items()):
            for var, job in (("sidecar_job", JOBS["trainscope-sidecars"]),
                             ("job", JOBS["trainscope-tasks"])):
                want = check_dashboards._regex_escape(job)
                if values.get(var) != want:
                    failures.append(f"{uid}: variable {var} = {values.get(var)!r}, want {want!r} "
                                    "(the job found by metric name)")
        ok = sum(1 for e in entries if e["result"] == "data")
        log(f"jobs {sorted(JOBS.values())}: {ok} of {len(entries)} panel queries returned data; "
            f"{sum(1 for e in entries if e['result'].startswith('empty'))} allowed empty")
    finally:
        cluster.stop_all()


def main():
    return test_main(__doc__, run, "job-names-")

if __name__ == "__main__":
    sys.exit(main())
