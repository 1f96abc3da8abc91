#!/usr/bin/python3
"""Hostile load on the HTTP listeners (docs/security.md, "HTTP listeners"): slow and idle
clients must not blind the sidecar's page, API and /metrics, nor a task's /metrics.

A real linear_regression ps and worker and a real trainscope-sidecar run on loopback. This
test holds --connections connections to the sidecar and as many to the ps's /metrics, first
from one client address (127.0.0.2), then spread over 50 (127.0.0.2..127.0.0.51): half send a
request one header line a second (slowloris), half connect and send nothing. Whatever the
servers close is opened again a second later. Meanwhile a prober on its own address
(127.0.0.61) asks the sidecar's /healthz, /api/v1/tasks and /metrics and the ps's /metrics
every 0.25 s: every probe must be answered (200). A real Prometheus (when installed; under
CI=true it must be) scrapes both every second and must record no failed scrape; under the
50-address load the worker is killed with SIGKILL and the sidecar must name it dead (the time
is printed). Then the same over HTTPS (mutual TLS) with connections that stop in the middle
of the TLS handshake: half send a whole ClientHello and nothing after it, half trickle it a byte
a second. The probes' p50 and p99 are printed, not asserted (the machine may be shared).

Usage: http_load_test.py --bin BUILD/bin [--connections 1000] [--hold 10] [--keep]; by hand:
`PYTHONPATH=tests/py /usr/bin/python3 tests/integration/http_load_test.py --bin build/bin`.
Exit 0 when every check held. Standard library only.
"""

import argparse
import http.client
import json
import os
import shutil
import sys
import tempfile
import time
import urllib.parse

from trainscope_testing import skips
from trainscope_testing.certs import make_pem_certs, pem_context
from trainscope_testing.cluster_spec import tf_config
from trainscope_testing.hostile import Attacker, Prober, memory, percentile, raise_fd_limit
from trainscope_testing.logs import logger
from trainscope_testing.monitoring import argv_prometheus
from trainscope_testing.ports import free_port
from trainscope_testing.processes import ProcGroup
from trainscope_testing.waiting import HarnessError, wait_for
from trainscope_testing.web import http_json

log = logger("http-load")


def start_cluster(bin_dir, d, procs, tls):
    ps, worker, metrics, http_port, worker_metrics = (free_port() for _ in range(5))
    spec = {"cluster": {"ps": [f"127.0.0.1:{ps}"], "worker": [f"127.0.0.1:{worker}"]}}
    suffix = "-tls" if tls else ""
    with open(os.path.join(d, f"spec{suffix}.json"), "w") as f:
        json.dump(spec, f)
    flags = (["--tls_cert_file", f"{d}/server.pem", "--tls_key_file", f"{d}/server.key",
              "--tls_ca_file", f"{d}/ca.pem"] if tls else [])
    task = [f"{bin_dir}/linear_regression", "--disable_tracing", *flags]
    ps_proc = procs.start(f"ps{suffix}", [*task, "--metrics_port", str(metrics)],
                          env={"TF_CONFIG": tf_config(spec, "ps", 0)})
    worker_proc = procs.start(f"worker{suffix}",
                              [*task, "--metrics_port", str(worker_metrics), "--steps", "1000000",
                               "--step_delay_ms", "20"],
                              env={"TF_CONFIG": tf_config(spec, "worker", 0)})
    sidecar_proc = procs.start(f"sidecar{suffix}",
                               [f"{bin_dir}/trainscope-sidecar", "--cluster_spec",
                                f"{d}/spec{suffix}.json", "--http_port", str(http_port),
                                "--grpc_port", "-1", "--peer_sidecars", "none", *flags])
    endpoints = [("sidecar /healthz", http_port, "/healthz"),
                 ("sidecar /api/v1/tasks", http_port, "/api/v1/tasks"),
                 ("sidecar /metrics", http_port, "/metrics"),
                 ("ps /metrics", metrics, "/metrics")]
    ctx = pem_context(d) if tls else None
    probe = Prober(endpoints, ctx)
    for name, port, path in endpoints:
        wait_for(f"{name} answers", lambda: probe.probe(port, path) == 200, 30,
                 errors=(OSError, http.client.HTTPException))
    return (endpoints, ctx, [("127.0.0.1", http_port), ("127.0.0.1", metrics)],
            [("sidecar", sidecar_proc), ("ps", ps_proc)], worker_proc)


def start_prometheus(d, procs, targets, tls):
    """A real Prometheus scraping `targets` every second (over mutual TLS under tls); its
    port, or None when there is no prometheus here."""
    prom = shutil.which("prometheus") or "/usr/bin/prometheus"
    if not os.path.exists(prom):
        skips.skip_check("the scrape check", "no prometheus binary (apt-get install prometheus)",
                         log)
        return None
    port = free_port()
    job = {"job_name": "load", "scrape_interval": "1s", "scrape_timeout": "1s",
           "static_configs": [{"targets": [f"{h}:{p}" for h, p in targets]}]}
    if tls:
        job["scheme"] = "https"
        job["tls_config"] = {"ca_file": f"{d}/ca.pem", "cert_file": f"{d}/client.pem",
                             "key_file": f"{d}/client.key", "server_name": "localhost"}
    name = "prometheus-tls" if tls else "prometheus"
    with open(os.path.join(d, f"{name}.yml"), "w") as f:
        json.dump({"scrape_configs": [job]}, f)  # JSON is YAML.
    procs.start(name, argv_prometheus(prom, f"{d}/{name}.yml", f"{d}/{name}-data", port))
    wait_for("Prometheus scrapes every target (up == 1)",
             lambda: [v for _, v in scrapes(port, 2)] == [(2, 2)] * len(targets)
             or None, 60, errors=(OSError, ValueError, KeyError))
    return port


