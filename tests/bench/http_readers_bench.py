#!/usr/bin/python3
"""Many honest readers of one sidecar (issue 23, part 3): --viewers status pages (each
refreshes every second: /api/v1/tasks, /api/v1/traces/slow and /api/v1/traces/errors, as
sidecar/serve/src/status_page.html does) and --scrapers Prometheus-like scrapers of /metrics at
1 s, each on a keep-alive connection from an address of its own (127.0.0.2, ...), against a
trainscope-sidecar watching --tasks scripted tasks (sidecar_fake_task). Prints the sidecar's CPU
(share of one core) idle and under the readers, its resident memory, and the readers' latency
p50/p99 and failures; before the readers, the latency of --sequential GETs in a row of /healthz
and of /api/v1/tasks by one client alone on one keep-alive connection.

Usage: PYTHONPATH=tests/py /usr/bin/python3 tests/bench/http_readers_bench.py --bin build/bin
[--tasks 64] [--viewers 50] [--scrapers 10] [--seconds 30]. Standard library only.
"""

import argparse
import http.client
import json
import os
import shutil
import socket
import sys
import tempfile
import threading
import time

from trainscope_testing.hostile import memory, percentile
from trainscope_testing.logs import logger
from trainscope_testing.ports import free_port
from trainscope_testing.processes import ProcGroup
from trainscope_testing.waiting import wait_for
from trainscope_testing.web import http_json

log = logger("readers")
PAGE = ["/api/v1/tasks", "/api/v1/traces/slow?limit=20", "/api/v1/traces/errors?limit=10"]


def consecutive_free_ports(n):
    """The first of n consecutive ports free on 127.0.0.1."""
    for base in range(21000, 60000, 97):
        socks = []
        try:
            for port in range(base, base + n):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError(f"no {n} consecutive free ports")


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def reader(port, source, paths, stop, latencies, failures):
    """GETs `paths` once a second on one keep-alive connection until stop is set."""
    conn = None
    while not stop.is_set():
        start = time.monotonic()
        for path in paths:
            t = time.monotonic()
            try:
                if conn is None:
                    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5,
                                                      source_address=(source, 0))
                conn.request("GET", path)
                r = conn.getresponse()
                r.read()
                if r.status != 200:
                    failures.append(f"{path}: {r.status}")
                latencies.append(time.monotonic() - t)
            except (OSError, http.client.HTTPException) as e:
                failures.append(f"{path}: {e}")
                conn = None
        stop.wait(max(0.0, 1.0 - (time.monotonic() - start)))


def alone(port, path, n):
    """p50 and p90 (s) of n GETs of path in a row on one keep-alive connection."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    lat = []
    for _ in range(n):
        t = time.perf_counter()
        conn.request("GET", path)
        conn.getresponse().read()
        lat.append(time.perf_counter() - t)
    conn.close()
    return percentile(lat, 50), percentile(lat, 90)


def run(bin_dir, d, a):
    procs = ProcGroup(d)
    try:
        base = consecutive_free_ports(a.tasks)
        procs.start("tasks", [f"{bin_dir}/sidecar_fake_task", "--port", str(base), "--count",
                              str(a.tasks), "--role", "worker"])
        spec = {"cluster": {"worker": [f"127.0.0.1:{base + i}" for i in range(a.tasks)]}}
        with open(os.path.join(d, "spec.json"), "w") as f:
            json.dump(spec, f)
        http_port = free_port()
        sidecar = procs.start("sidecar", [f"{bin_dir}/trainscope-sidecar", "--cluster_spec",
                                          f"{d}/spec.json", "--http_port", str(http_port),
                                          "--grpc_port", "-1", "--peer_sidecars", "none"])
        url = f"http://127.0.0.1:{http_port}/api/v1/tasks"
        wait_for(f"{a.tasks} tasks up", lambda: sum(
            t.get("state") == "up" for t in http_json(url)["tasks"]) == a.tasks, 60)
        time.sleep(3)
        for path in ("/healthz", "/api/v1/tasks"):
            p50, p90 = alone(http_port, path, a.sequential)
            log(f"one client alone, {a.sequential} GETs of {path} in a row: "
                f"p50 {p50 * 1000:.2f} ms, p90 {p90 * 1000:.2f} ms")
        c0, t0 = cpu_seconds(sidecar.pid), time.monotonic()
        time.sleep(a.seconds / 2)
        idle = (cpu_seconds(sidecar.pid) - c0) / (time.monotonic() - t0)
        stop, threads = threading.Event(), []
        results = {"page": ([], []), "scrape": ([], [])}
        for i in range(a.viewers + a.scrapers):
            kind = "page" if i < a.viewers else "scrape"
            paths = PAGE if kind == "page" else ["/metrics"]
            source = f"127.0.0.{2 + i}"
            threads.append(threading.Thread(target=reader, daemon=True, args=(
                http_port, source, paths, stop, *results[kind])))
        for t in threads:
            t.start()
        time.sleep(2)
        c0, t0 = cpu_seconds(sidecar.pid), time.monotonic()
        time.sleep(a.seconds)
        busy = (cpu_seconds(sidecar.pid) - c0) / (time.monotonic() - t0)
        rss = memory(sidecar.pid)
        stop.set()
        for t in threads:
            t.join(10)
        log(f"sidecar watching {a.tasks} tasks: CPU {idle * 100:.1f}% of a core idle, "
            f"{busy * 100:.1f}% with {a.viewers} page viewers and {a.scrapers} scrapers; {rss}")
        for kind, (lat, fail) in results.items():
            log(f"  {kind}: {len(lat)} requests, p50 {percentile(lat, 50) * 1000:.1f} ms, "
                f"p99 {percentile(lat, 99) * 1000:.1f} ms, {len(fail)} failed"
                + (f" (first: {fail[0]})" if fail else ""))
        return 0 if not any(f for _, f in results.values()) else 1
    finally:
        procs.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", required=True)
    ap.add_argument("--tasks", type=int, default=64)
    ap.add_argument("--viewers", type=int, default=50)
    ap.add_argument("--scrapers", type=int, default=10)
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--sequential", type=int, default=400)
    a = ap.parse_args()
    if a.viewers + a.scrapers > 250:
        ap.error("at most 250 readers (one loopback address each)")
    d = tempfile.mkdtemp(prefix="trainscope-readers-")
    try:
        return run(os.path.abspath(a.bin), d, a)
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
