#!/usr/bin/python3
"""The table of issue 23 ("Why"): how many probes of the sidecar's /healthz and of a ps's
/metrics are answered while one client holds N slow HTTP connections to each.

For each N (default 20, 200, 1000): a fresh linear_regression ps and worker and a
trainscope-sidecar on loopback (default flags, plain HTTP); one client (--attacker_source,
default 127.0.0.1, the prober's own address, as a person with a script on the same machine)
holds N connections to the sidecar and N to the ps's /metrics, each sending one header line a
second, opened again a second after the server closes it; after 3 s, a prober asks both every
0.5 s with a 2 s limit for --seconds. Prints a Markdown table: answered of asked (slowest).

Usage: PYTHONPATH=tests/py /usr/bin/python3 tests/bench/http_slowloris_bench.py --bin build/bin
[--n 20,200,1000] [--seconds 8] [--attacker_source 127.0.0.2]. Standard library only.
"""

import argparse
import json
import os
import shutil
import sys
import tempfile
import time

from trainscope_testing.cluster_spec import tf_config
from trainscope_testing.hostile import Attacker, Prober, raise_fd_limit
from trainscope_testing.logs import logger
from trainscope_testing.ports import free_port
from trainscope_testing.processes import ProcGroup
from trainscope_testing.waiting import wait_for

log = logger("slowloris")


def start(bin_dir, d, procs):
    """A ps, a worker and a sidecar; the endpoints to probe and the targets to attack."""
    ps, worker, metrics, http_port, worker_metrics = (free_port() for _ in range(5))
    spec = {"cluster": {"ps": [f"127.0.0.1:{ps}"], "worker": [f"127.0.0.1:{worker}"]}}
    with open(os.path.join(d, "spec.json"), "w") as f:
        json.dump(spec, f)
    procs.start("ps", [f"{bin_dir}/linear_regression", "--metrics_port", str(metrics),
                       "--disable_tracing"], env={"TF_CONFIG": tf_config(spec, "ps", 0)})
    procs.start("worker", [f"{bin_dir}/linear_regression", "--metrics_port",
                           str(worker_metrics), "--disable_tracing", "--steps", "1000000",
                           "--step_delay_ms", "20"],
                env={"TF_CONFIG": tf_config(spec, "worker", 0)})
    procs.start("sidecar", [f"{bin_dir}/trainscope-sidecar", "--cluster_spec",
                            f"{d}/spec.json", "--http_port", str(http_port), "--grpc_port", "-1",
                            "--peer_sidecars", "none"])
    endpoints = [("sidecar /healthz", http_port, "/healthz"), ("ps /metrics", metrics, "/metrics")]
    probe = Prober(endpoints, None, source="127.0.0.1", timeout=2)
    for name, port, path in endpoints:
        wait_for(f"{name} answers", lambda: probe.probe(port, path) == 200, 30,
                 errors=(Exception,))
    return endpoints, [("127.0.0.1", http_port), ("127.0.0.1", metrics)]


def measure(bin_dir, n, seconds, source):
    d = tempfile.mkdtemp(prefix="trainscope-slowloris-")
    procs = ProcGroup(d)
    try:
        endpoints, targets = start(bin_dir, d, procs)
        attack = Attacker(targets, n, [source], ["slowloris"]).start()
        time.sleep(3)
        probe = Prober(endpoints, None, interval=0.5, source="127.0.0.1", timeout=2).start()
        time.sleep(seconds)
        probe.stop()
        attack.stop()
        return {name: (len(probe.latencies[name]), probe.asked[name], probe.slowest[name])
                for name, _, _ in endpoints}
    finally:
        procs.stop()
        shutil.rmtree(d, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", required=True)
    ap.add_argument("--n", default="20,200,1000")
    ap.add_argument("--seconds", type=float, default=8)
    ap.add_argument("--attacker_source", default="127.0.0.1")
    a = ap.parse_args()
    counts = [int(x) for x in a.n.split(",")]
    raise_fd_limit(2 * max(counts) + 512)
    rows = []
    for n in counts:
        result = measure(os.path.abspath(a.bin), n, a.seconds, a.attacker_source)
        cells = [f"{ok} of {asked} (slowest {slowest:.2f} s)"
                 for ok, asked, slowest in result.values()]
        log(f"N={n}: " + "; ".join(f"{name} {c}" for name, c in zip(result, cells)))
        rows.append(f"| {n} | " + " | ".join(cells) + " |")
    print("| N connections | sidecar `/healthz` answered | ps `/metrics` answered |")
    print("| --- | --- | --- |")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
