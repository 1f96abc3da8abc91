#!/usr/bin/env python3
"""What telemetry costs a training run, measured from outside as a user would.

A ps and a worker (linear_regression, no step delay: a tight Pull/Push loop) train on loopback
with the node's sidecar watching them and receiving their spans (OTLP on its gRPC port). Where
they run (`taskset`), every set-up alike:
  --cpus one    all three on CPU 0 (default): the loop is CPU-bound, so every microsecond
                telemetry costs any of them comes out of the step rate - the worst case;
  --cpus split  the worker on CPU 0, the ps and the sidecar on CPU 1: the loop is bound by
                wake-up latency between CPUs, and its rate swings with the scheduler.
Each set-up below runs for one window in turn, rounds interleaved so that a noisy neighbour hits
every set-up alike; the worker's steps per second are read from the sidecar's /api/v1/tasks, and
the CPU seconds the three processes used (/proc/PID/stat) per step. Prints per set-up the median
rate, the median over rounds of each round's rate / the rate with telemetry off, and the median
CPU per step / telemetry off's (on a shared machine the CPU figure is the steadier one), then
each process's CPU per step (sidecar, ps, worker): where the cost is paid.

  /usr/bin/python3 tests/bench/training_overhead.py --bin build/bin [--rounds 10] [--window_s 4]

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
import signal
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

SETUPS = {
    "off": (["--disable_telemetry"], {}),
    "metrics": (["--disable_tracing"], {}),
    "default": ([], {}),
    "always_on": ([], {"OTEL_TRACES_SAMPLER": "always_on"}),
    "mtls": ([], {}),  # + the --tls_* flags (tls_flags)
}


def tls_flags(workdir):
    """--tls_* flags of one certificate for 127.0.0.1 and its CA, made once in workdir."""
    sys.dont_write_bytecode = True  # no __pycache__ in the source tree
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tls"))
    from tls_test import Certs  # noqa: E402 (tests/tls, standard library only)
    if not os.path.exists(os.path.join(workdir, "node.crt")):
        Certs(workdir).leaf("node")
    return ["--tls_cert_file", os.path.join(workdir, "node.crt"), "--tls_key_file",
            os.path.join(workdir, "node.key"), "--tls_ca_file", os.path.join(workdir, "ca.crt")]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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


def cpu_seconds(pid):
    """utime + stime of a process, in seconds (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start(argv, env, log, cpu=None):
    if cpu is not None:  # a ping-pong loop's rate depends on where the scheduler puts its ends
        argv = ["taskset", "-c", str(cpu), *argv]
    return subprocess.Popen(argv, env={**os.environ, **env}, stdout=log, stderr=subprocess.STDOUT)


def run_window(bin_dir, workdir, setup, warmup_s, window_s, cpus):
    """(steps per second, CPU seconds per step) of worker:0 under `setup` over one window."""
    flags, extra_env = SETUPS[setup]
    tls = tls_flags(workdir) if setup == "mtls" else []
    ctx = None
    if tls:
        ctx = ssl.create_default_context(cafile=tls[tls.index("--tls_ca_file") + 1])
        ctx.load_cert_chain(tls[tls.index("--tls_cert_file") + 1],
                            tls[tls.index("--tls_key_file") + 1])
    flags = flags + tls
    ps, worker = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    spec = {"cluster": {"ps": [ps], "worker": [worker]}}
    http_port, grpc_port = free_port(), free_port()
    spec_path = os.path.join(workdir, "cluster_spec.json")
    with open(spec_path, "w") as f:
        json.dump(spec, f)
    procs = []
    log = open(os.path.join(workdir, f"{setup}.log"), "ab")
    try:
        procs.append(start([os.path.join(bin_dir, "trainscope-sidecar"), "--cluster_spec",
                            spec_path, "--cluster_name", "bench", "--local_tasks",
                            "ps:0,worker:0", "--http_address", "127.0.0.1", "--http_port",
                            str(http_port), "--grpc_port", str(grpc_port), "--peer_sidecars",
                            "none", *tls], {}, log, cpu=cpus[1]))
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{grpc_port}", **extra_env}
        for role in ("ps", "worker"):
            tf = json.dumps({**spec, "task": {"type": role, "index": 0}})
            procs.append(start([os.path.join(bin_dir, "linear_regression"), "--cluster_name",
                                "bench", "--steps", "1000000000", "--log_every", "1000000",
                                "--metrics_port", "0", *flags], {"TF_CONFIG": tf, **env}, log,
                               cpu=cpus[0] if role == "worker" else cpus[1]))
        deadline = time.monotonic() + 30
        while (worker_steps(http_port, ctx)[0] or 0) <= 0:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{setup}: the worker never stepped (log in {workdir})")
            time.sleep(0.2)
        time.sleep(warmup_s)
        s0, t0 = worker_steps(http_port, ctx)
        c0, m0 = [cpu_seconds(p.pid) for p in procs], time.monotonic()
        time.sleep(window_s)
        s1, t1 = worker_steps(http_port, ctx)
        c1, m1 = [cpu_seconds(p.pid) for p in procs], time.monotonic()
        if s0 is None or s1 is None or s1 <= s0:
            raise RuntimeError(f"{setup}: the sidecar stopped answering or the worker stepping")
        steps_per_s = (s1 - s0) / (t1 - t0)
        # Per process (sidecar, ps, worker): CPU seconds per step.
        return steps_per_s, [(b - a) / (m1 - m0) / steps_per_s for a, b in zip(c0, c1)]
    finally:
        for p in procs:
            p.send_signal(signal.SIGKILL)
            p.wait()
        log.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default="build/bin")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--window_s", type=float, default=4)
    ap.add_argument("--cpus", choices=("one", "split"), default="one")
    ap.add_argument("--warmup_s", type=float, default=2)
    ap.add_argument("--setups", default=",".join(SETUPS),
                    help="comma-separated; ratios are to the first")
    args = ap.parse_args()
    cpus = (0, 0) if args.cpus == "one" else (0, 1)
    setups = args.setups.split(",")
    base = setups[0]
    rates = {s: [] for s in setups}
    cpu = {s: [] for s in setups}
    per_process = {s: [] for s in setups}  # [sidecar, ps, worker] CPU per step, each round
    with tempfile.TemporaryDirectory(prefix="training_overhead.") as workdir:
        for r in range(args.rounds):
            for setup in setups:
                rate, cpu_each = run_window(args.bin, workdir, setup, args.warmup_s,
                                            args.window_s, cpus)
                cpu_per_step = sum(cpu_each)
                per_process[setup].append(cpu_each)
                rates[setup].append(rate)
                cpu[setup].append(cpu_per_step)
                print(f"round {r + 1}: {setup:9s} {rate:9.0f} steps/s "
                      f"{cpu_per_step * 1e6:7.1f} CPU us/step", flush=True)
    print(f"\nworker steps/s, median of {args.rounds} interleaved {args.window_s:.0f} s windows "
          f"(ps, worker and sidecar on one node, CPUs: {args.cpus}):")
    print(f"  {'set-up':9s} {'steps/s':>9s} {'rate/' + base:>12s} {'rounds (min-max)':>17s} "
          f"{'CPU us/step':>12s} {'CPU/' + base:>12s}")
    for setup in setups:
        ratios = [a / b for a, b in zip(rates[setup], rates[base])]
        print(f"  {setup:9s} {statistics.median(rates[setup]):9.0f} "
              f"{statistics.median(ratios):12.3f} {min(ratios):8.3f}-{max(ratios):.3f} "
              f"{statistics.median(cpu[setup]) * 1e6:12.1f} "
              f"{statistics.median(cpu[setup]) / statistics.median(cpu[base]):12.3f}")
    print("\nCPU us per step by process (medians of rounds): where telemetry's cost is paid")
    print(f"  {'set-up':9s} {'sidecar':>9s} {'ps':>9s} {'worker':>9s}")
    for setup in setups:
        each = [statistics.median(r[i] for r in per_process[setup]) * 1e6 for i in range(3)]
        print(f"  {setup:9s} {each[0]:9.1f} {each[1]:9.1f} {each[2]:9.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
