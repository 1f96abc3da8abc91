"""Real TensorFlow jobs for the tests: the programs of tests/tensorflow (tf1_ps.py, tf2_ps.py) run
by the python of scripts/install-tensorflow, one process per task, each given its TF_CONFIG.

    cluster = tensorflow_jobs.loopback_cluster(ps=2, workers=2)   # free ports on 127.0.0.1
    with tensorflow_jobs.Job("tf1", cluster, log_dir, steps=2000) as job:
        job.start()                          # every task of the cluster, ps first
        job.wait_step("chief:0", 300, timeout=120)
        job.losses("worker:0")               # [(step, loss), ...] from its log
        job.stop("ps:1")                     # SIGTERM, SIGKILL 5 s later, by pid

A task may run behind a command prefix that execs it (so the pid stays the program's), e.g.
`ip netns exec NODE` or netns.Cluster's `exec_argv(node, [])`; the addresses in the cluster are
then the nodes'. Standard library only.
"""

import os
import re
import subprocess

from trainscope_testing import processes
from trainscope_testing.cluster_spec import tf_config
from trainscope_testing.ports import free_port
from trainscope_testing.waiting import HarnessError, wait_for

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
PROGRAMS = {
    "tf1": os.path.join(REPO_ROOT, "tests", "tensorflow", "tf1_ps.py"),
    "tf2": os.path.join(REPO_ROOT, "tests", "tensorflow", "tf2_ps.py"),
}
# Who starts before whom: servers first, the chief (which connects to them) last.
ROLE_ORDER = ("ps", "worker", "evaluator", "chief")
# The programs' progress line: `step N loss L rate R/s ...`.
STEP_LINE = re.compile(r"^step (\d+) loss (\S+) rate (\S+)/s", re.MULTILINE)


