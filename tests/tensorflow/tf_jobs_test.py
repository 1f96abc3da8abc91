#!/usr/bin/python3
"""Real TensorFlow trains on loopback: tf1_ps.py (TF1: Server, replica_device_setter,
MonitoredTrainingSession) and tf2_ps.py (TF2: ParameterServerStrategy and ClusterCoordinator),
each as 2 ps + 2 workers + a chief on free ports, each task its own process with its TF_CONFIG.
For each program:
- the variables are on both ps tasks;
- every task that trains (tf1: the chief and both workers; tf2: the chief, which schedules the
  workers' steps) prints a step counter that advances, and its loss falls;
- the trainers exit 0 after --steps; the servers are still up then, and are stopped by pid.
tf2 also runs an evaluator task (in the cluster spec too), which must stay up without harm.

The python is scripts/install-tensorflow's (installed the first time: root and PyPI, ~20 s
here, 1.6 GB in /var/cache/trainscope-test) or $TRAINSCOPE_TF_PYTHON. When neither can be had,
the test is skipped saying why (under CI=true it fails instead).

Usage: tf_jobs_test.py [--program tf1|tf2] [--keep]; by hand, with the helpers (tests/py):
`scripts/python tests/tensorflow/tf_jobs_test.py`. Exit 0 when every check passed.
"""

import argparse
import re
import sys

from trainscope_testing import skips, tensorflow_jobs
from trainscope_testing.checks import Checks
from trainscope_testing.logs import logger
from trainscope_testing.waiting import HarnessError

log = logger()
check = Checks(log)
STEPS = 1500  # each TF1 trainer's steps, the TF2 chief's: some seconds of training
FIRST_CHECK = 300  # every trainer past this step before anything is asserted


def variables_line(job, task):
    with open(job.log_path(task), errors="replace") as f:
        for line in f:
            if line.startswith("variables: "):
                return line.strip()
    return ""


def check_training(job, task):
    """task's steps advance and its loss falls."""
    lines = job.progress(task)
    steps = [s for s, _, _ in lines]
    check(len(steps) >= 3 and steps == sorted(set(steps)),
          f"{job.name} {task}: the step counter advances ({steps[:3]} ... {steps[-2:]})")
    if len(lines) >= 3:
        first, last = lines[0][1], min(loss for _, loss, _ in lines[-2:])
        check(last < first / 4, f"{job.name} {task}: the loss falls, {first:.4g} at step "
              f"{lines[0][0]} -> {last:.4g} by step {lines[-1][0]}")
    rates = [r for _, _, r in lines[1:]]
    if rates:
        log(f"{job.name} {task}: {sorted(rates)[len(rates) // 2]:.0f} steps/s (median)")


def run_program(program, d, python):
    cluster = tensorflow_jobs.loopback_cluster(ps=2, workers=2, evaluator=program == "tf2")
    trainers = ["chief:0"] + (["worker:0", "worker:1"] if program == "tf1" else [])
    servers = ["ps:0", "ps:1"] + (["worker:0", "worker:1", "evaluator:0"]
                                  if program == "tf2" else [])
    with tensorflow_jobs.Job(program, cluster, f"{d}/{program}", steps=STEPS, log_every=100,
                             python=python) as job:
        log(f"{program}: starting {', '.join(tensorflow_jobs.tasks_of(cluster))}")
        job.start()
        for task in trainers:
            job.wait_step(task, FIRST_CHECK, timeout=180, log=log)
        placed = variables_line(job, "chief:0")
        on = set(re.findall(r"/job:ps/(?:replica:0/)?task:(\d+)", placed))
        check(on == {"0", "1"}, f"{program}: variables on both ps tasks ({placed})")
        for task in trainers:
            code = job.wait_exit(task, timeout=180)
            check(code == 0, f"{program} {task}: exits 0 after {STEPS} steps (exit {code})")
            check(job.last_step(task) == STEPS, f"{program} {task}: its last step is {STEPS} "
                  f"({job.last_step(task)})")
            check_training(job, task)
        for task in servers:
            check(job.procs[task].alive(), f"{program} {task} is still up after training")
        if program == "tf2":
            with open(job.log_path("evaluator:0"), errors="replace") as f:
                said = f.read()
            check("nothing to evaluate; idling" in said,
                  "tf2 evaluator:0 says it has nothing to evaluate and idles")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--program", choices=["tf1", "tf2"], action="append",
                        help="only this program (again for more); default both")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    args = parser.parse_args()
    try:
        python = tensorflow_jobs.tf_python()
    except HarnessError as e:
        skips.skip("the TensorFlow jobs test", f"no TensorFlow: {e}")

    def run(d):
        for program in args.program or ["tf1", "tf2"]:
            try:
                run_program(program, d, python)
            except HarnessError as e:
                check(False, f"{program}: {e}")

    return check.run("tf-jobs-", run, keep=args.keep)


if __name__ == "__main__":
    sys.exit(main())
