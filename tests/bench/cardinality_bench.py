#!/usr/bin/env python3
"""How many series trainscope exports, measured on real processes.

  scripts/python tests/bench/cardinality_bench.py --bin build/bin [--ps 100] [--workers 10,50,100]

1. A worker talking to --ps ps tasks (one shard of the model on each): the series on the
   worker's /metrics, by family.
2. A ps serving W workers, for each W of --workers: the series on the ps's /metrics. Their
   growth per worker, extrapolated to 1,000 workers (a ps's series are keyed by its callers'
   role, not by caller, so the growth should be nil).
3. The sidecar watching every task of run 2: its /metrics series per task watched.

Every task is a real linear_regression process on 127.0.0.1; the sidecar a real
trainscope-sidecar. Standard library only. Prints a table; exits non-zero when a run fails.
"""

import argparse
import collections
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

from trainscope_testing.cluster_spec import tf_config
from trainscope_testing.ports import free_port
from trainscope_testing.web import http_text


def series(text):
    """Series per family of a Prometheus text exposition."""
    by_family = collections.Counter()
    family = None
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            family = line.split()[2]
        elif line and not line.startswith("#"):
            name = line.split("{")[0].split(" ")[0]
            by_family[family if family and name.startswith(family) else name] += 1
    return by_family


class Cluster:
    """ps:0..P-1 and worker:0..W-1 on loopback, and one sidecar watching them all."""

    def __init__(self, bin_dir, workdir, num_ps, num_workers, features):
        self.bin, self.dir = bin_dir, workdir
        self.spec = {"cluster": {
            "ps": [f"127.0.0.1:{free_port()}" for _ in range(num_ps)],
            "worker": [f"127.0.0.1:{free_port()}" for _ in range(num_workers)]}}
        self.spec_path = os.path.join(workdir, "spec.json")
        with open(self.spec_path, "w") as f:
            json.dump(self.spec, f)
        self.features = features
        self.http_port = free_port()
        self.procs = []
        self.log = open(os.path.join(workdir, "processes.log"), "ab")

    def start(self):
        self.procs.append(subprocess.Popen(
            [os.path.join(self.bin, "trainscope-sidecar"), "--cluster_spec", self.spec_path,
             "--cluster_name", "card", "--local_tasks", ",".join(self.names()),
             "--http_address", "127.0.0.1", "--http_port", str(self.http_port),
             "--grpc_port", str(free_port()), "--peer_sidecars", "none"],
            stdout=self.log, stderr=subprocess.STDOUT))
        for role, addrs in self.spec["cluster"].items():
            for i in range(len(addrs)):
                tf = tf_config(self.spec, role, i)
                self.procs.append(subprocess.Popen(
                    [os.path.join(self.bin, "linear_regression"), "--cluster_name", "card",
                     "--features", str(self.features), "--steps", "100000000",
                     "--step_delay_ms", "20", "--log_every", "1000000", "--metrics_port", "0",
                     "--disable_tracing"],
                    env={**os.environ, "TF_CONFIG": tf}, stdout=self.log,
                    stderr=subprocess.STDOUT))

    def names(self):
        return [f"{r}:{i}" for r, a in self.spec["cluster"].items() for i in range(len(a))]

    def tasks(self):
        return json.loads(http_text(f"http://127.0.0.1:{self.http_port}/api/v1/tasks"))["tasks"]

    def wait_training(self, timeout=120):
        """Waits until every worker has stepped a few times; returns the tasks by name."""
        deadline = time.monotonic() + timeout
        views = {}
        while time.monotonic() < deadline:
            try:
                views = {t["name"]: t for t in self.tasks()}
                workers = [v for n, v in views.items() if n.startswith("worker:")]
                if workers and all(float(v.get("steps", 0)) >= 20 for v in workers) and all(
                        v.get("metrics_address") for v in views.values()):
                    return views
            except (OSError, ValueError, KeyError):
                pass
            time.sleep(0.5)
        states = collections.Counter(v.get("state") for v in views.values())
        no_metrics = [n for n, v in views.items() if not v.get("metrics_address")]
        raise RuntimeError(f"the cluster did not train within {timeout} s: states {dict(states)}, "
                           f"{len(no_metrics)} without /metrics {no_metrics[:5]}")

    def stop(self):
        for p in self.procs:
            p.send_signal(signal.SIGKILL)
        for p in self.procs:
            p.wait()
        self.log.close()


def total(by_family):
    return sum(by_family.values())


def top(by_family, n=6):
    return ", ".join(f"{f} {c}" for f, c in by_family.most_common(n))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default="build/bin")
    ap.add_argument("--ps", type=int, default=100)
    ap.add_argument("--workers", default="10,50,100")
    ap.add_argument("--budget", type=int, default=2000,
                    help="series per task at most; exit 1 when a task exports more")
    args = ap.parse_args()
    over = []
    bin_dir = os.path.abspath(args.bin)

    with tempfile.TemporaryDirectory(prefix="cardinality.") as workdir:
        c = Cluster(bin_dir, workdir, args.ps, 1, features=args.ps)
        try:
            c.start()
            views = c.wait_training()
            worker = series(http_text(f"http://{views['worker:0']['metrics_address']}/metrics"))
        finally:
            c.stop()
        print(f"worker:0 talking to {args.ps} ps: {total(worker)} series")
        if total(worker) > args.budget:
            over.append(f"worker:0 with {args.ps} ps: {total(worker)}")
        print(f"  largest families: {top(worker)}")

        rows = []
        for w in [int(x) for x in args.workers.split(",")]:
            d = os.path.join(workdir, f"w{w}")
            os.makedirs(d)
            c = Cluster(bin_dir, d, 1, w, features=16)
            try:
                c.start()
                views = c.wait_training()
                ps = series(http_text(f"http://{views['ps:0']['metrics_address']}/metrics"))
                sidecar = series(http_text(f"http://127.0.0.1:{c.http_port}/metrics"))
            finally:
                c.stop()
            rows.append((w, total(ps), total(sidecar), w + 1))
            if total(ps) > args.budget:
                over.append(f"ps:0 with {w} workers: {total(ps)}")
            print(f"ps:0 serving {w} workers: {total(ps)} series; largest: {top(ps, 4)}")
            print(f"  sidecar watching {w + 1} tasks: {total(sidecar)} series, "
                  f"{total(sidecar) / (w + 1):.1f} per task")
        (w0, p0, _, _), (w1, p1, s1, n1) = rows[0], rows[-1]
        slope = (p1 - p0) / (w1 - w0) if w1 != w0 else 0
        print(f"\nps series per extra worker: {slope:.2f}; projected at 1,000 workers: "
              f"{p1 + slope * (1000 - w1):.0f}")
        print(f"sidecar series per task watched: {s1 / n1:.1f} (at {n1} tasks)")
    if over:
        print(f"OVER THE BUDGET of {args.budget} series per task: " + "; ".join(over))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
