#!/usr/bin/python3
"""Training rides through network faults with the flags users get (issue "Training rides through").

Three nodes (ps:0, worker:0, worker:1 one a node, as training.Layout.default(3) places them), a
sidecar per node, every task with its default flags (no retry count, no stretched deadline):

  1. a silent route cut for 15 s between ps:0's node and worker:0's: every view names the
     partition; both workers live through it; after the heal worker:0 trains on.
  2. worker:1's node isolated (link down) for 12 s: the other nodes name it cut off, worker:1
     lives through it and trains on after the link is back.

Prints, per fault, the training time lost beyond the fault itself: from the heal to the worker's
next step, as its own node's sidecar counts steps (a figure, not asserted). Usage:
ride_through_test.py --bin build/bin [--keep_logs]. Exit 0 passed, 1 failed, 77 skipped (no root
or no network namespaces; under CI=true a skip fails).
"""

import argparse
import sys
import time

sys.dont_write_bytecode = True

from trainscope_testing import diagnosis as d
from trainscope_testing import netns, training
from trainscope_testing.logs import logger

log = logger("ride_through")

DEADLINE_S = 240
NODES = (1, 2, 3)
CUT_S = 15
ISOLATED_S = 12


def every(t, predicate):
    return d.in_every_view(t, NODES, predicate)


def alive(t, *tasks):
    for task in tasks:
        p = t.proc(task)
        assert p.alive(), f"{task} exited ({p.returncode}): {p.log_path}:\n{p.tail(8)}"


def lost_after_heal(t, task, healed_at, steps_before):
    """Seconds from the heal to `task`'s next step (its own node's sidecar counts them)."""
    d.wait(f"{task} trains on after the heal",
           lambda: (t.steps(task) or 0) > steps_before, 30, interval=0.02)
    return time.monotonic() - healed_at


def node_of(t, task):
    return int(str(t.task_node[task]).lstrip("n"))


def cut(c, t):
    ps, w0 = node_of(t, "ps:0"), node_of(t, "worker:0")
    c.cut(ps, w0, how="drop")
    start = time.monotonic()
    s = d.wait("every view names the partition worker:0 -> ps:0", lambda: every(
        t, lambda n, v: d.partition_named(v, "worker:0", "ps:0")), 20)
    log(f"ok: partition named in every view after {s:.1f} s; worker:0: "
        f"{d.task(t.view(3), 'worker:0')['reason'][:160]}")
    time.sleep(max(0.0, CUT_S - (time.monotonic() - start)))
    alive(t, "worker:0", "worker:1")
    steps = t.steps("worker:0") or 0
    c.heal(ps, w0)
    lost = lost_after_heal(t, "worker:0", time.monotonic(), steps)
    log(f"figure: a {CUT_S} s cut cost worker:0 {lost:.2f} s beyond the cut")
    d.wait("healed: no partition in any view, every task up", lambda: every(
        t, lambda n, v: d.no_partition(v) and all(x["state"] == "up" for x in v["tasks"])), 30)
    alive(t, "worker:0", "worker:1")
    log("ok: both workers lived through the cut and train on")


def isolated(c, t):
    n = node_of(t, "worker:1")
    others = [x for x in NODES if x != n]
    c.link_down(n)
    start = time.monotonic()
    s = d.wait(f"the other nodes see n{n} cut off, worker:1 unreachable because of it", lambda: all(
        d.isolated_seen_from_outside(t.view(o), f"n{n}", ["worker:1"]) for o in others), 20)
    log(f"ok: n{n} named cut off after {s:.1f} s")
    time.sleep(max(0.0, ISOLATED_S - (time.monotonic() - start)))
    alive(t, "worker:1")
    steps = t.steps("worker:1") or 0
    c.link_up(n)
    lost = lost_after_heal(t, "worker:1", time.monotonic(), steps)
    log(f"figure: {ISOLATED_S} s cut off cost worker:1 {lost:.2f} s beyond the isolation")
    d.wait("link back: all up everywhere", lambda: every(t, lambda m, v: not v.get("isolated") and all(
        x["state"] == "up" for x in v["tasks"])), 40)
    alive(t, "worker:0", "worker:1")
    log("ok: worker:1 lived through its node's isolation and trains on")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", required=True)
    ap.add_argument("--keep_logs", action="store_true")
    args = ap.parse_args()

    def body(logs):
        with netns.Cluster(3, log_dir=logs) as c:
            t = training.TrainingCluster(c, args.bin, training.Layout.default(3))
            t.start()
            t.wait_training(60, log=log)
            d.wait("every sidecar sees every task up", lambda: every(
                t, lambda n, v: all(x["state"] == "up" for x in v["tasks"])), 30)
            for scenario in (cut, isolated):
                log(f"--- {scenario.__name__}")
                scenario(c, t)
    return netns.run_test("the ride-through test", "multinode-ride-", DEADLINE_S, body,
                          args.keep_logs, log)


if __name__ == "__main__":
    sys.exit(main())
