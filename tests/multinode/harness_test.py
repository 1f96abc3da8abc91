#!/usr/bin/python3
"""Smoke test of the multi-node harness itself (netns.py, training.py), on a real network.

Three nodes (network namespaces on one bridge); ps:0 on n1, worker:0 on n2, worker:1 on n3 and
a sidecar on each, real build/bin binaries. It proves, reading steps from each worker's own
sidecar (/api/v1/tasks, asked from inside its node) and probing TCP and UDP between nodes:

  1. the nodes exist only in their namespaces (the root namespace's links, addresses and routes
     are unchanged), each with its own address and host name, all reaching each other;
  2. the workers train across namespaces;
  3. cut(1, 2): n1 and n2 cannot reach each other, n3 reaches both; worker:0 (n2) stops making
     steps while worker:1 (n3) goes on; cut(1, 2, how="drop") (nftables in the switch) also
     parts them; cut_one_way(1, 3) stops n1's packets to n3 but not n3's to n1;
  4. heal(1, 2): worker:0 makes steps again;
  5. link_down(3): n3 unreachable from n1 and n2 (which still reach each other); link_up(3)
     brings it back;
  6. after teardown no namespace and no process of the run is left.

Usage: harness_test.py --bin build/bin [--keep_logs]. Exit 0: passed, 1: failed, 77: skipped
(not root, or no network namespaces here: one line says why). Standard library only.
"""

import argparse
import functools
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree

from trainscope_testing import netns, training, waiting
from trainscope_testing.logs import logger

log = logger("harness_test")

DEADLINE_S = 150  # Our own limit, below ctest's TIMEOUT, so that teardown still runs.


