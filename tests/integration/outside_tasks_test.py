#!/usr/bin/python3
"""Tasks watched from outside (issue 21): gRPC servers that do not link the runtime and answer
trainscope's Heartbeat UNIMPLEMENTED, and ports that do not speak gRPC at all, on loopback.

Servers no one here wrote a heartbeat for (trainscope_testing.outside_servers on Debian's
python3-grpcio): ps:0 serves grpc.health.v1, ps:1 does not; worker:0 is a plain TCP listener;
nothing ever listens on worker:1's address. A real trainscope-sidecar watches the four, and:
- ps:0 and ps:1 are up, watched from outside, with their pids, and /metrics has their
  resources under the runtime tasks' names;
- worker:0 is never up, and its reason names the process holding the port;
- worker:1 is missing;
- ps:1 SIGSTOPped is hung with its /proc state in the reason, and up again after SIGCONT;
- ps:0 killed with SIGKILL is dead; started again on the same port, up with a restart counted;
- a server that answers every method PERMISSION_DENIED (not UNIMPLEMENTED) is not a heartbeat
  (missing) unless --black_box_tasks names it (chief:* here): then up from outside;
- a --black_box_tasks naming no task of the spec stops the sidecar with the flag's name.
States and reasons are asserted, never timings.

Usage: outside_tasks_test.py --bin BUILD/bin [--keep]; by hand, with the helpers (tests/py):
`scripts/python tests/integration/outside_tasks_test.py --bin build/bin`. Exit 0 when every
check passed.
"""

import argparse
import json
import os
import re
import signal
import subprocess
import sys

from trainscope_testing import outside_servers
from trainscope_testing.checks import Checks
from trainscope_testing.logs import logger
from trainscope_testing.ports import free_port
from trainscope_testing.processes import ProcGroup
from trainscope_testing.waiting import HarnessError, wait_for
from trainscope_testing.web import http_json, http_text

log = logger()
check = Checks(log)
OUTSIDE = "watched from outside (no trainscope heartbeat)"


class Watch:
    """The sidecar's /api/v1/tasks, asked again and again; remembers every state worker:0 (the
    plain TCP listener) was seen in."""

    def __init__(self, http_port):
        self.url = f"http://127.0.0.1:{http_port}/api/v1/tasks"
        self.tcp_states = set()

    def tasks(self):
        views = {t["name"]: t for t in http_json(self.url)["tasks"]}
        if "worker:0" in views:
            self.tcp_states.add(views["worker:0"]["state"])
        return views

    def until(self, name, what, predicate, timeout=30):
        """Waits until task `name`'s view satisfies predicate; returns the view (None on time
        out, with the last view logged)."""
        try:
            return wait_for(f"{name} {what}", lambda: (lambda v: v if predicate(v) else None)(
                self.tasks().get(name)), timeout, interval=0.1, log=log)
        except HarnessError as e:
            log(f"{e}; last view of {name}: {json.dumps(self.tasks().get(name))}")
            return None


def state_is(state, *words):
    return lambda v: v and v["state"] == state and all(w in v["reason"] for w in words)


def start_outside(procs, name, kind, port, health=False):
    return procs.start(name, outside_servers.argv(kind, port, health))


def check_first_states(watch, ps0, ps1, tcp):
    v = watch.until("ps:0", "up from outside", state_is("up", OUTSIDE, f"pid {ps0.pid}"))
    check(v is not None, "ps:0 (gRPC with grpc.health.v1) is up, watched from outside, its pid "
          "in the reason" + (f": {v['reason']}" if v else ""))
    v = watch.until("ps:1", "up from outside", state_is("up", OUTSIDE, f"pid {ps1.pid}"))
    check(v is not None and "CreateSession" in v["reason"],
          "ps:1 (gRPC without health) is up, and the reason says what cannot be seen")
    v = watch.until("worker:0", "named as a silent listener",
                    state_is("missing", f"held by pid {tcp.pid}", "not answered gRPC"))
    check(v is not None, "worker:0 (plain TCP) is missing, the reason names the process holding "
          "the port" + (f": {v['reason']}" if v else ""))
    v = watch.until("worker:1", "missing", state_is("missing", "never answered"))
    check(v is not None, "worker:1 (nothing listens) is missing" +
          (f": {v['reason']}" if v else ""))


def check_metrics(http_port, pid):
    text = http_text(f"http://127.0.0.1:{http_port}/metrics")
    for name in ("trainscope_task_cpu_seconds_total", "trainscope_task_resident_memory_bytes",
                 "trainscope_task_threads", "trainscope_task_open_fds"):
        m = re.search(name + r'\{[^}]*role="ps"[^}]*task="1"[^}]*\} ([0-9.e+]+)', text)
        # CPU may still read 0 ticks; the others are positive for any live process.
        least = 0 if name.endswith("cpu_seconds_total") else 1
        check(m is not None and float(m.group(1)) >= least,
              f"/metrics has {name} for ps:1 (pid {pid}) from its /proc")


def check_snapshot(watch, pid):
    """Hang forensics need only the pid: the keeper's snapshot of the stopped server."""
    url = watch.url.replace("/tasks", "/stacks?task=ps:1")
    try:
        snaps = wait_for("a snapshot of the hung ps:1", lambda: http_json(url)["snapshots"], 30,
                         log=log)
    except HarnessError as e:
        check(False, str(e))
        return
    s = snaps[0]
    check(s["pid"] == str(pid) or s["pid"] == pid, f"the snapshot is of pid {pid}")
    check(s.get("trigger") == "hung" and len(s.get("threads", [])) > 1,
          f"taken on entering hung, with its {len(s.get('threads', []))} threads "
          f"(stacks: {s.get('stacks', False)}; process state {s.get('processState')})")


