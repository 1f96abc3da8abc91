#!/usr/bin/python3
"""trainscope's one-line hook in a real TensorFlow program (python/trainscope): tf1_ps.py with
`hooks=[trainscope.StepHook()]` on its chief and worker (1 ps, 1 worker, a chief on loopback),
and a real trainscope-sidecar given the evaluator's TF_CONFIG and its ports only (the default
--stall_after_s). The hook reports to the sidecar's gRPC port ($TRAINSCOPE_REPORT_ENDPOINT).

1. The chief and the worker are `up`, `training`, with steps that grow, from their hook; the ps
   (no hook) stays watched from outside.
2. The worker's loop wedges at step 300 (--wedge_at_step: its process and threads live on):
   `stalled`, steps stuck, saying its hook reports and its loop makes no progress. The chief
   goes on.
   `trainscopectl incidents` shows the stall as an open incident, and the job's goodput counts
   the hooked tasks' training.
3. A report naming a task the sidecar does not watch is refused (INVALID_ARGUMENT), and
   reports naming the worker from other pids (a forger on the node) change nothing.
States and reasons are asserted, never timings.

Usage: tf_hook_test.py --bin BUILD/bin [--keep]. Exit 0 when every check passed; skipped
(fails under CI=true) without TensorFlow.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import time

from trainscope_testing import skips, tensorflow_jobs
from trainscope_testing.cluster_spec import tf_config
from trainscope_testing.checks import Checks
from trainscope_testing.logs import logger
from trainscope_testing.ports import free_port
from trainscope_testing.processes import Proc
from trainscope_testing.waiting import HarnessError, wait_for
from trainscope_testing.web import http_json

HERE = os.path.dirname(os.path.abspath(__file__))
HOOK = os.path.join(HERE, "..", "..", "python")
log = logger()
check = Checks(log)
OUTSIDE = "watched from outside (no trainscope heartbeat)"
FROM_HOOK = "its phase and steps from its trainscope hook"
WEDGE_AT = 300


def view(url, name):
    return {t["name"]: t for t in http_json(url)["tasks"]}.get(name)


def until(url, name, what, predicate, timeout=90):
    try:
        return wait_for(f"{name} {what}", lambda: (lambda v: v if v and predicate(v) else None)(
            view(url, name)), timeout, interval=0.2, log=log)
    except HarnessError as e:
        log(f"{e}; last view of {name}: {json.dumps(view(url, name))}")
        return None


def said(what, v):
    return what + (f": {v['state']}, {v['reason']}" if v else "")


def report(python, grpc_port, role, index, pid):
    """Sends one report as the hook would, from a process of this node; returns the gRPC code."""
    code = (
        "import grpc, sys, time\n"
        "sys.path.insert(0, sys.argv[1])\n"
        "from trainscope import wire\n"
        "msg = wire.heartbeat(sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), 'h', '', 'x',\n"
        "                     'training', 10**9, time.time(), 0, True)\n"
        "call = grpc.insecure_channel(sys.argv[2]).unary_unary(\n"
        "    '/trainscope.v1.TaskReports/Report', request_serializer=lambda b: b,\n"
        "    response_deserializer=lambda b: b)\n"
        "try:\n"
        "    call(msg, timeout=5); print('OK')\n"
        "except grpc.RpcError as e:\n"
        "    print(e.code().name, e.details())\n")
    out = subprocess.run([python, "-c", code, HOOK, f"127.0.0.1:{grpc_port}", role, str(index),
                          str(pid)], capture_output=True, text=True, timeout=60)
    return out.stdout.strip() or out.stderr.strip()[-300:]


def run(args, d, python):
    cluster = tensorflow_jobs.loopback_cluster(ps=1, workers=1)
    http, grpc_port = free_port(), free_port()
    evaluator = json.loads(tf_config(cluster, "chief", 0))
    evaluator["task"] = {"type": "evaluator", "index": 0}
    sidecar = Proc("sidecar", [os.path.join(args.bin, "trainscope-sidecar"), "--http_port",
                               str(http), "--grpc_port", str(grpc_port)], d,
                   {"TF_CONFIG": json.dumps(evaluator)}).start()
    url = f"http://127.0.0.1:{http}/api/v1/tasks"
    env = {"PYTHONPATH": HOOK, "TRAINSCOPE_REPORT_ENDPOINT": f"127.0.0.1:{grpc_port}"}
    try:
        with tensorflow_jobs.Job("tf1", cluster, f"{d}/tf1", log_every=100, python=python,
                                 env=env) as job:
            job.start_task("ps:0")
            job.start_task("chief:0", args=["--hook"])
            job.start_task("worker:0", args=["--hook", "--wedge_at_step", WEDGE_AT])
            for task in ("chief:0", "worker:0"):
                v = until(url, task, "training from its hook", lambda v: v["state"] == "up" and
                          "training" in v["reason"] and FROM_HOOK in v["reason"] and
                          v.get("steps", 0) > 0, timeout=180)
                check(v is not None, said(f"{task} is up, training, steps from its hook", v))
            first = (view(url, "chief:0") or {}).get("steps", 0)
            v = until(url, "chief:0", "steps growing", lambda v: v.get("steps", 0) > first + 50)
            check(v is not None, said(f"chief:0's steps grow past {first + 50}", v))
            v = view(url, "ps:0")
            check(v is not None and OUTSIDE in v["reason"],
                  said("ps:0 (no hook) is watched from outside", v))

            v = until(url, "worker:0", "stalled when its loop wedged",
                      lambda v: v["state"] == "stalled" and "loop makes no progress" in v["reason"],
                      timeout=120)
            check(v is not None, said(f"worker:0, its loop wedged at step {WEDGE_AT}, is stalled",
                                      v))
            check(v is not None and v.get("steps", 0) <= WEDGE_AT,
                  f"worker:0's steps stand at most at {WEDGE_AT}: {v and v.get('steps')}")
            with open(job.log_path("worker:0"), errors="replace") as f:
                check("wedged" in f.read(), "worker:0 logged that it wedged")
            # The incident and the job's goodput, as trainscopectl shows them.
            ctl = [os.path.join(args.bin, "trainscopectl"), "incidents", "--sidecar",
                   f"127.0.0.1:{http}"]
            try:
                table = wait_for("an open stalled incident of worker:0", lambda: (lambda out: (
                    out if re.search(r"open\s+stalled\s+worker:0", out) else None))(
                        subprocess.run(ctl, capture_output=True, text=True, timeout=20).stdout),
                    60, log=log)
            except HarnessError:
                table = subprocess.run(ctl, capture_output=True, text=True, timeout=20).stdout
            check(re.search(r"open\s+stalled\s+worker:0", table) is not None,
                  "trainscopectl incidents: worker:0 stalled, open: " +
                  next((x.strip() for x in table.splitlines() if "stalled" in x), table[-300:]))
            goodput = http_json(f"http://127.0.0.1:{http}/api/v1/incidents").get("goodput", {})
            check(goodput.get("productive_seconds", 0) > 0 and 0 < goodput.get("goodput", 0) < 1,
                  f"the job's goodput counts the hooked tasks' training and the stall: "
                  f"{json.dumps({k: goodput.get(k) for k in ('goodput', 'productive_seconds', 'lost_by_kind')})}")
            v = view(url, "chief:0")
            check(v is not None and v["state"] == "up", said("chief:0 goes on", v))

            answer = report(python, grpc_port, "worker", 7, os.getpid())
            check(answer.startswith("INVALID_ARGUMENT") and "watches no task worker:7" in answer,
                  f"a report for a task this sidecar does not watch is refused: {answer}")
            for pid in range(999990, 999998):  # more forgers than the reports kept per task
                answer = report(python, grpc_port, "worker", 0, pid)
            check(answer == "OK", f"reports for worker:0 from other pids are taken: {answer}")
            seen = [view(url, "worker:0") for _ in range(15) if not time.sleep(0.2)]
            bad = [v for v in seen if not v or v["state"] != "stalled" or
                   v.get("steps", 0) > WEDGE_AT]
            check(not bad, said("... and change nothing of worker:0 over 3 s, sampled every "
                                "0.2 s (those pids do not hold its port)", bad[0] if bad
                                else seen[-1]))
    finally:
        sidecar.stop(timeout=15)
        if not sidecar.alive():
            check(sidecar.returncode == 0,
                  f"the sidecar stops cleanly on SIGTERM (exit {sidecar.returncode})")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bin", required=True, help="the build's bin folder")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    args = parser.parse_args()
    try:
        python = tensorflow_jobs.tf_python()
    except HarnessError as e:
        skips.skip("the TensorFlow hook test", f"no TensorFlow: {e}")
    return check.run("tf-hook-", lambda d: run(args, d, python), keep=args.keep)


if __name__ == "__main__":
    sys.exit(main())
