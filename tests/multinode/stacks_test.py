#!/usr/bin/python3
"""Where a stuck task is stuck, read from another node (issue "Why it is stuck").

Three nodes; ps:0 on n1, worker:0 on n2, worker:1 on n3; a sidecar per node (--stall_after_s 2).
Each wedge is made for real and every node's sidecar is read from inside its own node:

  1. ps:0 stopped (SIGSTOP): hung in every view; its snapshot, taken by n1's sidecar, read on
     n2 and n3 through their own sidecars (fetched over the exchange): the process stopped
     (state T), its main thread in ServeUntilDone; each worker's reason, in every view, says it
     waits in a call to ps:0 and that ps:0 is hung. `trainscopectl stacks ps:0` on n3 prints it.
     SIGCONT: ps:0 still stopped until then, and everything trains on.
  2. worker:0 deadlocked (two mutexes): stalled in every view, "deadlock?" and both threads'
     functions in its reason; n1 reads both lock functions in the snapshot.

Prints, per wedge, the time from the fault to the state in every view and to the snapshot in
every view (--rounds N repeats them: the bench). Usage: stacks_test.py --bin build/bin
[--rounds N] [--keep_logs]. Exit 0 passed, 1 failed, 77 skipped (no root or no namespaces).
"""

import argparse
import signal
import statistics
import sys
import time

sys.dont_write_bytecode = True

from trainscope_testing import diagnosis as d
from trainscope_testing import netns, training
from trainscope_testing.logs import logger

log = logger("stacks")

NODES = (1, 2, 3)
FIGURES = {}  # wedge -> [(state in every view s, snapshot in every view s)]


def every(t, predicate):
    return d.in_every_view(t, NODES, predicate)


def snapshot_everywhere(t, task, since_unix, trigger):
    """The newest snapshot of task with `trigger`, taken after since_unix, in every node's
    /api/v1/stacks (None until every node shows one)."""
    found = None
    for n in NODES:
        snaps = [s for s in t.stacks(task, n).get("snapshots", [])
                 if s.get("trigger") == trigger and s.get("taken_unix", 0) >= since_unix]
        if not snaps:
            return None
        found = found or snaps[0]
    return found


def frames(snapshot):
    return [f.get("function", "") for th in snapshot.get("threads", [])
            for f in th.get("frames", [])]


def measure(name, t, task, state, trigger, fault_unix, reason_has=""):
    start = time.monotonic() - (time.time() - fault_unix)
    d.wait(f"{task} {state} in every view", lambda: every(
        t, lambda n, v: d.state_is(v, task, state)), 20)
    in_views = time.monotonic() - start
    if reason_has:
        d.wait(f"{reason_has!r} in {task}'s reason in every view", lambda: every(
            t, lambda n, v: reason_has in d.task(v, task).get("reason", "")), 20)
        log(f"    {reason_has!r} in every view {time.monotonic() - start:.2f} s after the fault")
    snap = {}
    d.wait(f"a snapshot of {task} in every node's /api/v1/stacks", lambda: snap.update(
        s=snapshot_everywhere(t, task, fault_unix - 1, trigger)) or snap["s"] is not None, 20)
    in_stacks = time.monotonic() - start
    FIGURES.setdefault(name, []).append((in_views, in_stacks))
    log(f"ok: {task} {state} in every view {in_views:.2f} s after the fault, its snapshot in "
        f"every view {in_stacks:.2f} s after (capture paused it {snap['s'].get('pause_ms_max')} "
        f"ms at most)")
    return snap["s"]


