#!/usr/bin/python3
"""The multi-node harness leaves nothing behind, however its user ends.

Each case runs a small program that builds a 2-node netns.Cluster and starts a process in each
node (one of them ignoring SIGTERM), then ends it one way:

  exception  an exception escapes the `with` block      -> torn down by __exit__
  sigterm    SIGTERM (ctest's or a CI runner's stop)      -> torn down (SystemExit)
  sigint     SIGINT (Ctrl-C)                              -> torn down (KeyboardInterrupt)
  no-with    SIGTERM, Cluster used without `with`         -> torn down at exit (atexit)
  sigkill    SIGKILL (nothing can run)                    -> its processes die with it
             (PR_SET_PDEATHSIG); its namespaces are removed by the next run's stale cleanup

and checks that no namespace and no process of that run is left.

Usage: teardown_test.py. Exit 0: passed, 1: failed, 77: skipped (one line says why).
Standard library only.
"""

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True
from trainscope_testing import netns
from trainscope_testing.logs import logger

log = logger("teardown_test")

CHILD = r"""
import os, sys, time
sys.dont_write_bytecode = True
from trainscope_testing import netns
how, logs = sys.argv[1], sys.argv[2]

def body(c):
    c.spawn(1, ["sleep", "1000"])
    # A process that ignores SIGTERM: teardown must SIGKILL it.
    c.spawn(2, ["sh", "-c", "trap '' TERM; while :; do sleep 1; done"], name="stubborn")
    time.sleep(0.3)
    print("ready", c.prefix, *[p.pid for p in c.procs], *c.pids(), flush=True)
    if how == "exception":
        raise RuntimeError("a test failed")
    time.sleep(60)

if how == "no-with":
    body(netns.Cluster(2, log_dir=logs, grace_s=1.0, log=lambda m: None))
else:
    with netns.Cluster(2, log_dir=logs, grace_s=1.0, log=lambda m: None) as c:
        body(c)
"""


def run_case(how, sig, logs):
    child = subprocess.Popen([sys.executable, "-c", CHILD, how, os.path.join(logs, how)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = child.stdout.readline().split()
    if not line or line[0] != "ready":
        child.kill()
        return f"{how}: the child did not start: {child.stderr.read()[-400:]}"
    prefix, pids = line[1], {int(p) for p in line[2:]}
    if sig is not None:
        child.send_signal(sig)
    try:
        child.wait(20)
    except subprocess.TimeoutExpired:
        child.kill()
        return f"{how}: the child did not end within 20 s of {sig}"
    problems = []
    if how == "sigkill":
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and any(netns.pid_alive(p) for p in pids):
            time.sleep(0.05)
        if any(netns.pid_alive(p) for p in pids):
            problems.append("its processes outlived it")
        if not any(ns.startswith(prefix + "-") for ns in netns.list_namespaces()):
            problems.append("its namespaces vanished before any cleanup (unexpected)")
        removed = netns.cleanup_stale(log)
        if not any(ns.startswith(prefix + "-") for ns in removed):
            problems.append(f"the stale cleanup did not remove its namespaces ({removed})")
    left_ns = [ns for ns in netns.list_namespaces() if ns.startswith(prefix + "-")]
    left_pids = sorted(p for p in pids if netns.pid_alive(p))
    if left_ns:
        problems.append(f"namespaces left: {left_ns}")
    if left_pids:
        problems.append(f"processes left: {left_pids}")
    if os.path.exists(netns._registry_path(prefix)):
        problems.append("its registry entry is left")
    if problems:
        return f"{how}: " + "; ".join(problems) + f" (stderr: {child.stderr.read()[-300:]})"
    log(f"ok: {how}: {prefix} gone, {len(pids)} pids gone (exit code {child.returncode})")
    return None


def main():
    netns.skip_unless_supported("the multi-node teardown test")
    cases = [("exception", None), ("sigterm", signal.SIGTERM), ("sigint", signal.SIGINT),
             ("no-with", signal.SIGTERM), ("sigkill", signal.SIGKILL)]
    logs = tempfile.mkdtemp(prefix="multinode-teardown-")
    failures = [f for f in (run_case(how, sig, logs) for how, sig in cases) if f]
    shutil.rmtree(logs, ignore_errors=True)
    for f in failures:
        log(f"FAILED: {f}")
    if failures:
        return 1
    log("PASSED")
    return 0


if __name__ == "__main__":
    sys.exit(main())
