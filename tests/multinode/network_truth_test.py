#!/usr/bin/python3
"""The sidecars tell network faults apart on a real multi-node network (issue "Network truth").

Three nodes; ps:0 on n1, worker:0 on n2, worker:1 on n3; a sidecar per node with its default
flags (peers from the spec, gossip on its gRPC port). Each fault is made for real, and every
node's sidecar is read from inside its node:

  1. a silent route cut between n1 and n2 (the switch drops their packets): every view names
     the partition worker:0 -> ps:0 (worker:0 held up by it, ps:0 partitioned from it, neither
     dead nor hung); each side's /metrics says so for its own task; trainscopectl on n3 prints
     it. Healed: gone everywhere and worker:0 trains again.
  2. n3's link down: n1 and n2 see node n3 as one incident (silent, worker:1 unreachable
     because of it, not dead); n3 sees itself cut off (and trainscope_sidecar_isolated 1). Link
     back: all clear.
  3. kill -9 of worker:1 on n3: dead in every view.
  4. ps:0 slowed (700 ms per call): slow by its own figures in every view, each worker names it;
     no partition. Cleared: up again.

Usage: network_truth_test.py --bin build/bin [--keep_logs]. Exit 0 passed, 1 failed, 77
skipped (no root or no network namespaces; one line says why).
"""

import argparse
import re
import sys

sys.dont_write_bytecode = True

from trainscope_testing import diagnosis as d
from trainscope_testing import netns, training
from trainscope_testing.logs import logger

log = logger("network_truth")

DEADLINE_S = 240
NODES = (1, 2, 3)


def every(t, predicate):
    return d.in_every_view(t, NODES, predicate)


def metrics(c, t, node):
    status, body = c.http_get(node, t.sidecar_url(node, "/metrics"), 3.0)
    return body.decode(errors="replace") if status == 200 else ""


def partition(c, t):
    def both_sides_metrics():
        ps_series = 'trainscope_task_partitioned{cluster="%s",role="ps",task="0"} 1' % t.name
        # The link's incident joins the series a tick after the partition is named (within 2 s):
        # this check may come before it or after.
        worker_series = re.compile(
            r'^trainscope_task_partition\{cluster="%s",role="worker",task="0",peer_role="ps",'
            r'peer_task="0"(,incident="inc-[0-9a-f]+")?\} 1$' % re.escape(t.name), re.M)
        assert ps_series in metrics(c, t, 1), "n1's /metrics: ps:0 partitioned"
        assert worker_series.search(metrics(c, t, 2)), "n2's /metrics: worker:0 -> ps:0"
        log("ok: both sides' /metrics")
    d.partition_drill(c, t, NODES, log, named_s=20, healed_s=30, check=both_sides_metrics)


def isolated(c, t):
    c.link_down(3)
    s = d.wait("n1 and n2 see node n3 as cut off, worker:1 unreachable because of it", lambda: all(
        d.isolated_seen_from_outside(t.view(n), "n3", ["worker:1"]) for n in (1, 2)), 20)
    log(f"ok: n1 and n2 name n3 cut off after {s:.1f} s")
    s = d.wait("n3 sees itself cut off", lambda: d.isolated_seen_from_inside(t.view(3)), 20)
    log(f"ok: n3 names itself cut off after {s:.1f} s")
    assert "trainscope_sidecar_isolated 1" in metrics(c, t, 3), "n3's /metrics"
    for n in (1, 2):
        assert d.state_is(t.view(n), "worker:1", "unreachable"), f"n{n}: not dead, not hung"
    c.link_up(3)
    d.wait("link back: all up everywhere", lambda: every(t, lambda n, v: not v.get("isolated") and all(
        x["state"] == "up" for x in v["tasks"])), 40)
    log("ok: link back, all up")


def remote_death(c, t):
    t.kill("worker:1")
    s = d.wait("worker:1 dead in every view",
               lambda: every(t, lambda n, v: d.state_is(v, "worker:1", "dead")), 15)
    log(f"ok: worker:1 dead in every view after {s:.1f} s")
    t.start_task("worker:1")
    d.wait("worker:1 up again everywhere",
           lambda: every(t, lambda n, v: d.state_is(v, "worker:1", "up")), 40)


def slow_ps(c, t):
    t.fault("ps:0", parameter_delay_ms=700)
    s = d.wait("ps:0 blamed in every view", lambda: every(
        t, lambda n, v: d.ps_blamed(v, "ps:0", ["worker:0", "worker:1"])), 20)
    log(f"ok: ps:0 blamed in every view after {s:.1f} s; n2 says: "
        f"{d.task(t.view(2), 'ps:0')['reason'][:200]}")
    assert every(t, lambda n, v: d.no_partition(v)), "a slow ps is no partition"
    t.fault("ps:0", parameter_delay_ms=0)
    d.wait("ps:0 up again everywhere",
           lambda: every(t, lambda n, v: d.state_is(v, "ps:0", "up")), 30)
    log("ok: cleared")


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
            for scenario in (partition, isolated, remote_death, slow_ps):
                log(f"--- {scenario.__name__}")
                scenario(c, t)
    return netns.run_test("the network truth test", "multinode-truth-", DEADLINE_S, body,
                          args.keep_logs, log)


if __name__ == "__main__":
    sys.exit(main())
