#!/usr/bin/env python3
"""What telemetry costs a training run, measured from outside as a user would.

A ps and a worker (linear_regression, no step delay: a tight Pull/Push loop) train on loopback
with the node's sidecar watching them and receiving their spans (OTLP on its gRPC port). Where
they run (`taskset`), every set-up alike:
  --cpus one    all three on CPU 0 (default): the loop is CPU-bound, so every microsecond
                telemetry costs any of them comes out of the step rate - the worst case;
  --cpus split  the worker on CPU 0, the ps and the sidecar on CPU 1: the loop is bound by
                wake-up latency between CPUs, and its rate swings with the scheduler.
Each set-up has its own cluster, started once and paused (SIGSTOP) except in its own windows
(--clusters paused, the default; --restart_every N starts them all anew every N rounds), so that
a window measures warm processes and not where a fresh start put them; --clusters fresh starts a
cluster for every window instead. Rounds are interleaved (the order rotates each round), so that
a noisy neighbour hits every set-up alike. The worker's steps per second come from the sidecar's
/api/v1/tasks, timed by the heartbeat that counted them; the CPU seconds of the three processes
from /proc. Prints per set-up the median rate, the median over rounds of each round's rate / the
rate with telemetry off and of its CPU per step / off's (on a shared machine the CPU figure is the
steadier one), then each process's user + system CPU and thread switches per step (sidecar, ps,
worker): where the cost is paid.

  scripts/python tests/bench/training_overhead.py --bin build/bin [--rounds 16] [--window_s 4]
      [--restart_every 4]

Set-ups:
  off        --disable_telemetry
  metrics    --disable_tracing (metrics only)
  default    telemetry on as shipped: 1% of traces head-sampled, every slow or failed call kept
  always_on  OTEL_TRACES_SAMPLER=always_on: every call exported as a span
  mtls       default, with every gRPC listener and client on mutual TLS (docs/security.md;
             certificates made with openssl in the temporary directory)

  --setups default,mtls runs only those (the first is the one the ratios divide by).

Standard library only.
"""

import argparse
import json
import os
import random
import signal
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

from trainscope_testing.certs import LoopbackCerts
from trainscope_testing.cluster_spec import tf_config
from trainscope_testing.ports import free_port

SETUPS = {
    "off": (["--disable_telemetry"], {}),
    "metrics": (["--disable_tracing"], {}),
    "default": ([], {}),
    "always_on": ([], {"OTEL_TRACES_SAMPLER": "always_on"}),
    "mtls": ([], {}),  # + the --tls_* flags (tls_flags)
}


def tls_flags(workdir):
    """--tls_* flags of one certificate for 127.0.0.1 and its CA, made once in workdir."""
    if not os.path.exists(os.path.join(workdir, "node.crt")):
        LoopbackCerts(workdir).leaf("node")
    return ["--tls_cert_file", os.path.join(workdir, "node.crt"), "--tls_key_file",
            os.path.join(workdir, "node.key"), "--tls_ca_file", os.path.join(workdir, "ca.crt")]


def worker_steps(http_port, tls_context=None):
    """(the worker's step count as its last heartbeat said, the unix time of that heartbeat), or
    (None, None): timed by the heartbeat, not by this query, so that the poll interval adds no
    error to a short window."""
    try:
        scheme = "https" if tls_context else "http"  # with the --tls_* flags the sidecar is HTTPS
        with urllib.request.urlopen(f"{scheme}://127.0.0.1:{http_port}/api/v1/tasks", timeout=2,
                                    context=tls_context) as r:
            for t in json.load(r).get("tasks", []):
                if t.get("name") == "worker:0" and t.get("heartbeat_age_seconds", -1) >= 0:
                    return (float(t.get("steps", 0)),
                            float(t["observed_at"]) - float(t["heartbeat_age_seconds"]))
    except OSError:
        pass
    return None, None


