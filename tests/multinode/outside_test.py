#!/usr/bin/python3
"""An unmodified cluster watched from outside, on a real multi-node network (issue 21).

Three nodes; four Python gRPC servers on Debian's python3-grpcio as the cluster's tasks (no
trainscope runtime, no heartbeat): ps:0 on n1, ps:1 and worker:0 on n2, worker:1 on n3; a
sidecar per node with its default flags and the spec. Every node's sidecar is read from inside
its own node:

  1. every task up in every view, each watched from outside by its own node's sidecar (pid in
     the reason);
  2. kill -9 of worker:1 on n3: dead in every view; started again: up, one restart counted;
  3. ps:0 stopped (SIGSTOP) on n1: hung in every view, the reason giving its /proc state;
     SIGCONT: up again;
  4. n3's link down: n1 and n2 see node n3 cut off, worker:1 unreachable because of it (not
     dead); n3 sees itself cut off. Link back: all up.

Then a mixed cluster on three fresh nodes: runtime ps:0 on n1 and worker:0 on n2 training
(linear_regression), worker:1 on n3 a Python gRPC server (a worker not yet moved over):

  5. all up, worker:1 watched from outside in every view;
  6. n1 and n2 cut apart (packets dropped): every view names the partition worker:0 -> ps:0,
     worker:1 stays up; healed;
  7. n3's link down: worker:1 unreachable because its node is cut off, in n1's and n2's views.

Prints trainscopectl status from n2 after each fault. Usage: outside_test.py --bin build/bin
[--keep_logs]. Exit 0 passed, 1 failed, 77 skipped (no root or no network namespaces).
"""

import argparse
import signal
import sys

sys.dont_write_bytecode = True

from trainscope_testing import diagnosis as d
from trainscope_testing import netns, outside_servers, training
from trainscope_testing.logs import logger

log = logger("outside")

DEADLINE_S = 300
NODES = (1, 2, 3)
OUTSIDE = "watched from outside (no trainscope heartbeat)"


