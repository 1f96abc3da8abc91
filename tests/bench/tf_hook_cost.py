#!/usr/bin/python3
"""What trainscope's hook (python/trainscope) costs a real TensorFlow program: tf1_ps.py's chief
(1 ps on loopback, a trainscope-sidecar taking the reports) trains --steps steps per round, with
`hooks=[trainscope.StepHook()]` and without, the two interleaved in ABBA order so that drift on a
shared machine falls on both. Each round's rate is the chief's steps per second after its first
log interval (warm-up). Prints every round, the median rate of each, their ratio and the range
of the per-pair ratios. A figure, never a pass or fail on time.

Usage: scripts/python tests/bench/tf_hook_cost.py --bin build/bin [--pairs 6] [--steps 4000]
"""

import argparse
import json
import os
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "py"))
from trainscope_testing import tensorflow_jobs  # noqa: E402
from trainscope_testing.cluster_spec import tf_config  # noqa: E402
from trainscope_testing.ports import free_port  # noqa: E402
from trainscope_testing.processes import Proc  # noqa: E402

HOOK = os.path.join(HERE, "..", "..", "python")


def one_round(job, hook, steps, log_every, n, extra):
    task = "chief:0"
    proc = job.start_task(task, args=["--steps", steps, "--log_every", log_every, *extra] +
                          (["--hook"] if hook else []))
    proc.reap(timeout=600)
    lines = job.progress(task)
    os.rename(job.log_path(task), job.log_path(task) + f".{n}")
    rates = [rate for _, _, rate in lines[1:]]  # The first interval is warm-up.
    return statistics.median(rates) if rates else 0.0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", required=True)
    ap.add_argument("--pairs", type=int, default=6)
    ap.add_argument("--steps", type=int, default=4000)
    ap.add_argument("--batch", type=int, default=32, help="tf1_ps.py's --batch (step size)")
    ap.add_argument("--baseline", choices=("none", "noop"), default="none",
                    help="without the hook: no hook at all, or a SessionRunHook that does "
                         "nothing (what TensorFlow's hook calls cost by themselves)")
    args = ap.parse_args()
    extra = ["--batch", args.batch]
    python = tensorflow_jobs.tf_python()
    d = tempfile.mkdtemp(prefix="tf-hook-cost-")
    cluster = tensorflow_jobs.loopback_cluster(ps=1, workers=0)
    grpc_port, http = free_port(), free_port()
    spec = json.loads(tf_config(cluster, "chief", 0))
    spec.pop("task")
    sidecar = Proc("sidecar", [os.path.join(args.bin, "trainscope-sidecar"), "--http_port",
                               str(http), "--grpc_port", str(grpc_port)], d,
                   {"TF_CONFIG": json.dumps(spec)}).start()
    env = {"PYTHONPATH": HOOK, "TRAINSCOPE_REPORT_ENDPOINT": f"127.0.0.1:{grpc_port}"}
    with_hook, without = [], []
    try:
        with tensorflow_jobs.Job("tf1", cluster, f"{d}/tf1", python=python, env=env) as job:
            job.start_task("ps:0")
            order = []
            for i in range(args.pairs):
                order += [True, False] if i % 2 == 0 else [False, True]
            for n, hook in enumerate(order):
                rate = one_round(job, hook, args.steps, args.steps // 8, n,
                                 extra + (["--noop_hook"] if args.baseline == "noop" and not hook
                                          else []))
                (with_hook if hook else without).append(rate)
                print(f"round {n + 1}: {'with' if hook else 'without'} the hook: "
                      f"{rate:.0f} steps/s", flush=True)
    finally:
        sidecar.stop(timeout=15)
    a, b = statistics.median(with_hook), statistics.median(without)
    pairs = [w / o for w, o in zip(with_hook, without) if o > 0]
    print(f"tf1_ps.py chief, batch {args.batch}, baseline {args.baseline}, {args.pairs} pairs "
          f"of {args.steps} steps (ABBA): per step {1e6 / a - 1e6 / b:+.0f} us; median "
          f"{a:.0f} steps/s with the hook, {b:.0f} without; ratio {a / b:.3f} "
          f"(cost {100 * (1 - a / b):+.1f}%); per-pair ratios {min(pairs):.3f} to "
          f"{max(pairs):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