def tf_python():
    """The python with TensorFlow: $TRAINSCOPE_TF_PYTHON when set, else scripts/install-tensorflow's
    (installing it the first time, which needs root and PyPI). HarnessError saying why not."""
    override = os.environ.get("TRAINSCOPE_TF_PYTHON")
    if override:
        if not os.access(override, os.X_OK):
            raise HarnessError(f"TRAINSCOPE_TF_PYTHON={override} is not an executable")
        return override
    script = os.path.join(REPO_ROOT, "scripts", "install-tensorflow")
    try:
        done = subprocess.run([script, "--print-python"], capture_output=True, text=True,
                              timeout=1800, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise HarnessError(f"{script} --print-python: {e}") from None
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        raise HarnessError(f"{script} --print-python failed (exit {done.returncode}): "
                           + (done.stderr.strip().splitlines() or ["no output"])[-1])
    return lines[-1]


def loopback_cluster(ps=2, workers=2, chief=True, evaluator=False, host="127.0.0.1"):
    """A cluster dict ({"chief": [...], "ps": [...], "worker": [...]}) of free ports on host."""
    cluster = {}
    if chief:
        cluster["chief"] = [f"{host}:{free_port()}"]
    cluster["ps"] = [f"{host}:{free_port()}" for _ in range(ps)]
    cluster["worker"] = [f"{host}:{free_port()}" for _ in range(workers)]
    if evaluator:
        cluster["evaluator"] = [f"{host}:{free_port()}"]
    return cluster


def tasks_of(cluster):
    """Every task of cluster as "role:index", in ROLE_ORDER (other roles after)."""
    roles = sorted(cluster, key=lambda r: ROLE_ORDER.index(r) if r in ROLE_ORDER else 99)
    return [f"{role}:{i}" for role in roles for i in range(len(cluster[role]))]


def progress(log_path):
    """[(step, loss, rate), ...]: the progress lines in a task's log, in order."""
    try:
        with open(log_path, errors="replace") as f:
            text = f.read()
    except OSError:
        return []
    return [(int(s), float(loss), float(rate)) for s, loss, rate in STEP_LINE.findall(text)]


class Job:
    """One TensorFlow job: program ("tf1", "tf2" or a path) on cluster, a processes.Proc per task
    (log `log_dir/ROLE-INDEX.log`, stdout and stderr), stopped by pid only. Not thread-safe.

    steps: the chief's and workers' --steps (None: the program's default, forever); log_every,
    threads: their --log_every and --threads; args: more flags for every task; env: more
    environment for every task; python: the interpreter (default tf_python())."""

    def __init__(self, program, cluster, log_dir, steps=None, log_every=None, threads=1,
                 args=(), env=None, python=None):
        self.name = program if program in PROGRAMS else os.path.basename(program)
        self.program = PROGRAMS.get(program, program)
        self.cluster = {role: list(addrs) for role, addrs in cluster.items()}
        self.log_dir = log_dir
        os.makedirs(log_dir, exist_ok=True)
        self.flags = ["--threads", str(threads), *map(str, args)]
        if steps is not None:
            self.flags += ["--steps", str(steps)]
        if log_every is not None:
            self.flags += ["--log_every", str(log_every)]
        self.env = dict(env or {})
        self.python = python or tf_python()
        self.procs = {}  # "role:index" -> the newest Proc of that task

    def argv(self, prefix=()):
        return [*map(str, prefix), self.python, self.program, *self.flags]

    def start_task(self, task, prefix=(), cluster=None, args=(), env=None):
        """Starts task ("worker:1") behind prefix (a command that execs the rest); its TF_CONFIG
        names cluster (default the job's: another one gives it a wrong view, as a typo does).
        args, env: more flags and environment for this task. Returns its Proc."""
        role, _, index = task.partition(":")
        proc_env = {"TF_CONFIG": tf_config(cluster or self.cluster, role, int(index or 0)),
                    "PYTHONUNBUFFERED": "1", **self.env, **(env or {})}
        proc = processes.Proc(task, [*self.argv(prefix), *map(str, args)], self.log_dir, proc_env)
        self.procs[task] = proc.start()
        return proc

    def start(self, tasks=None, prefixes=None):
        """Starts tasks (default every task of the cluster, servers first); prefixes: a dict
        task -> command prefix, or one prefix (a list) for all. Returns {task: Proc}."""
        for task in tasks or tasks_of(self.cluster):
            prefix = prefixes.get(task, ()) if isinstance(prefixes, dict) else (prefixes or ())
            self.start_task(task, prefix)
        return dict(self.procs)

    def log_path(self, task):
        return self.procs[task].log_path

    def progress(self, task):
        """[(step, loss, rate), ...] that task printed so far."""
        return progress(self.log_path(task))

    def losses(self, task):
        return [(step, loss) for step, loss, _ in self.progress(task)]

    def last_step(self, task):
        """The last step task printed (0 before its first progress line)."""
        lines = self.progress(task)
        return lines[-1][0] if lines else 0

    def wait_step(self, task, step, timeout, log=None):
        """Waits until task printed a step >= step; returns it. HarnessError on timeout, or at
        once when the task has exited first, with the end of its log."""
        proc = self.procs[task]

        def reached():
            last = self.last_step(task)
            if last >= step:
                return last
            if not proc.alive():
                raise HarnessError(f"{task} exited (code {proc.returncode}) at step {last}, "
                                   f"before step {step}; its log ends:\n{proc.tail()}")
            return None
        try:
            return wait_for(f"{task} at step {step}", reached, timeout, interval=0.5, log=log)
        except HarnessError as e:
            if "timed out" in str(e):
                raise HarnessError(f"{e}; {task} is at step {self.last_step(task)}, its log "
                                   f"ends:\n{proc.tail()}") from None
            raise

    def wait_exit(self, task, timeout):
        """Waits until task has exited; returns its exit code. HarnessError on timeout."""
        proc = self.procs[task]
        wait_for(f"{task} to exit", lambda: not proc.alive(), timeout, interval=0.2)
        return proc.returncode

    def stop(self, task=None, timeout=5.0):
        """Stops task (default every task, the chief and workers first): SIGTERM, then SIGKILL
        when it has not ended in timeout s; by pid only."""
        order = {t: i for i, t in enumerate(reversed(tasks_of(self.cluster)))}
        tasks = [task] if task else sorted(self.procs, key=lambda t: order.get(t, -1))
        for t in tasks:
            self.procs[t].stop(timeout)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        self.stop()
        return False