def process_cpu(pid):
    """(user, system CPU seconds, context switches) of a process and all its threads; zeros
    once it is gone. Context switches show costs that are not instructions: every wake-up of a
    thread on a shared CPU is a switch away from the training loop."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        threads = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0.0, 0.0, 0
    switches = 0
    for tid in threads:
        try:  # threads come and go (gRPC's pollers)
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                for line in f:
                    if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                        switches += int(line.split(":", 1)[1])
        except OSError:
            pass
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick, switches


def median_interval(values, resamples=2000):
    """A 95% bootstrap interval of the median of `values` (resampled with replacement)."""
    rng = random.Random(1)
    medians = sorted(statistics.median(rng.choices(values, k=len(values)))
                     for _ in range(resamples))
    return medians[int(0.025 * resamples)], medians[int(0.975 * resamples) - 1]


def start(argv, env, log, cpu=None):
    if cpu is not None:  # a ping-pong loop's rate depends on where the scheduler puts its ends
        argv = ["taskset", "-c", str(cpu), *argv]
    return subprocess.Popen(argv, env={**os.environ, **env}, stdout=log, stderr=subprocess.STDOUT)


class Cluster:
    """A sidecar, a ps and a worker under one set-up, on their own ports."""

    def __init__(self, bin_dir, workdir, setup, cpus, extra_flags=()):
        self.setup = setup
        flags, extra_env = SETUPS[setup]
        tls = tls_flags(workdir) if setup == "mtls" else []
        self.ctx = None
        if tls:
            self.ctx = ssl.create_default_context(cafile=tls[tls.index("--tls_ca_file") + 1])
            self.ctx.load_cert_chain(tls[tls.index("--tls_cert_file") + 1],
                                     tls[tls.index("--tls_key_file") + 1])
        flags = flags + tls
        ps, worker = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
        spec = {"cluster": {"ps": [ps], "worker": [worker]}}
        self.http_port, grpc_port = free_port(), free_port()
        spec_path = os.path.join(workdir, f"cluster_spec.{setup}.json")
        with open(spec_path, "w") as f:
            json.dump(spec, f)
        self.procs = []
        self.log = open(os.path.join(workdir, f"{setup}.log"), "ab")
        try:
            self.procs.append(start(
                [os.path.join(bin_dir, "trainscope-sidecar"), "--cluster_spec", spec_path,
                 "--cluster_name", "bench", "--local_tasks", "ps:0,worker:0", "--http_address",
                 "127.0.0.1", "--http_port", str(self.http_port), "--grpc_port", str(grpc_port),
                 "--peer_sidecars", "none", *tls], {}, self.log, cpu=cpus[1]))
            env = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{grpc_port}", **extra_env}
            for role in ("ps", "worker"):
                tf = tf_config(spec, role, 0)
                self.procs.append(start(
                    [os.path.join(bin_dir, "linear_regression"), "--cluster_name", "bench",
                     "--steps", "1000000000", "--log_every", "1000000", "--metrics_port", "0",
                     *flags, *extra_flags], {"TF_CONFIG": tf, **env}, self.log,
                    cpu=cpus[0] if role == "worker" else cpus[1]))
            deadline = time.monotonic() + 30
            while (self.steps()[0] or 0) <= 0:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{setup}: the worker never stepped (log in {workdir})")
                time.sleep(0.2)
        except BaseException:
            self.stop()
            raise

    def steps(self):
        return worker_steps(self.http_port, self.ctx)

    def signal(self, sig):
        # The worker first when pausing: the ps and the sidecar then finish what it started.
        order = self.procs[::-1] if sig == signal.SIGSTOP else self.procs
        for p in order:
            p.send_signal(sig)
            if sig == signal.SIGSTOP and p is self.procs[-1]:
                time.sleep(0.1)

    def measure(self, warmup_s, window_s):
        """(steps per second, [(user, system CPU seconds, switches) per step of sidecar, ps,
        worker]) over one window."""
        time.sleep(warmup_s)
        s0, t0 = self.steps()
        c0, m0 = [process_cpu(p.pid) for p in self.procs], time.monotonic()
        time.sleep(window_s)
        s1, t1 = self.steps()
        c1, m1 = [process_cpu(p.pid) for p in self.procs], time.monotonic()
        if s0 is None or s1 is None or s1 <= s0:
            raise RuntimeError(f"{self.setup}: the sidecar stopped answering or the worker "
                               "stepping")
        steps_per_s = (s1 - s0) / (t1 - t0)
        steps = steps_per_s * (m1 - m0)
        return steps_per_s, [tuple((b - a) / steps for a, b in zip(x, y))
                             for x, y in zip(c0, c1)]

    def stop(self):
        for p in self.procs:
            p.send_signal(signal.SIGKILL)
            p.wait()
        self.procs = []
        self.log.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default="build/bin")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--window_s", type=float, default=4)
    ap.add_argument("--cpus", choices=("one", "split"), default="one")
    ap.add_argument("--warmup_s", type=float, default=None,
                    help="before each window (default: 2 s fresh, 0.5 s paused)")
    ap.add_argument("--clusters", choices=("paused", "fresh"), default="paused",
                    help="paused: every set-up's cluster started once and only its own windows "
                    "let run (SIGSTOP / SIGCONT); fresh: started anew for every window")
    ap.add_argument("--restart_every", type=int, default=0,
                    help="paused clusters: start them anew every N rounds (0: never)")
    ap.add_argument("--setups", default=",".join(SETUPS),
                    help="comma-separated; ratios are to the first")
    args = ap.parse_args()
    cpus = (0, 0) if args.cpus == "one" else (0, 1)
    setups = args.setups.split(",")
    paused = args.clusters == "paused"
    warmup_s = args.warmup_s if args.warmup_s is not None else (0.5 if paused else 2)
    # A paused worker's call would outlive its deadline: no deadline matters in a steady loop.
    extra = ["--rpc_deadline_ms", "600000"] if paused else []
    base = setups[0]
    rates = {s: [] for s in setups}
    cpu = {s: [] for s in setups}
    per_process = {s: [] for s in setups}  # [(user, sys, switches) of sidecar, ps, worker]
    with tempfile.TemporaryDirectory(prefix="training_overhead.") as workdir:
        clusters = {}
        try:
            for r in range(args.rounds):
                if paused and (not clusters or (args.restart_every and r % args.restart_every == 0)):
                    for c in clusters.values():
                        c.stop()
                    clusters = {}
                    for setup in setups:
                        clusters[setup] = Cluster(args.bin, workdir, setup, cpus, extra)
                        clusters[setup].signal(signal.SIGSTOP)
                # Rotate the order, so that no set-up always follows the same one.
                for setup in setups[r % len(setups):] + setups[:r % len(setups)]:
                    c = clusters[setup] if paused else Cluster(args.bin, workdir, setup, cpus)
                    try:
                        if paused:
                            c.signal(signal.SIGCONT)
                        rate, each = c.measure(warmup_s, args.window_s)
                    finally:
                        if paused:
                            c.signal(signal.SIGSTOP)
                        else:
                            c.stop()
                    cpu_per_step = sum(u + k for u, k, _ in each)
                    per_process[setup].append(each)
                    rates[setup].append(rate)
                    cpu[setup].append(cpu_per_step)
                    print(f"round {r + 1}: {setup:9s} {rate:9.0f} steps/s "
                          f"{cpu_per_step * 1e6:7.1f} CPU us/step", flush=True)
        finally:
            for c in clusters.values():
                c.stop()
    print(f"\nworker steps/s, median of {args.rounds} interleaved {args.window_s:g} s windows "
          f"(ps, worker and sidecar on one node, CPUs: {args.cpus}, clusters: {args.clusters}):")
    print(f"  {'set-up':9s} {'steps/s':>9s} {'rate/' + base:>12s} {'95% interval':>13s} "
          f"{'rounds (min-max)':>17s} {'CPU us/step':>12s} {'CPU/' + base:>9s} "
          f"{'95% interval':>13s}")
    for setup in setups:
        ratios = [a / b for a, b in zip(rates[setup], rates[base])]
        cpu_ratios = [a / b for a, b in zip(cpu[setup], cpu[base])]
        lo, hi = median_interval(ratios)
        cpu_lo, cpu_hi = median_interval(cpu_ratios)
        print(f"  {setup:9s} {statistics.median(rates[setup]):9.0f} "
              f"{statistics.median(ratios):12.3f} {lo:6.3f}-{hi:.3f} "
              f"{min(ratios):11.3f}-{max(ratios):.3f} "
              f"{statistics.median(cpu[setup]) * 1e6:12.1f} "
              f"{statistics.median(cpu_ratios):9.3f} {cpu_lo:6.3f}-{cpu_hi:.3f}")
    print("  (rate/ and CPU/: medians over rounds of each round's ratio; the interval is a 95% "
          "bootstrap interval of that median)")
    print("\nper step, by process (medians of rounds): CPU us user+system, and thread switches")
    print(f"  {'set-up':9s} {'sidecar':>17s} {'ps':>17s} {'worker':>17s}")
    for setup in setups:
        cells = []
        for i in range(3):
            user = statistics.median(r[i][0] for r in per_process[setup]) * 1e6
            system = statistics.median(r[i][1] for r in per_process[setup]) * 1e6
            switches = statistics.median(r[i][2] for r in per_process[setup])
            cells.append(f"{user:5.1f}+{system:5.1f} {switches:4.2f}")
        print(f"  {setup:9s} " + " ".join(f"{c:>17s}" for c in cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