def scrapes(port, seconds):
    """[(instance, (successful scrapes, scrapes))] of the last `seconds` s, by instance."""
    out = {}
    for what in ("sum_over_time", "count_over_time"):
        q = urllib.parse.quote(f'{what}(up{{job="load"}}[{int(seconds)}s])')
        result = http_json(f"http://127.0.0.1:{port}/api/v1/query?query={q}")["data"]["result"]
        for r in result:
            out.setdefault(r["metric"]["instance"], []).append(int(float(r["value"][1])))
    return sorted((k, tuple(v)) for k, v in out.items())


def dead_named(endpoints, ctx, worker):
    """Kills the worker with SIGKILL; seconds until the sidecar's /api/v1/tasks says it is
    dead, or None after 60 s."""
    port = endpoints[1][1]
    probe = Prober(endpoints, ctx)
    start = time.monotonic()
    worker.kill9()

    def dead():
        c = probe.connection(port)
        try:
            c.request("GET", "/api/v1/tasks")
            tasks = json.loads(c.getresponse().read())["tasks"]
        finally:
            c.close()
        return any(t.get("role") == "worker" and t.get("state") == "dead" for t in tasks)
    try:
        wait_for("the sidecar names the killed worker dead", dead, 60, interval=0.2,
                 errors=(OSError, ValueError, KeyError, http.client.HTTPException))
    except HarnessError:
        return None
    return time.monotonic() - start


def phase(what, endpoints, ctx, targets, count, sources, kinds, hold, watched, prometheus,
          worker=None):
    """One load (and, with `worker`, a kill -9 of it under the load): the failures."""
    attack = Attacker(targets, count, sources, kinds).start()
    time.sleep(2)  # Let the connections pile up before probing.
    probe = Prober(endpoints, ctx).start()
    time.sleep(hold)
    probe.stop()
    failures = []
    if prometheus:
        for instance, (ok, total) in scrapes(prometheus, hold):
            log(f"  Prometheus scraped {instance} {total} times, {ok} successfully")
            if ok != total or total == 0:
                failures.append(f"{what}: Prometheus: {total - ok} of {total} scrapes of "
                                f"{instance} failed")
    if worker:
        took = dead_named(endpoints, ctx, worker)
        log(f"  a kill -9 of the worker named by the sidecar after "
            f"{'never' if took is None else f'{took:.1f} s'}")
        if took is None:
            failures.append(f"{what}: the sidecar did not name a killed worker dead in 60 s")
    rss = ", ".join(f"{name} {memory(p.pid)}" for name, p in watched)
    attack.stop()
    held = attack.held
    log(f"{what}: {held} of {count * len(targets)} connections open at the end; "
        f"{attack.opened} opened, {attack.closed_by_server} closed by the servers; {rss}")
    for name, values in probe.latencies.items():
        log(f"  {name}: {len(values)} answered, p50 {percentile(values, 50) * 1000:.1f} ms, "
            f"p99 {percentile(values, 99) * 1000:.1f} ms")
    for f in probe.failures[:20]:
        log(f"  FAIL {f}")
    if not any(probe.latencies.values()):
        failures.append(f"{what}: no probe answered")
    return failures + [f"{what}: {f}" for f in probe.failures]


def run(bin_dir, d, count, hold):
    raise_fd_limit(2 * count + 512)
    make_pem_certs(d)
    one = ["127.0.0.2"]
    fifty = [f"127.0.0.{i}" for i in range(2, 52)]
    failures = []
    for tls in (False, True):
        procs = ProcGroup(d)
        try:
            endpoints, ctx, targets, watched, worker = start_cluster(bin_dir, d, procs, tls)
            prometheus = start_prometheus(d, procs, targets, tls)
            kinds = ["tls-stall", "tls-trickle"] if tls else ["slowloris", "idle"]
            scheme = "HTTPS, stopped TLS handshakes" if tls else "HTTP, slowloris and idle"
            for sources in (one, fifty):
                what = f"{scheme}, {count} per server from {len(sources)} address(es)"
                failures += phase(what, endpoints, ctx, targets, count, sources, kinds, hold,
                                  watched, prometheus, worker if sources is fifty else None)
            for p in procs.procs:
                if not p.alive() and p is not worker:
                    failures.append(f"{p.name} exited under load:\n{p.tail()}")
        finally:
            procs.stop()
    return failures


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", required=True)
    ap.add_argument("--connections", type=int, default=1000, help="per server")
    ap.add_argument("--hold", type=float, default=10, help="seconds of probing per load")
    ap.add_argument("--keep", action="store_true", help="keep the temporary folder")
    a = ap.parse_args()
    d = tempfile.mkdtemp(prefix="trainscope-http-load-")
    failures = ["not run"]
    try:
        failures = run(os.path.abspath(a.bin), d, a.connections, a.hold)
    finally:
        if a.keep or failures:
            log(f"files and logs in {d}")
        else:
            shutil.rmtree(d, ignore_errors=True)
    for f in failures:
        log(f"FAIL {f}")
    log(f"{len(failures)} failure(s)" if failures else "every probe was answered")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
