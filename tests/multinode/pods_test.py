#!/usr/bin/python3
"""Tasks run as pods, watched by a sidecar outside them (issue "Right inside containers").

The whole test runs in an outer PID namespace of its own (unshare -pf --mount-proc), so that PID 1
is this test and nothing can ever reach the machine's init. Three network namespaces on a
bridge: n1 is the node, with the sidecar (its default flags, no peers, --local_tasks naming the
pods' tasks); n2 and n3 are the pods of ps:0 and worker:0: each its own network namespace (a pod
IP on the bridge), each task started in its own PID, mount and UTS namespaces (both are pid 1
there and both listen on port 2222, as pods do), as a hostPID sidecar sees pods:

  1. both up, and the sidecar names each task's process by its node's pid (found by its
     listening socket on the pod's address in the pod's network namespace, and NSpid), never
     the pid 1 each reports, nor the other pod's;
  2. ps:0 stopped (SIGSTOP): hung, "stopped", both pids named; its snapshot is its own (its
     command, its ServeUntilDone), never the outer PID 1's; SIGCONT: up, worker:0 trains on;
  3. detection, pod against bare process in the same run: worker:0 (a pod) and worker:1 (a bare
     process beside the sidecar) each stopped (-> hung), continued (-> up) and killed (-> dead,
     then started again), --rounds times; the times are printed (figures, not asserted);
  4. chief:0, a gRPC server without trainscope's heartbeat (as TensorFlow is) in a pod of its own:
     up from outside as its node's pid (found by the socket it holds in its pod's network
     namespace), stopped -> hung, continued -> up;
  5. ps:0 killed (kill -9): dead.

Usage: pods_test.py --bin build/bin [--rounds N] [--keep_logs]. Exit 0 passed, 1 failed, 77 skipped (no root
or no network namespaces; under CI=true a skip fails).
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import time

sys.dont_write_bytecode = True

from trainscope_testing import diagnosis as d
from trainscope_testing import netns, outside_servers
from trainscope_testing.cluster_spec import tf_config
from trainscope_testing.logs import logger

log = logger("pods")

DEADLINE_S = 150  # With --rounds 1; add about 10 s a round.
OUTER = "TRAINSCOPE_PODS_TEST_OUTER"


def children(pid):
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return [int(x) for x in f.read().split()]


def ns_pids(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("NSpid:"):
                return [int(x) for x in line.split()[1:]]
    return []


def pod_of(pid):
    """The process that `unshare --pid --fork` (pid) started as pid 1 of its pod, once there is
    one; None before. The node's wrapper (`sh -c 'hostname "$0" && exec "$@"'`) runs `hostname`
    as a child of that same pid first: on a loaded machine the first child seen was that."""
    for c in children(pid):
        try:
            if len(ns_pids(c)) > 1:
                return c
        except OSError:  # Gone already: the wrapper's `hostname`.
            continue
    return None


def wait_for_pod(what, pid):
    """pod_of(pid), waited for up to 10 s."""
    found = []
    d.wait(what, lambda: found.append(pod_of(pid)) or found[-1], 10)
    return found[-1]


class Pods:
    def __init__(self, c, bin_dir, logs):
        self.c, self.bin = c, bin_dir
        self.spec = {"ps": [f"{c.address(2)}:2222"],
                     "worker": [f"{c.address(3)}:2222", f"{c.address(1)}:2222"],
                     "chief": [f"{c.address(4)}:2222"]}
        self.spec_path = os.path.join(logs, "cluster_spec.json")
        with open(self.spec_path, "w") as f:
            json.dump({"cluster": self.spec}, f)
        self.url = f"http://{c.address(1)}:9400"

    def start_task(self, task):
        """Starts a task: ps:0 and worker:0 as pods (their own PID namespace, where each is pid
        1, mount and UTS namespaces, on their own nodes' networks), worker:1 as a bare process
        beside the sidecar. Its pid on this node."""
        role, index = task.split(":")
        argv = [os.path.join(self.bin, "linear_regression"), "--cluster_name", "pods"]
        if role == "worker":
            argv += ["--steps", "1000000000", "--step_delay_ms", "10", "--log_every", "100000"]
        pod = task != "worker:1"
        if pod:
            argv = ["unshare", "--pid", "--fork", "--mount-proc", "--", *argv]
        node = {"ps:0": 2, "worker:0": 3, "worker:1": 1}[task]
        p = self.c.spawn(node, argv, env={"TF_CONFIG": tf_config(self.spec, role, index)},
                         name=task)
        if not pod:
            return p.pid
        return wait_for_pod(f"{task} runs in its pod", p.pid)

    def start_outside(self):
        """chief:0: a gRPC server without trainscope's heartbeat (as TensorFlow is), in a pod of
        its own on n4, pid 1 there like the others. Its pid on this node."""
        argv = ["unshare", "--pid", "--fork", "--mount-proc", "--",
                *outside_servers.argv("grpc", 2222, host=self.c.address(4))]
        p = self.c.spawn(4, argv, name="chief:0")
        return wait_for_pod("chief:0 runs in its pod", p.pid)

    def start(self):
        self.pids = {t: self.start_task(t) for t in ("ps:0", "worker:0", "worker:1")}
        self.pids["chief:0"] = self.start_outside()
        self.sidecar = self.c.spawn(1, [os.path.join(self.bin, "trainscope-sidecar"),
                                        "--cluster_spec", self.spec_path, "--cluster_name", "pods",
                                        "--local_tasks", "ps:0,worker:0,worker:1,chief:0",
                                        "--peer_sidecars", "none"], name="sidecar")
        self.ps_pid = self.pids["ps:0"]
        self.worker_pid = self.pids["worker:0"]
        for pid in (self.ps_pid, self.worker_pid):
            assert ns_pids(pid) == [pid, 1], ns_pids(pid)
        log(f"ps:0 is pid {self.ps_pid} here, worker:0 pid {self.worker_pid}, both pid 1 in their "
            f"pods; this test is pid {os.getpid()}")

    def get(self, path):
        status, body = self.c.http_get(1, self.url + path, 3.0)
        assert status == 200, f"GET {path}: {status} {body[:300]!r}"
        return json.loads(body)

    def task(self, name):
        return d.task(self.get("/api/v1/tasks"), name)

    def state(self, name, state, has=""):
        t = self.task(name)
        return t["state"] == state and has in t.get("reason", "")


def up(p):
    s = d.wait("ps:0 and worker:0 up, worker:0 training", lambda: p.state("ps:0", "up")
               and p.state("worker:0", "up", "training"), 60)
    ps, worker = p.task("ps:0"), p.task("worker:0")
    assert int(ps.get("pid", 0)) == p.ps_pid, f"ps:0's pid in the API: {ps.get('pid')}"
    assert int(worker.get("pid", 0)) == p.worker_pid, f"worker:0's pid: {worker.get('pid')}"
    log(f"ok: up after {s:.1f} s; ps:0 is pid {ps['pid']}, worker:0 pid {worker['pid']} in the "
        f"API: {ps['reason'][:120]}")


def stopped(p):
    p.c.signal(p.ps_pid, signal.SIGSTOP)
    try:
        s = d.wait("ps:0 hung, stopped, both pids named", lambda: p.state(
            "ps:0", "hung", f"process {p.ps_pid} (pid 1 in its own PID namespace) is stopped"), 15)
        log(f"ok: hung after {s:.1f} s: {p.task('ps:0')['reason'][:200]}")
        snaps = d.wait("ps:0's snapshot", lambda: p.get("/api/v1/stacks?task=ps:0")
                       .get("snapshots"), 20)
        snap = p.get("/api/v1/stacks?task=ps:0")["snapshots"][0]
        assert int(snap["pid"]) == p.ps_pid, f"the snapshot's pid: {snap['pid']}"
        assert snap["command"].startswith("linear_regr"), f"its command: {snap['command']}"
        frames = [f.get("function", "") for t in snap.get("threads", [])
                  for f in t.get("frames", [])]
        assert any("ServeUntilDone" in f for f in frames), frames[:20]
        log(f"ok: its own snapshot after {snaps:.1f} s: pid {snap['pid']}, {snap['command']}, "
            f"{len(snap.get('threads', []))} threads, ServeUntilDone among them")
    finally:
        p.c.signal(p.ps_pid, signal.SIGCONT)
    steps = p.task("worker:0").get("steps", 0)
    d.wait("SIGCONT: ps:0 up, worker:0 trains on", lambda: p.state("ps:0", "up")
           and int(p.task("worker:0").get("steps", 0)) > int(steps), 30)
    log("ok: up again, worker:0 trains on")


def outside(p):
    """A task without trainscope's heartbeat, in a pod: found by the socket it holds in its pod's
    network namespace, and judged from /proc like any."""
    pid = p.pids["chief:0"]
    try:
        s = d.wait("chief:0 up from outside",
                   lambda: p.state("chief:0", "up", "watched from outside")
                   and int(p.task("chief:0").get("pid", 0)) == pid, 20)
    except AssertionError:
        # Say what the API held (the test once took its pod's `hostname` for its pid).
        try:
            seen = json.dumps(p.task("chief:0"))[:800]
        except (OSError, ValueError, KeyError, AssertionError) as e:
            seen = f"no answer ({e})"
        log(f"chief:0 (pid {pid} here) as the sidecar's API has it: {seen}")
        raise
    log(f"ok: chief:0 up from outside after {s:.1f} s as pid {pid}: "
        f"{p.task('chief:0')['reason'][:160]}")
    p.c.signal(pid, signal.SIGSTOP)
    try:
        s = d.wait("chief:0 hung, stopped", lambda: p.state("chief:0", "hung", "stopped"), 15)
        log(f"ok: hung after {s:.1f} s: {p.task('chief:0')['reason'][:160]}")
    finally:
        p.c.signal(pid, signal.SIGCONT)
    d.wait("chief:0 up again", lambda: p.state("chief:0", "up"), 15)


def detection(p, rounds):
    """A pod's worker and a bare one, stopped, continued and killed alike: the times to each
    verdict, side by side."""
    times = {}
    for _ in range(rounds):
        for task, kind in (("worker:0", "pod"), ("worker:1", "bare")):
            for sig, state in ((signal.SIGSTOP, "hung"), (signal.SIGCONT, "up"),
                               (signal.SIGKILL, "dead")):
                d.wait(f"{task} up first", lambda: sig != signal.SIGSTOP
                       or p.state(task, "up", "training"), 30)
                p.c.signal(p.pids[task], sig)
                s = d.wait(f"{task} {state}", lambda: p.state(task, state), 15, interval=0.005)
                times.setdefault((kind, state), []).append(s)
            p.pids[task] = p.start_task(task)
    for (kind, state), v in sorted(times.items()):
        v.sort()
        log(f"figure: {kind:4} worker -> {state:4}  median {v[len(v) // 2] * 1000:5.0f} ms  "
            f"worst {v[-1] * 1000:5.0f} ms  ({len(v)} rounds)")


def killed(p):
    before = p.task("ps:0")
    log(f"before the kill: ps:0 pid {before.get('pid')}: {before['reason'][:200]}")
    p.c.signal(p.ps_pid, signal.SIGKILL)
    s = d.wait("ps:0 dead", lambda: p.state("ps:0", "dead"), 10)
    log(f"ok: dead after {s:.2f} s: {p.task('ps:0')['reason'][:200]}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", required=True)
    ap.add_argument("--keep_logs", action="store_true")
    ap.add_argument("--rounds", type=int, default=1)
    args = ap.parse_args()
    if os.environ.get(OUTER) != "1":
        netns.skip_unless_supported("the pods test")
        env = dict(os.environ, **{OUTER: "1"})
        return subprocess.call(["unshare", "--pid", "--fork", "--mount-proc", sys.executable,
                                *sys.argv], env=env)
    assert os.getpid() == 1, "not in a PID namespace of its own"

    def body(logs):
        with netns.Cluster(4, log_dir=logs) as c:
            p = Pods(c, os.path.abspath(args.bin), logs)
            p.start()
            for name, scenario in (("up", up), ("stopped", stopped), ("outside", outside),
                                   ("detection", lambda q: detection(q, args.rounds)),
                                   ("killed", killed)):
                log(f"--- {name}")
                scenario(p)
    return netns.run_test("the pods test", "multinode-pods-", DEADLINE_S + 10 * args.rounds, body,
                          args.keep_logs, log)


if __name__ == "__main__":
    sys.exit(main())
