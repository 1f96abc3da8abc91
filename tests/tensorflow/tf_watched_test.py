#!/usr/bin/python3
"""A real trainscope-sidecar watching real TensorFlow (tf1_ps.py: TF1 Server,
replica_device_setter, MonitoredTrainingSession; 2 ps + 2 workers + a chief on loopback), with
nothing changed in the program. The sidecar gets the evaluator's TF_CONFIG (TensorFlow keeps the
evaluator outside the cluster) and no other flag but its ports; every task writes its log to a
file, as a user's does (the sidecar reads it through /proc/PID/fd).

1. ps:1 never started: TensorFlow itself logs "CreateSession still waiting for response from
   worker: /job:ps/replica:0/task:1", and the sidecar calls the chief `blocked` on ps:1 at its
   address, saying it read so in the task's log; ps:1 is `missing`.
2. ps:1 started: the job trains, and every task is `up`, watched from outside, with its pid.
   Its sidecar's snapshot of the blocked chief shows TensorFlow's own functions.
3. ps:0 stopped with SIGSTOP: `hung`, saying the process is stopped; up again after SIGCONT.
4. ps:1 killed with SIGKILL: `dead`.
States and reasons are asserted, never timings.

Usage: tf_watched_test.py --bin BUILD/bin [--keep]; by hand, with the helpers (tests/py):
`scripts/python tests/tensorflow/tf_watched_test.py --bin build/bin`. Exit 0 when every check
passed; skipped (fails under CI=true) without TensorFlow.
"""

import argparse
import json
import os
import signal
import sys

from trainscope_testing import skips, tensorflow_jobs
from trainscope_testing.cluster_spec import tf_config
from trainscope_testing.checks import Checks
from trainscope_testing.logs import logger
from trainscope_testing.ports import free_port
from trainscope_testing.processes import Proc
from trainscope_testing.waiting import HarnessError, wait_for
from trainscope_testing.web import http_json

log = logger()
check = Checks(log)
OUTSIDE = "watched from outside (no trainscope heartbeat)"
WAIT_LINE = "CreateSession still waiting for response from worker: /job:ps/replica:0/task:1"


class Views:
    def __init__(self, http_port):
        self.url = f"http://127.0.0.1:{http_port}/api/v1/tasks"

    def tasks(self):
        return {t["name"]: t for t in http_json(self.url)["tasks"]}

    def until(self, name, what, predicate, timeout=60):
        """Task `name`'s view once predicate holds; None on time out (the last view logged)."""
        try:
            return wait_for(f"{name} {what}", lambda: (lambda v: v if v and predicate(v) else None)(
                self.tasks().get(name)), timeout, interval=0.2, log=log)
        except HarnessError as e:
            log(f"{e}; last view of {name}: {json.dumps(self.tasks().get(name))}")
            return None


def state_is(state, *words):
    return lambda v: v["state"] == state and all(w in v["reason"] for w in words)


def said(what, v):
    return what + (f": {v['reason']}" if v else "")


def run(args, d, python):
    cluster = tensorflow_jobs.loopback_cluster(ps=2, workers=2)
    http = free_port()
    evaluator = json.loads(tf_config(cluster, "chief", 0))
    evaluator["task"] = {"type": "evaluator", "index": 0}
    sidecar = Proc("sidecar", [os.path.join(args.bin, "trainscope-sidecar"), "--http_port",
                               str(http), "--grpc_port", str(free_port())], d,
                   {"TF_CONFIG": json.dumps(evaluator)}).start()
    try:
        views = Views(http)
        with tensorflow_jobs.Job("tf1", cluster, f"{d}/tf1", log_every=100,
                                 python=python) as job:
            job.start([t for t in tensorflow_jobs.tasks_of(cluster) if t != "ps:1"])
            ps1 = cluster["ps"][1]
            v = views.until("chief:0", "blocked on ps:1", state_is(
                "blocked", "ps:1 at " + ps1, "CreateSession", "TensorFlow logs"), timeout=120)
            check(v is not None, said("ps:1 never started: chief:0 is blocked on ps:1 at its "
                                      "address, from TensorFlow's own log line", v))
            with open(job.log_path("chief:0"), errors="replace") as f:
                check(WAIT_LINE in f.read(), f"TensorFlow itself logged \"{WAIT_LINE}\"")
            v = views.until("ps:1", "missing", state_is("missing"))
            check(v is not None, said("ps:1 is missing", v))
            # The blocked chief's snapshot, taken by its sidecar: TensorFlow's own functions.
            url = f"http://127.0.0.1:{http}/api/v1/stacks?task=chief:0"
            try:
                snaps = wait_for("a snapshot of the blocked chief:0",
                                 lambda: http_json(url, timeout=15)["snapshots"], 60, log=log)
                names = [f.get("function", "") for t in snaps[0].get("threads", [])
                         for f in t.get("frames", [])]
                check(any(n.startswith("tensorflow::") for n in names),
                      f"the blocked chief:0's snapshot shows TensorFlow's own functions "
                      f"({len(snaps[0].get('threads', []))} threads, e.g. "
                      f"{next((n for n in names if n.startswith('tensorflow::')), 'none')})")
            except HarnessError as e:
                check(False, str(e))

            job.start_task("ps:1")
            job.wait_step("chief:0", 200, timeout=180, log=log)
            for task in tensorflow_jobs.tasks_of(cluster):
                pid = job.procs[task].pid
                v = views.until(task, "up from outside", state_is("up", OUTSIDE, f"pid {pid}"))
                check(v is not None, said(f"{task} trains: up, watched from outside, pid {pid}",
                                          v))
            v = views.tasks()["chief:0"]
            check("read from its log" in v["reason"],
                  said("chief:0's reason says its log is read", v))

            job.procs["ps:0"].signal(signal.SIGSTOP)
            v = views.until("ps:0", "hung when stopped", state_is("hung", "stopped (state T"))
            check(v is not None, said("ps:0 SIGSTOPped is hung, its process stopped", v))
            job.procs["ps:0"].signal(signal.SIGCONT)
            v = views.until("ps:0", "up after SIGCONT", state_is("up", OUTSIDE))
            check(v is not None, said("ps:0 continued is up again", v))

            job.procs["ps:1"].kill9()
            v = views.until("ps:1", "dead after kill -9", state_is("dead"))
            check(v is not None, said("ps:1 killed is dead", v))
    finally:
        sidecar.stop(timeout=15)
        if not sidecar.alive():
            check(sidecar.returncode == 0, f"the sidecar stops cleanly on SIGTERM (exit "
                  f"{sidecar.returncode})")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bin", required=True, help="the build's bin folder")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    args = parser.parse_args()
    try:
        python = tensorflow_jobs.tf_python()
    except HarnessError as e:
        skips.skip("the TensorFlow watched test", f"no TensorFlow: {e}")
    return check.run("tf-watched-", lambda d: run(args, d, python), keep=args.keep)


if __name__ == "__main__":
    sys.exit(main())