def stopped_ps(c, t):
    trains_on(t, "worker:0")
    p = t.kill("ps:0", signal.SIGSTOP)
    fault = time.time()
    try:
        snap = measure("SIGSTOP ps", t, "ps:0", "hung", "hung", fault)
        assert snap["process_state"] == "T", snap["process_state"]
        assert snap["node"].startswith(c.address(1)), f"taken by n1's sidecar: {snap['node']}"
        assert any("ServeUntilDone" in f for f in frames(snap)), frames(snap)[:20]
        d.wait("each worker, in every view, waits in a call to ps:0, which is hung", lambda: every(
            t, lambda n, v: all("to ps:0" in d.task(v, w)["reason"]
                                and "ps:0 is hung" in d.task(v, w)["reason"]
                                for w in ("worker:0", "worker:1"))), 20)
        log(f"ok: n3 says worker:0 {d.task(t.view(3), 'worker:0')['reason'][:240]}")
        r = t.ctl_stacks(3, "ps:0")
        assert r.returncode == 0 and "=== ps:0" in r.stdout and "ServeUntilDone" in r.stdout, (
            f"trainscopectl stacks ps:0 on n3:\n{r.stdout}{r.stderr}")
        log("ok: trainscopectl stacks ps:0 on n3:\n    "
            + "\n    ".join(r.stdout.splitlines()[:8]))
        with open(f"/proc/{p.pid}/stat") as f:
            assert f.read().rsplit(")", 1)[1].split()[0] == "T", "still stopped after capture"
    finally:
        t.kill("ps:0", signal.SIGCONT)
    d.wait("all up again in every view", lambda: every(
        t, lambda n, v: all(x["state"] == "up" for x in v["tasks"])), 40)
    trains_on(t, "worker:1")
    log("ok: SIGCONT, all up and training")


def trains_on(t, task):
    steps = t.steps(task) or 0
    d.wait(f"{task} trains on", lambda: (t.steps(task) or 0) > steps + 5, 30)


def deadlocked_worker(c, t):
    trains_on(t, "worker:0")
    t.wedge("worker:0", deadlock_training=True)
    fault = time.time()
    snap = measure("deadlocked worker", t, "worker:0", "stalled", "stalled", fault, "deadlock?")
    fs = frames(t.stacks("worker:0", 1)["snapshots"][0])
    for fn in ("FaultInjector::TakeAThenB", "FaultInjector::TakeBThenA"):
        assert any(fn in f for f in fs), f"n1 reads {fn}: {fs[:30]}"
    assert snap["node"].startswith(c.address(2)), snap["node"]
    log(f"ok: n1 says worker:0 {d.task(t.view(1), 'worker:0')['reason'][:240]}")
    t.kill("worker:0")
    t.start_task("worker:0")
    d.wait("worker:0 up again", lambda: every(t, lambda n, v: d.state_is(v, "worker:0", "up")), 60)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", required=True)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--keep_logs", action="store_true")
    args = ap.parse_args()

    def body(logs):
        with netns.Cluster(3, log_dir=logs) as c:
            layout = training.Layout.parse("ps:0@1,worker:0@2,worker:1@3")
            # The tasks' flags are the defaults users get; a short stall threshold keeps the
            # deadlock wedge short.
            t = training.TrainingCluster(c, args.bin, layout,
                                         sidecar_args=["--stall_after_s", "2"])
            t.start()
            t.wait_training(60, log=log)
            d.wait("every sidecar sees every task up", lambda: every(
                t, lambda n, v: all(x["state"] == "up" for x in v["tasks"])), 30)
            for i in range(args.rounds):
                for scenario in (stopped_ps, deadlocked_worker):
                    log(f"--- {scenario.__name__} (round {i + 1})")
                    scenario(c, t)
        for name, runs in FIGURES.items():
            views = [a for a, _ in runs]
            stacks = [b for _, b in runs]
            log(f"figures: {name}: fault -> state in every view median {statistics.median(views):.2f} s "
                f"(max {max(views):.2f}), fault -> snapshot in every view median "
                f"{statistics.median(stacks):.2f} s (max {max(stacks):.2f}); "
                f"snapshot after state: median {statistics.median(b - a for a, b in runs):.2f} s "
                f"over {len(runs)} round(s)")
    return netns.run_test("the stacks test", "multinode-stacks-", 100 + 90 * args.rounds, body,
                          args.keep_logs, log)


if __name__ == "__main__":
    sys.exit(main())
