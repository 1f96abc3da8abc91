"""A small trainscope cluster on loopback for the monitoring-stack tests.

linear_regression tasks (ps and workers, fault injection on) and trainscope-sidecars watching
them, all on 127.0.0.1 and free ports; plus `exercise()`, which makes every dashboard panel have
something to show (workers blocked on a ps that starts late, a ps past a worker's deadline for a
moment, a ps with a memory budget), as a real run would over time. Used by job_names_test.py and
scale_out_test.py; the processes are trainscope_testing.processes.Proc, stopped by pid.
Standard library only.
"""

import argparse
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.parse

from fire_drill import DrillError, log, wait_for  # the drill's error, log and polling
from trainscope_testing import monitoring
from trainscope_testing.cluster_spec import tf_config
from trainscope_testing.ports import free_port
from trainscope_testing.processes import Proc
from trainscope_testing.web import http_get, http_json

CLUSTER = "stack"


def prom_query(prom, expr):
    """The result of an instant query on the Prometheus at prom (http://host:port)."""
    body = http_json(f"{prom}/api/v1/query?" + urllib.parse.urlencode({"query": expr}), 10)
    if body.get("status") != "success":
        raise DrillError(f"query failed: {expr}: {body}")
    return body["data"]["result"]


class LocalCluster:
    """Tasks ps:0..ps:N-1, worker:0..worker:M-1 and the sidecars given by start_sidecar."""

    def __init__(self, bin_dir, work_dir, num_ps=2, num_workers=2):
        self.bin, self.dir = os.path.abspath(bin_dir), work_dir
        self.logdir = os.path.join(work_dir, "logs")
        os.makedirs(self.logdir, exist_ok=True)
        for exe in ("linear_regression", "trainscope-sidecar", "trainscopectl"):
            if not os.access(os.path.join(self.bin, exe), os.X_OK):
                raise DrillError(f"MISSING: {os.path.join(self.bin, exe)} (build it first)")
        self.otlp_port = free_port()
        roles = {"ps": num_ps, "worker": num_workers}
        self.addr = {f"{r}:{i}": f"127.0.0.1:{free_port()}" for r, n in roles.items()
                     for i in range(n)}
        self.spec = {"cluster": {r: [self.addr[f"{r}:{i}"] for i in range(n)]
                                 for r, n in roles.items()}}
        self.spec_path = os.path.join(work_dir, "cluster_spec.json")
        with open(self.spec_path, "w") as f:
            json.dump(self.spec, f)
        self.procs, self.tasks, self.sidecars = [], {}, {}

    def add(self, name, argv, env=None):
        p = Proc(name, argv, self.logdir, env).start()
        self.procs.append(p)
        return p

    def start_task(self, name):
        role, index = name.split(":")
        argv = [os.path.join(self.bin, "linear_regression"), "--cluster_name", CLUSTER,
                "--enable_fault_injection", "--steps", "100000000", "--step_delay_ms", "20",
                "--log_every", "2000", "--metrics_port", "0",
                # Checkpoints (worker:0 saves every second), for the checkpoint panels.
                "--checkpoint_dir", os.path.join(self.dir, "checkpoints"),
                "--checkpoint_every_s", "1"]
        if name == "ps:0":
            argv += ["--ps_memory_limit_bytes", str(1 << 20)]  # a budget, for its panels
        if name == "worker:0":
            # A short deadline, so that a slowed ps makes DEADLINE_EXCEEDED calls; keeps going.
            argv += ["--rpc_deadline_ms", "1000", "--max_step_failures", "1000000"]
        env = {"TF_CONFIG": tf_config(self.spec, role, index),
               "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{self.otlp_port}",
               "OTEL_SERVICE_NAME": f"{CLUSTER}-{role}"}
        self.tasks[name] = self.add(name, argv, env)
        return self.tasks[name]

    def start_sidecar(self, name, local_tasks, otlp=False, extra=()):
        """A sidecar watching local_tasks; its host:port. otlp: it receives the tasks' spans.
        extra: more flags (--alertmanager_url ...)."""
        port = free_port()
        grpc = str(self.otlp_port) if otlp else "-1"
        self.add(name, [os.path.join(self.bin, "trainscope-sidecar"), "--cluster_spec",
                        self.spec_path, "--cluster_name", CLUSTER, "--local_tasks",
                        ",".join(local_tasks), "--http_address", "127.0.0.1", "--http_port",
                        str(port), "--grpc_port", grpc, "--peer_sidecars", "none", *extra])
        hostport = f"127.0.0.1:{port}"
        wait_for(f"{name}'s /healthz", lambda: http_get(f"http://{hostport}/healthz")[0] == 200,
                 20)
        self.sidecars[hostport] = local_tasks
        return hostport

    def states(self):
        """Each task's state as the sidecar that watches it says."""
        out = {}
        for hostport, local in self.sidecars.items():
            body = http_json(f"http://{hostport}/api/v1/tasks?local=1")
            for t in body["tasks"] if isinstance(body, dict) else body:
                name = f"{t['role']}:{t['task']}"
                if name in local:
                    out[name] = t["state"]
        return out

    def wait_state(self, name, state, timeout=30):
        wait_for(f"{name} {state}", lambda: self.states().get(name) == state, timeout, interval=0.2)

    def fault(self, task, delay_ms):
        r = subprocess.run([os.path.join(self.bin, "trainscopectl"), "fault", "--task",
                            self.addr[task], "--parameter_delay_ms", str(delay_ms)],
                           capture_output=True, text=True, timeout=20)
        if r.returncode != 0:
            raise DrillError(f"trainscopectl fault on {task}: {r.stdout}{r.stderr}")

    def exercise(self, settle_s=8, prom=None):
        """Starts the workers, then the ps once worker:0 is blocked on them (and, given the
        Prometheus at `prom`, once it has scraped the wait); once all are up, slows ps:1 past
        worker:0's deadline for 3 s; then lets the metrics settle. Needs every sidecar started
        first."""
        workers = sorted(n for n in self.addr if n.startswith("worker"))
        for name in workers:
            self.start_task(name)
        self.wait_state("worker:0", "blocked")
        time.sleep(4)  # a few scrapes of the wait
        if prom:  # its targets come from the sidecar's discovery, which a loaded machine delays
            wait_for("the wait scraped", lambda: prom_query(
                prom, "trainscope_session_waiting_seconds"), 30, interval=0.5)
        for name in sorted(n for n in self.addr if n.startswith("ps")):
            self.start_task(name)
        wait_for("every task up", lambda: all(
            self.states().get(n) == "up" for n in self.addr), 60, interval=0.2)
        self.fault("ps:1", 1500)
        time.sleep(3)
        self.fault("ps:1", 0)
        log(f"cluster exercised (blocked, deadline exceeded); settling {settle_s} s")
        time.sleep(settle_s)

    def stop_all(self):
        """SIGTERM to the workers, then the ps, then Prometheus agents (they flush to the
        store), then the rest, each tier at once; SIGKILL to whatever has not exited 5 s later."""
        tiers = [[p for p in self.procs if p.name.startswith(t)]
                 for t in ("worker", "ps", "agent")]
        tiers.append([p for p in self.procs if not any(p in t for t in tiers)])
        for tier in tiers:
            live = [p for p in tier if p.alive()]
            for p in live:
                p.signal(signal.SIGCONT)
                p.popen.send_signal(signal.SIGTERM)
            deadline = time.time() + 5
            for p in live:
                try:
                    p.popen.wait(max(0.1, deadline - time.time()))
                except subprocess.TimeoutExpired:
                    log(f"{p.name} (pid {p.pid}) ignored SIGTERM; killing it")
                    p.kill9()


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