def check_stop_and_kill(watch, procs, ps0, ps1, ports):
    ps1.signal(signal.SIGSTOP)
    v = watch.until("ps:1", "hung when stopped", state_is("hung", OUTSIDE, "stopped (state T"))
    check(v is not None, "ps:1 SIGSTOPped is hung, the reason gives the /proc state" +
          (f": {v['reason']}" if v else ""))
    check_snapshot(watch, ps1.pid)
    ps1.signal(signal.SIGCONT)
    v = watch.until("ps:1", "up after SIGCONT", state_is("up", OUTSIDE))
    check(v is not None and v["restarts"] == 0, "ps:1 continued is up again, no restart")
    ps0.kill9()
    v = watch.until("ps:0", "dead after kill -9", state_is("dead", OUTSIDE))
    check(v is not None, "ps:0 killed is dead" + (f": {v['reason']}" if v else ""))
    again = start_outside(procs, "ps-0-again", "grpc", ports[0], health=True)
    v = watch.until("ps:0", "up after the restart",
                    state_is("up", OUTSIDE, f"pid {again.pid}", "restarted 1x"))
    check(v is not None and v["restarts"] == 1,
          "ps:0 started again on its port is up, with one restart counted" +
          (f": {v['reason']}" if v else ""))


def check_black_box_flag(bin_dir, d, procs, watch, chief_pid):
    v = watch.until("chief:0", "up from outside (--black_box_tasks)",
                    state_is("up", OUTSIDE, f"pid {chief_pid}"))
    check(v is not None, "chief:0 (PERMISSION_DENIED to all) named by --black_box_tasks chief:* "
          "is up from outside")
    plain = free_port()
    other = procs.start("sidecar-no-flag", [
        f"{bin_dir}/trainscope-sidecar", "--cluster_spec", f"{d}/spec.json", "--http_port",
        str(plain), "--grpc_port", str(free_port()), "--peer_sidecars", "none"])
    v = Watch(plain).until("chief:0", "missing without the flag",
                           state_is("missing", "not a valid heartbeat", f"pid {chief_pid}",
                                    "--black_box_tasks watches it"))
    check(v is not None, "without --black_box_tasks the same server is not a heartbeat (missing)"
          + (f": {v['reason']}" if v else ""))
    other.stop()
    bad = subprocess.run([f"{bin_dir}/trainscope-sidecar", "--cluster_spec", f"{d}/spec.json",
                          "--http_port", "0", "--peer_sidecars", "none", "--black_box_tasks",
                          "evaluator:*"], capture_output=True, text=True, timeout=30)
    said = (bad.stdout + bad.stderr).strip()
    check(bad.returncode != 0 and "--black_box_tasks" in said,
          f"--black_box_tasks evaluator:* (no such role) is refused: {said[-200:]}")


def run(bin_dir, d):
    ports = [free_port() for _ in range(5)]
    spec = {"cluster": {"ps": [f"127.0.0.1:{ports[0]}", f"127.0.0.1:{ports[1]}"],
                        "worker": [f"127.0.0.1:{ports[2]}", f"127.0.0.1:{ports[3]}"],
                        "chief": [f"127.0.0.1:{ports[4]}"]}}
    with open(os.path.join(d, "spec.json"), "w") as f:
        json.dump(spec, f)
    http, grpc_port = free_port(), free_port()
    procs = ProcGroup(d)
    try:
        ps0 = start_outside(procs, "ps-0", "grpc", ports[0], health=True)
        ps1 = start_outside(procs, "ps-1", "grpc", ports[1])
        tcp = start_outside(procs, "worker-0", "tcp", ports[2])
        chief = procs.start("chief-0", outside_servers.argv("grpc", ports[4], deny=True))
        procs.start("sidecar", [f"{bin_dir}/trainscope-sidecar", "--cluster_spec",
                                f"{d}/spec.json", "--http_port", str(http), "--grpc_port",
                                str(grpc_port), "--peer_sidecars", "none",
                                "--black_box_tasks", "chief:*"])
        watch = Watch(http)
        wait_for("the sidecar's API", watch.tasks, 30, log=log)
        check_first_states(watch, ps0, ps1, tcp)
        check_metrics(http, ps1.pid)
        check_stop_and_kill(watch, procs, ps0, ps1, ports)
        check_black_box_flag(bin_dir, d, procs, watch, chief.pid)
        status = subprocess.run([f"{bin_dir}/trainscopectl", "status", "--sidecar",
                                 f"http://127.0.0.1:{http}"], capture_output=True, text=True,
                                timeout=30)
        log("trainscopectl status:\n" + status.stdout + status.stderr)
        log("/api/v1/tasks:\n" + json.dumps(
            [{k: t.get(k) for k in ("name", "state", "reason", "pid", "restarts")}
             for t in watch.tasks().values()], indent=1))
        check(watch.tcp_states == {"missing"},
              f"worker:0 (plain TCP) was never up: seen {sorted(watch.tcp_states)}")
    finally:
        procs.stop()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bin", required=True)
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    args = parser.parse_args()
    return check.run("outside-tasks-", lambda d: run(os.path.abspath(args.bin), d),
                     keep=args.keep)


if __name__ == "__main__":
    sys.exit(main())
