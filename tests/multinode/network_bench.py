#!/usr/bin/python3
"""The time from each network fault to its right name, on a real multi-node network.

Three nodes (ps:0 on n1, worker:0 on n2, worker:1 on n3, a sidecar each, default flags). Over
--trials trials of each, it makes the fault for real and times, reading every sidecar from
inside its node every 50 ms:

  partition   a silent cut between n1 and n2 (the switch drops) -> every view names the
              partition worker:0 -> ps:0
  isolated    n3's link down -> n1 and n2 name node n3 cut off (and n3 names itself)
  remote kill kill -9 of worker:1 on n3 -> dead in every view
  slow ps     ps:0's parameter calls 700 ms late -> every view calls ps:0 slow by its own
              figures and each worker names it

Each fault is undone and the cluster back to all up before the next trial. Prints the median
and the worst of each (docs/sidecar.md). Not a test: figures. Usage:
  scripts/python tests/multinode/network_bench.py --bin build/bin [--trials 10]
"""

import argparse
import statistics
import sys
import tempfile
import time

sys.dont_write_bytecode = True

from trainscope_testing import diagnosis as d
from trainscope_testing import netns, training
from trainscope_testing.logs import logger

log = logger("network_bench")

NODES = (1, 2, 3)


def every(t, predicate, nodes=NODES):
    vs = d.views(t, nodes)
    return len(vs) == len(nodes) and all(predicate(v) for v in vs.values())


def all_up(t):
    return every(t, lambda v: not v.get("isolated") and not v.get("partitions") and all(
        x["state"] == "up" for x in v["tasks"]))


def trial_partition(c, t):
    c.cut(1, 2, how="drop")
    s = d.wait("partition named", lambda: every(
        t, lambda v: d.partition_named(v, "worker:0", "ps:0")), 30)
    c.heal(1, 2)
    return s


def trial_isolated(c, t):
    c.link_down(3)
    s = d.wait("n3 named cut off", lambda: every(
        t, lambda v: d.isolated_seen_from_outside(v, "n3", ["worker:1"]), (1, 2)), 30)
    inside = d.wait("n3 sees itself cut off", lambda: d.isolated_seen_from_inside(t.view(3)), 30)
    c.link_up(3)
    return max(s, inside)


def trial_kill(c, t):
    t.kill("worker:1")
    s = d.wait("worker:1 dead everywhere", lambda: every(
        t, lambda v: d.state_is(v, "worker:1", "dead")), 30)
    t.start_task("worker:1")
    return s


def trial_slow(c, t):
    t.fault("ps:0", parameter_delay_ms=700)
    s = d.wait("ps:0 blamed everywhere", lambda: every(
        t, lambda v: d.ps_blamed(v, "ps:0", ["worker:0", "worker:1"])), 30)
    t.fault("ps:0", parameter_delay_ms=0)
    return s


TRIALS = [("cut -> partition named in every view", trial_partition),
          ("link down -> node named cut off (both sides)", trial_isolated),
          ("remote kill -9 -> dead in every view", trial_kill),
          ("ps slowed -> ps blamed in every view", trial_slow)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", required=True)
    ap.add_argument("--trials", type=int, default=10)
    args = ap.parse_args()
    netns.skip_unless_supported("the network bench")
    netns.limit_time(120 + 60 * args.trials)
    results = {name: [] for name, _ in TRIALS}
    with netns.Cluster(3, log_dir=tempfile.mkdtemp(prefix="multinode-bench-"), log=lambda m: None) as c:
        t = training.TrainingCluster(c, args.bin, training.Layout.default(3))
        t.start()
        t.wait_training(60)
        d.wait("all up", lambda: all_up(t), 60)
        for i in range(args.trials):
            for name, run in TRIALS:
                results[name].append(run(c, t))
                d.wait("back to all up", lambda: all_up(t), 90)
                time.sleep(1)
            log(f"trial {i + 1}/{args.trials}: " + ", ".join(
                f"{v[-1]:.2f} s" for v in results.values()))
    netns.limit_time(0)
    print(f"\n{args.trials} trials each, 3 nodes, default flags")
    print(f"{'fault -> named':48s} {'median':>8s} {'worst':>8s}")
    for name, values in results.items():
        print(f"{name:48s} {statistics.median(values):7.2f}s {max(values):7.2f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