class Failure(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Failure(what)
    log(f"ok: {what}")


wait_for = functools.partial(waiting.wait_for, log=log)  # says `ok: what` when it came true


def root_network():
    """The root namespace's links, addresses and routes, to show the harness adds none."""
    out = []
    for argv in (["ip", "-o", "link", "show"], ["ip", "-o", "addr", "show"],
                 ["ip", "route", "show", "table", "all"]):
        r = subprocess.run(argv, capture_output=True, text=True)
        # Counters and timers move on their own; names, addresses and routes do not.
        out += sorted(line.split(" link/")[0].split(" valid_lft")[0]
                      for line in r.stdout.splitlines() if "cache" not in line)
    return out


def matrix(c, port, pairs):
    """{(a, b): reachable} for TCP from node a to node b's port."""
    return {(a, b): c.reachable(a, b, port) for a, b in pairs}


def expect_matrix(c, port, expected, what):
    got = matrix(c, port, expected)
    wrong = [f"n{a}->n{b} {'reaches' if got[(a, b)] else 'does not reach'}"
             for (a, b), want in expected.items() if got[(a, b)] != want]
    check(not wrong, f"{what}: " + (", ".join(wrong) if wrong else ", ".join(
        f"n{a}->n{b} {'yes' if v else 'no'}" for (a, b), v in sorted(expected.items()))))


def frozen(t, task, window_s=2.0):
    """True when task's steps did not move over window_s."""
    before = t.steps(task)
    time.sleep(window_s)
    return before is not None and t.steps(task) == before


def moving(t, task, window_s=1.0):
    before = t.steps(task)
    time.sleep(window_s)
    after = t.steps(task)
    return before is not None and after is not None and after > before


ALL_PAIRS = [(a, b) for a in (1, 2, 3) for b in (1, 2, 3) if a != b]


def scenario(c, t):
    port = t.http_port
    check(len({c.address(n) for n in c.nodes}) == 3, "three nodes, three addresses: " +
          ", ".join(f"{n} {c.address(n)}" for n in c.nodes))
    names = [c.run(n, ["hostname"]).stdout.strip() for n in c.nodes]
    check(names == ["n1", "n2", "n3"], f"each node has its own host name: {names}")
    t.wait_training(60, log=log)
    wait_for("every sidecar answers from every node", lambda: all(matrix(
        c, port, ALL_PAIRS).values()), 20)
    wait_for("worker:0 (n2) trains with ps:0 (n1)", lambda: moving(t, "worker:0"), 20)

    c.cut(1, 2)
    expect_matrix(c, port, {(1, 2): False, (2, 1): False, (3, 1): True, (3, 2): True,
                            (1, 3): True, (2, 3): True}, "after cut(1, 2)")
    wait_for("worker:0's steps stop (its ps is across the cut)", lambda: frozen(t, "worker:0"),
             30, 0)
    wait_for("worker:1 (n3) still trains with ps:0 (n1)", lambda: moving(t, "worker:1"), 20, 0)

    c.heal(1, 2)
    wait_for("n1 and n2 reach each other again", lambda: c.reachable(1, 2, port)
             and c.reachable(2, 1, port), 10)
    wait_for("worker:0 makes steps again after heal(1, 2)", lambda: moving(t, "worker:0"),
             60, 0)

    if shutil.which("nft") or os.path.exists("/usr/sbin/nft"):
        c.cut(1, 2, how="drop")
        check(not c.delivers(1, 2) and not c.delivers(2, 1) and c.delivers(3, 1)
              and c.delivers(3, 2), "cut(1, 2, how=drop): the switch drops n1<->n2 only")
        c.heal(1, 2)
        check(c.delivers(1, 2) and c.delivers(2, 1), "heal(1, 2): n1<->n2 again")
    else:
        log("NOT CHECKED: cut(how=\"drop\") needs nft (apt-get install nftables)")

    c.cut_one_way(1, 3)
    check(not c.delivers(1, 3) and c.delivers(3, 1),
          "cut_one_way(1, 3): n1's packets do not reach n3, n3's reach n1")
    c.heal(1, 3)
    check(c.delivers(1, 3), "heal(1, 3): n1's packets reach n3 again")

    c.link_down(3)
    expect_matrix(c, port, {(1, 3): False, (2, 3): False, (3, 1): False, (3, 2): False,
                            (1, 2): True, (2, 1): True}, "after link_down(3)")
    c.link_up(3)
    wait_for("n3 reachable again after link_up(3)", lambda: c.reachable(1, 3, port)
             and c.reachable(3, 2, port), 15)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", required=True, help="folder with linear_regression, "
                                                 "trainscope-sidecar, trainscopectl")
    ap.add_argument("--keep_logs", action="store_true", help="keep the logs when passing")
    args = ap.parse_args()
    netns.skip_unless_supported("the multi-node harness test")
    netns.limit_time(DEADLINE_S)
    started = time.monotonic()
    logs = tempfile.mkdtemp(prefix="multinode-harness-")
    root_before = root_network()
    seen_pids, prefix, ok = set(), None, False
    try:
        with netns.Cluster(3, log_dir=logs) as c:
            prefix = c.prefix
            check(root_network() == root_before, "the root namespace's links, addresses and "
                                                 "routes are unchanged")
            t = training.TrainingCluster(c, args.bin, training.Layout.default(3))
            t.start()
            try:
                scenario(c, t)
            finally:
                seen_pids = {p.pid for p in c.procs} | set(c.pids())
        left_ns = [ns for ns in netns.list_namespaces() if ns.startswith(prefix + "-")]
        check(not left_ns, f"teardown: no namespace of {prefix} left {left_ns or ''}")
        left_pids = sorted(p for p in seen_pids if netns.pid_alive(p))
        check(not left_pids, f"teardown: none of the {len(seen_pids)} processes of the run "
                             f"is left {left_pids or ''}")
        check(root_network() == root_before, "the root namespace is as it was")
        check(not os.path.exists(netns._registry_path(prefix)), "the run's registry entry "
                                                                  "is gone")
        ok = True
    except (Failure, netns.HarnessError) as e:
        log(f"FAILED: {e}")
    finally:
        netns.limit_time(0)
    if not ok:
        log(f"logs of every process: {logs}")
        for f in sorted(os.listdir(logs)):
            if f.endswith(".log"):
                with open(os.path.join(logs, f), errors="replace") as fh:
                    tail = "".join(fh.readlines()[-6:])
                log(f"--- last lines of {f}:\n{tail}")
        return 1
    log(f"PASSED in {time.monotonic() - started:.0f} s")
    if not args.keep_logs:
        shutil.rmtree(logs, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
