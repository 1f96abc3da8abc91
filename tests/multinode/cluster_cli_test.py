#!/usr/bin/python3
"""cluster.py, used as a person would: every command on a real 3-node cluster, then destroy.

Runs `cluster.py up` in a temporary run folder and checks what each command prints and does:
status shows every node's table; cut/heal/down/up-link/slow change `info`'s "faults now" and the
nodes' reachability; kill makes the task exit and start brings it back (a new pid); page and get
answer from inside a node; a second `up` in the same folder refuses; destroy leaves no
namespace, no process and no state. Then a cluster whose keeper is SIGKILLed: its processes die
with it, commands say the keeper is gone, and destroy removes what is left.

Usage: cluster_cli_test.py --bin build/bin. Exit 0: passed, 1: failed, 77: skipped (one line
says why). Standard library only.
"""

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))

from trainscope_testing import netns, training
from trainscope_testing.logs import logger
from trainscope_testing.waiting import wait_for

log = logger("cluster_cli_test")

DEADLINE_S = 150
PORT = training.SIDECAR_HTTP_PORT


class Failure(Exception):
    pass


class Cli:
    def __init__(self, run_dir, bin_dir):
        self.run_dir, self.bin = run_dir, bin_dir

    def __call__(self, *args, ok=True, timeout=90):
        argv = [sys.executable, os.path.join(HERE, "cluster.py"), *args, "--run", self.run_dir]
        r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        out = r.stdout + r.stderr
        if ok and r.returncode != 0:
            raise Failure(f"`cluster.py {' '.join(args)}` exited {r.returncode}:\n{out}")
        if not ok and r.returncode == 0:
            raise Failure(f"`cluster.py {' '.join(args)}` should have failed:\n{out}")
        return out

    def state(self):
        with open(os.path.join(self.run_dir, "state.json")) as f:
            return json.load(f)


def expect(text, *needles, what):
    missing = [n for n in needles if n not in text]
    if missing:
        raise Failure(f"{what}: {missing} not in:\n{text}")
    log(f"ok: {what}")


def faults(cli):
    return [line for line in cli("info").splitlines() if line.startswith("faults now:")][0]


def attached(cli):
    st = cli.state()
    return st, netns.Cluster.attach(st["cluster"], log=lambda m: None)