class OutsideCluster(training.TrainingCluster):
    """A TrainingCluster whose tasks in `outside` (default: all) are Python gRPC servers, the
    others linear_regression."""

    def __init__(self, *args, outside=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.outside = set(self.task_node) if outside is None else set(outside)

    def task_argv(self, task, tls_flags=None):
        if task not in self.outside:
            return super().task_argv(task, tls_flags)
        host, port = self.task_address[task].rsplit(":", 1)
        return outside_servers.argv("grpc", int(port), health=task.startswith("ps:"), host=host)


def every(t, predicate):
    return d.in_every_view(t, NODES, predicate)


def status_from(t, node, what):
    r = t.ctl_status(node)
    log(f"trainscopectl status on n{node} ({what}):\n    " + "\n    ".join(r.stdout.splitlines()))


def show_views(t):
    for n in NODES:
        try:
            for x in t.view(n)["tasks"]:
                log(f"  n{n}: {x['name']} {x['state']}: {x['reason']}")
        except Exception as e:  # only to tell what the views were
            log(f"  n{n}: no view ({e})")


def all_up(t):
    try:
        d.wait("every task up in every view, watched from outside", lambda: every(
            t, lambda n, v: all(x["state"] == "up" and OUTSIDE in x["reason"]
                                for x in v["tasks"])), 40)
    except Exception:
        show_views(t)
        raise
    for task in t.task_node:
        pid = t.proc(task).pid
        mine = d.task(t.view(t.task_node[task]), task)
        assert f"pid {pid}" in mine["reason"], f"{task}'s own node names pid {pid}: {mine}"
    log(f"ok: all up; n1 says ps:0 {d.task(t.view(1), 'ps:0')['reason']}")


def killed_and_restarted(t):
    t.kill("worker:1")
    d.wait("worker:1 dead in every view",
           lambda: every(t, lambda n, v: d.state_is(v, "worker:1", "dead")), 20)
    log(f"ok: worker:1 dead; n1 says {d.task(t.view(1), 'worker:1')['reason']}")
    status_from(t, 2, "worker:1 killed")
    t.start_task("worker:1")
    d.wait("worker:1 up again with a restart, in every view", lambda: every(
        t, lambda n, v: d.state_is(v, "worker:1", "up")
        and d.task(v, "worker:1").get("restarts") == 1), 40)
    log("ok: worker:1 up again, 1 restart in every view")


def stopped(t):
    t.kill("ps:0", signal.SIGSTOP)
    try:
        d.wait("ps:0 hung (stopped) in every view", lambda: every(
            t, lambda n, v: d.state_is(v, "ps:0", "hung")
            and "stopped (state T" in d.task(v, "ps:0")["reason"]), 20)
        log(f"ok: ps:0 hung; n3 says {d.task(t.view(3), 'ps:0')['reason']}")
        status_from(t, 2, "ps:0 stopped")
    finally:
        t.kill("ps:0", signal.SIGCONT)
    d.wait("ps:0 up again in every view",
           lambda: every(t, lambda n, v: d.state_is(v, "ps:0", "up")), 30)
    log("ok: ps:0 up after SIGCONT")


def cut_off(c, t):
    c.link_down(3)
    d.wait("n1 and n2 see node n3 cut off, worker:1 unreachable because of it", lambda: all(
        d.isolated_seen_from_outside(t.view(n), "n3", ["worker:1"]) for n in (1, 2)), 30)
    d.wait("n3 sees itself cut off", lambda: d.isolated_seen_from_inside(t.view(3)), 30)
    log(f"ok: n3 cut off; n1 says worker:1 {d.task(t.view(1), 'worker:1')['reason']}")
    status_from(t, 2, "n3 cut off")
    c.link_up(3)
    d.wait("link back: all up everywhere", lambda: every(
        t, lambda n, v: not v.get("isolated") and all(x["state"] == "up" for x in v["tasks"])),
        40)
    log("ok: link back, all up")


def mixed(c, t):
    """Runtime ps:0@n1 and worker:0@n2, outside worker:1@n3."""
    d.wait("all up in every view, worker:1 watched from outside", lambda: every(
        t, lambda n, v: all(x["state"] == "up" for x in v["tasks"])
        and OUTSIDE in d.task(v, "worker:1")["reason"]
        and OUTSIDE not in d.task(v, "worker:0")["reason"]), 40)
    status_from(t, 2, "mixed cluster, all up")
    d.partition_drill(c, t, NODES, log, named_s=20, healed_s=30, check=lambda: d.wait(
        "worker:1 (outside) up in every view during the cut", lambda: every(
            t, lambda n, v: d.state_is(v, "worker:1", "up")), 10))
    c.link_down(3)
    d.wait("n1 and n2 see node n3 cut off, outside worker:1 unreachable because of it",
           lambda: all(d.isolated_seen_from_outside(t.view(n), "n3", ["worker:1"])
                       for n in (1, 2)), 30)
    log(f"ok: n3 cut off; n2 says worker:1 {d.task(t.view(2), 'worker:1')['reason']}")
    c.link_up(3)
    d.wait("link back: all up everywhere", lambda: every(
        t, lambda n, v: all(x["state"] == "up" for x in v["tasks"])), 40)
    log("ok: mixed cluster: partition and cut-off node named, outside task alike")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", required=True)
    ap.add_argument("--keep_logs", action="store_true")
    args = ap.parse_args()

    def body(logs):
        with netns.Cluster(3, log_dir=logs) as c:
            layout = training.Layout.parse("ps:0@1,ps:1@2,worker:0@2,worker:1@3")
            t = OutsideCluster(c, args.bin, layout)
            t.start()
            all_up(t)
            status_from(t, 2, "all up")
            killed_and_restarted(t)
            stopped(t)
            cut_off(c, t)
        with netns.Cluster(3, log_dir=logs) as c:
            layout = training.Layout.parse("ps:0@1,worker:0@2,worker:1@3")
            t = OutsideCluster(c, args.bin, layout, outside=["worker:1"])
            t.start()
            t.wait_training(60, tasks=["worker:0"], log=log)
            mixed(c, t)
    return netns.run_test("the outside-tasks test", "multinode-outside-", DEADLINE_S, body,
                          args.keep_logs, log)


if __name__ == "__main__":
    sys.exit(main())
