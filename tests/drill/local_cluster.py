"""The drills' cluster on loopback, for the monitoring-stack tests: a training.TrainingCluster
on nodes.Loopback with the drills' flags.

linear_regression tasks (ps and workers, fault injection on, checkpoints, ps:0 with a memory
budget, worker:0 with a short deadline) and a trainscope-sidecar per group of tasks (a loopback
node each), all on 127.0.0.1 and free ports; plus `exercise()`, which makes every dashboard
panel have something to show (workers blocked on a ps that starts late, a ps past a worker's
deadline for a moment, a ps with a memory budget), as a real run would over time, and `add()`
for the monitoring programs beside it. How tasks and sidecars are started is training.py's.
Used by job_names_test.py, scale_out_test.py, vm_scale_out_test.py and sidecar_alerts_test.py.
Standard library only.
"""

import argparse
import os
import shutil
import tempfile
import time
import urllib.parse

from fire_drill import TASK_FLAGS, DrillError, log, wait_for  # the drill's own
from trainscope_testing import monitoring, nodes, training
from trainscope_testing.web import http_json

CLUSTER = "stack"


def prom_query(prom, expr):
    """The result of an instant query on the Prometheus at prom (http://host:port)."""
    body = http_json(f"{prom}/api/v1/query?" + urllib.parse.urlencode({"query": expr}), 10)
    if body.get("status") != "success":
        raise DrillError(f"query failed: {expr}: {body}")
    return body["data"]["result"]


class LocalCluster(training.TrainingCluster):
    """Tasks ps:0..N-1 and worker:0..M-1; groups: the tasks of each node n1, n2, ... (each
    node's sidecar watches its group; default: one node with every task). Sidecars are started
    by start_sidecars, tasks by start_task or exercise. Not thread-safe."""

    task_flags = TASK_FLAGS

    def __init__(self, bin_dir, work_dir, num_ps=2, num_workers=2, groups=None,
                 sidecar_args=()):
        groups = groups or [[f"ps:{i}" for i in range(num_ps)]
                            + [f"worker:{i}" for i in range(num_workers)]]
        layout = training.Layout([(t, n) for n, group in enumerate(groups, 1) for t in group])
        loopback = nodes.Loopback(len(groups), os.path.join(work_dir, "logs"), log=log)
        super().__init__(loopback, bin_dir, layout, CLUSTER, step_delay_ms=20,
                         sidecar_args=sidecar_args, task_args=[
                             "--metrics_port", "0",
                             # Checkpoints (worker:0 saves every second), for their panels.
                             "--checkpoint_dir", os.path.join(work_dir, "checkpoints"),
                             "--checkpoint_every_s", "1"])
        self.prepare()

    def task_argv(self, task, tls_flags=None):
        argv = super().task_argv(task, tls_flags)
        if task == "ps:0":
            argv += ["--ps_memory_limit_bytes", str(1 << 20)]  # a budget, for its panels
        if task == "worker:0":
            # A short deadline is the point here: a slowed ps makes DEADLINE_EXCEEDED calls (for
            # the panels); the runtime retries them, as it does by default.
            argv += ["--rpc_deadline_ms", "1000"]
        return argv

    def start_sidecars(self):
        """Starts every node's sidecar and waits for each to answer; their host:port by node."""
        for node in self.c.nodes:
            self.start_sidecar(node)
        for node in self.c.nodes:
            self.wait_sidecar(node)
        return {node: self.sidecar_address(node) for node in self.c.nodes}

    def add(self, name, argv):
        """Starts a program beside the cluster (Prometheus, a webhook receiver, ...), stopped
        with it; its Proc."""
        return self.c.spawn(self.c.nodes[0], argv, name=name)

    def wait_state(self, name, state, timeout=30):
        wait_for(f"{name} {state}", lambda: self.states().get(name) == state, timeout, interval=0.2)

    def wait_all_up(self, timeout=60):
        wait_for("every task up", lambda: all(
            self.states().get(n) == "up" for n in self.task_node), timeout, interval=0.2)

    def exercise(self, settle_s=8, prom=None):
        """Starts the workers, then the ps once worker:0 is blocked on them (and, given the
        Prometheus at `prom`, once it has scraped the wait); once all are up, slows ps:1 past
        worker:0's deadline for 3 s; then lets the metrics settle. Needs every sidecar started
        first."""
        for name in sorted(n for n in self.task_node if n.startswith("worker")):
            self.start_task(name)
        self.wait_state("worker:0", "blocked")
        time.sleep(4)  # a few scrapes of the wait
        if prom:  # its targets come from the sidecar's discovery, which a loaded machine delays
            wait_for("the wait scraped", lambda: prom_query(
                prom, "trainscope_session_waiting_seconds"), 30, interval=0.5)
        for name in sorted(n for n in self.task_node if n.startswith("ps")):
            self.start_task(name)
        self.wait_all_up()
        self.fault("ps:1", parameter_delay_ms=1500)
        time.sleep(3)
        self.fault("ps:1", parameter_delay_ms=0)
        log(f"cluster exercised (blocked, deadline exceeded); settling {settle_s} s")
        time.sleep(settle_s)

    def stop_all(self):
        """SIGTERM to the workers, then the ps, then Prometheus agents (they flush to the
        store), then the rest, each tier at once; SIGKILL to whatever has not exited 5 s later."""
        self.c.destroy(first=("worker", "ps", "agent"))


def test_main(doc, run, prefix):
    """main() of a test built on LocalCluster: --bin, --src, --out; run(args, work, failures)
    appends what failed. Prints the failures; 0 when none. The folder stays on failure."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--bin", required=True, help="folder with the built binaries")
    ap.add_argument("--src", required=True, help="the source tree")
    ap.add_argument("--out", help="folder for configs, data and logs (kept)")
    args = ap.parse_args()
    work = os.path.abspath(args.out) if args.out else tempfile.mkdtemp(prefix=prefix)
    if args.out:
        shutil.rmtree(work, ignore_errors=True)  # data of an earlier run would mix in
    os.makedirs(work, exist_ok=True)
    failures = []
    try:
        run(args, work, failures)
    except (DrillError, monitoring.RenderError) as e:
        failures.append(str(e))
    for f in failures:
        print("FAIL:", f)
    if failures:
        log(f"FAILED; everything is in {work}")
        return 1
    log("PASSED")
    if not args.out:
        shutil.rmtree(work, ignore_errors=True)
    return 0
