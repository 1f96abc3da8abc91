#!/usr/bin/env python3
"""What checkpoints cost a training run, and how long a ps restart stops it, measured from the
tasks' own log lines (linear_regression, one ps and one worker on loopback, batches of one example so that the
steps are Pull/Push, not data generation).

  scripts/python tests/bench/checkpoint_bench.py --bin build/bin [--features 250000]
      [--steps 600] [--every_steps 100] [--restarts 3]

dip:     the worker logs every step; a run without checkpoints and one with a checkpoint every
         --every_steps steps. Prints the median step time of each, the step that copies the
         values (the one after the pull a checkpoint is taken from), the steps while the writer
         thread writes, and the checkpoint's size and write time.
restart: a run with a checkpoint every second; the ps is killed (kill -9) and started again,
         --restarts times. Prints, per restart, the ps's restore time, and the time from the new
         ps's "listening" line to the worker's "going on from step" line (training again) and to
         its next finished step.

Standard library only.
"""

import argparse
import datetime
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import tempfile
import time

from trainscope_testing.cluster_spec import tf_config
from trainscope_testing.ports import free_port

STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}) ")


def stamp(line):
    m = STAMP.match(line)
    if not m:
        return None
    return datetime.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S.%f").timestamp()


class Cluster:
    def __init__(self, binary, work):
        self.binary, self.work = binary, work
        self.spec = {"ps": [f"127.0.0.1:{free_port()}"], "worker": [f"127.0.0.1:{free_port()}"]}

    def start(self, role, args, log):
        tf = tf_config(self.spec, role, 0)
        env = dict(os.environ, TF_CONFIG=tf)
        out = open(os.path.join(self.work, log), "w")
        return subprocess.Popen([self.binary, "--disable_tracing"] + args, env=env, stdout=out,
                                stderr=subprocess.STDOUT)

    def lines(self, log):
        with open(os.path.join(self.work, log)) as f:
            return f.read().splitlines()


def run_dip(binary, features, steps, every_steps):
    results = {}
    for name, extra in (("none", []), ("checkpoints", ["--checkpoint_every_steps",
                                                       str(every_steps)])):
        work = tempfile.mkdtemp(prefix=f"ckpt_bench_{name}_")
        c = Cluster(binary, work)
        common = ["--features", str(features), "--batch_size", "1", "--learning_rate", "1e-6",
              "--checkpoint_dir", os.path.join(work, "ckpt")]
        ps = c.start("ps", common, "ps.log")
        w = c.start("worker", common + extra + ["--steps", str(steps), "--log_every", "1"],
                    "worker.log")
        w.wait(600)
        ps.wait(30)
        step_at, saved = {}, []
        for line in c.lines("worker.log"):
            m = re.search(r" step (\d+)/\d+ loss", line)
            if m:
                step_at[int(m.group(1))] = stamp(line)
            m = re.search(r"checkpoint of step (\d+) saved .* \((\d+) variables, (\d+) bytes, "
                          r"([0-9.]+) ms\)", line)
            if m:
                saved.append((int(m.group(1)), stamp(line), int(m.group(3)), float(m.group(4))))
        times = {s: step_at[s] - step_at[s - 1] for s in step_at if s - 1 in step_at}
        first, last = min(step_at), max(step_at)
        r = {"median_step_ms": 1000 * statistics.median(times.values()),
             "steps_per_s": (last - first) / (step_at[last] - step_at[first])}
        if saved:
            copy = [times[s + 1] for s, *_ in saved if s + 1 in times]
            during = [times[s] for k, at, *_ in saved for s in times
                      if s > k + 1 and step_at[s] <= at]
            r.update({"copy_step_ms": 1000 * statistics.median(copy),
                      "steps_during_write_ms": 1000 * statistics.median(during) if during else 0,
                      "checkpoint_bytes": saved[-1][2],
                      "write_ms": statistics.median(x[3] for x in saved)})
        results[name] = r
        shutil.rmtree(work, ignore_errors=True)
    return results


def run_restarts(binary, features, restarts):
    work = tempfile.mkdtemp(prefix="ckpt_bench_restart_")
    c = Cluster(binary, work)
    common = ["--features", str(features), "--batch_size", "1", "--learning_rate", "1e-6",
              "--checkpoint_dir", os.path.join(work, "ckpt")]
    ps = c.start("ps", common, "ps0.log")
    w = c.start("worker", common + ["--checkpoint_every_s", "1", "--steps", "100000000",
                                    "--log_every", "1"],
                "worker.log")
    out = []
    for i in range(1, restarts + 1):
        # Until the worker trains and has saved a checkpoint since the last restart.
        deadline = time.time() + 120
        while time.time() < deadline and sum(
                "checkpoint of step" in x for x in c.lines("worker.log")) < 2 * i:
            time.sleep(0.2)
        time.sleep(1.5)
        ps.send_signal(signal.SIGKILL)
        ps.wait()
        time.sleep(0.5)
        ps = c.start("ps", common, f"ps{i}.log")
        time.sleep(3)
        listening = restore_ms = None
        for line in c.lines(f"ps{i}.log"):
            m = re.search(r"restored .* in ([0-9.]+) ms", line)
            if m:
                restore_ms = float(m.group(1))
            if "listening on" in line:
                listening = stamp(line)
        going = next_step = None
        for line in c.lines("worker.log"):
            t = stamp(line)
            if t is None or listening is None or t < listening:
                continue
            if going is None and "going on from step" in line:
                going = t
            elif going is not None and re.search(r" step \d+/\d+ loss", line):
                next_step = t
                break
        out.append({"restore_ms": restore_ms,
                    "to_going_on_s": going - listening if going else None,
                    "to_next_step_s": next_step - listening if next_step else None})
    w.send_signal(signal.SIGKILL)
    ps.send_signal(signal.SIGKILL)
    w.wait()
    ps.wait()
    shutil.rmtree(work, ignore_errors=True)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", required=True)
    ap.add_argument("--features", type=int, default=250000)
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--every_steps", type=int, default=100)
    ap.add_argument("--restarts", type=int, default=3)
    a = ap.parse_args()
    binary = os.path.join(a.bin, "linear_regression")
    print(json.dumps({"features": a.features,
                      "dip": run_dip(binary, a.features, a.steps, a.every_steps),
                      "restart": run_restarts(binary, a.features, a.restarts)}, indent=1))


if __name__ == "__main__":
    main()