def everything(cli):
    out = cli("up", "--nodes", "3", "--bin", cli.bin)
    expect(out, "cluster up", "worker:0 is training", "n1", "n2", "n3", "destroy",
           what="up builds 3 nodes, trains, prints how to look")
    st, c = attached(cli)
    out = cli("status")
    expect(out, *[f"== n{k} " for k in (1, 2, 3)], "ps:0", "worker:0", "worker:1",
           what="status runs trainscopectl in every node")
    expect(cli("up", "--bin", cli.bin, ok=False), "already", what="a second up refuses")
    expect(cli("cut", "1", "2"), "cut n1 <-> n2", what="cut")
    expect(faults(cli), "cut n1 <-> n2 (route)", what="info shows the cut")
    if c.reachable(1, 2, PORT) or not c.reachable(3, 2, PORT):
        raise Failure("after cut 1 2: n1 should not reach n2, n3 should")
    expect(cli("heal", "n1", "n2"), "healed", what="heal")
    wait_for("n1 reaches n2 again", lambda: c.reachable(1, 2, PORT), 10, log=log)
    expect(cli("cut-one-way", "1", "3", "--drop"), "cut n1 -> n3 (drop)", what="cut-one-way")
    expect(faults(cli), "cut n1 -> n3 only (drop)", what="info shows the one-way cut")
    cli("heal", "1", "3")
    expect(cli("down", "3", "--at", "switch"), "down", what="down --at switch")
    expect(faults(cli), "n3's link down (at the switch)", what="info shows the link down")
    expect(cli("up-link", "3"), "up", what="up-link")
    expect(faults(cli), "faults now: none", what="no fault left")
    old = {p["name"]: p["pid"] for p in cli.state()["cluster"]["procs"]}["worker:1"]
    expect(cli("kill", "worker:1"), f"SIGKILL worker:1 (pid {old}", what="kill")
    wait_for("worker:1 gone", lambda: not netns.pid_alive(old), 10, log=log)
    expect(cli("start", "worker:1"), "started worker:1", what="start")
    expect(cli("start", "worker:1", ok=False), "runs already", what="start refuses a running task")
    expect(cli("stop", "ps:0"), "SIGSTOP ps:0", what="stop")
    expect(faults(cli), "stopped (SIGSTOP)", what="info shows the stopped ps")
    cli("cont", "ps:0")
    expect(cli("slow", "ps:0", "200"), "parameter calls delayed 200 ms", what="slow")
    expect(faults(cli), "ps:0 slowed: parameter calls +200 ms", what="info shows the slow ps")
    expect(cli("slow", "ps:0", "0"), "no longer delayed", what="slow 0 clears")
    expect(cli("kill", "nosuch:0", ok=False), "no task", what="an unknown task is an error")
    expect(cli("cut", "1", "9", ok=False), "no node", what="an unknown node is an error")
    expect(cli("page", "1", "--text"), "worker:0", "tasks", what="page --text")
    expect(cli("get", "2", "/healthz", "--from", "3"), "ok", what="get from inside another node")
    expect(cli("logs", "ps:0", "-n", "3"), "n1-ps-0.log", what="logs")
    pids = {p["pid"] for p in cli.state()["cluster"]["procs"]} | set(c.pids())
    expect(cli("destroy"), "destroyed", what="destroy")
    check_gone(cli, st, pids)


def keeper_killed(cli):
    cli("up", "--nodes", "2", "--bin", cli.bin, "--no-wait")
    st, c = attached(cli)
    pids = {p["pid"] for p in st["cluster"]["procs"]}
    os.kill(st["keeper_pid"], signal.SIGKILL)
    wait_for("the keeper's processes die with it", lambda: not any(
        netns.pid_alive(p) for p in pids), 10, log=log)
    expect(cli("cut", "1", "2", ok=False), "keeper", "gone", what="a change without keeper")
    expect(cli("destroy"), "destroyed", what="destroy without keeper")
    check_gone(cli, st, pids)


def check_gone(cli, st, pids):
    left = [ns for ns in netns.list_namespaces() if ns in st["cluster"]["namespaces"]]
    alive = sorted(p for p in pids if netns.pid_alive(p))
    if left or alive or os.path.exists(os.path.join(cli.run_dir, "state.json")):
        raise Failure(f"after destroy: namespaces {left}, processes {alive}, state.json "
                      f"{os.path.exists(os.path.join(cli.run_dir, 'state.json'))}")
    log("ok: nothing left (namespaces, processes, state)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", required=True)
    args = ap.parse_args()
    netns.skip_unless_supported("the cluster.py test")
    netns.limit_time(DEADLINE_S)
    run_dir = tempfile.mkdtemp(prefix="multinode-cli-")
    cli = Cli(run_dir, os.path.abspath(args.bin))
    started = time.monotonic()
    try:
        everything(cli)
        keeper_killed(cli)
    except (Failure, netns.HarnessError, subprocess.TimeoutExpired) as e:
        log(f"FAILED: {e}")
        log(f"run folder: {run_dir}")
        with open(os.path.join(run_dir, "keeper.log"), errors="replace") as f:
            log("keeper.log:\n" + "".join(f.readlines()[-15:]))
        return 1
    finally:
        netns.limit_time(0)
        subprocess.run([sys.executable, os.path.join(HERE, "cluster.py"), "destroy", "--run",
                        run_dir], capture_output=True, timeout=60)
    log(f"PASSED in {time.monotonic() - started:.0f} s")
    shutil.rmtree(run_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
