#!/usr/bin/python3
"""A trainscope training cluster on network namespaces, to break by hand and watch.

    cluster.py up --nodes 3 --bin build/bin      ps:0 on n1, worker:0 on n2, worker:1 on n3,
                                                 a sidecar on every node; prints how to look
    cluster.py status [NODE...]                  trainscopectl status inside every node
    cluster.py page NODE                         the node's sidecar page (a screenshot and its
                                                 text with chromium; else its data as text)
    cluster.py get NODE PATH [--from NODE]       any sidecar endpoint, asked inside a node
    cluster.py cut A B [--drop]                  route cut between two nodes (both ways)
    cluster.py cut-one-way A B [--drop]          A's packets to B only
    cluster.py heal A B                          undo the cuts between A and B
    cluster.py down N [--at switch] / up-link N  a node's link down / up
    cluster.py kill TASK [SIG]                   SIGKILL (or SIG) a task or sidecar:n2
    cluster.py stop TASK / cont TASK             SIGSTOP / SIGCONT
    cluster.py slow TASK MS [--heartbeat]        delay its parameter calls (0 clears)
    cluster.py wedge TASK --deadlock | --block   deadlock a worker's training thread, or block
                                                 a ps's ParameterService (restart to undo)
    cluster.py stacks TASK [--from NODE]         where it is stuck: trainscopectl stacks inside
                                                 a node (default n1), through its own sidecar
    cluster.py start TASK                        start a task (or sidecar:n2) that exited again
                                                 (each sidecar keeps its incidents in the run
                                                 folder's state/NODE, fresh for each `up`)
    cluster.py info | logs TASK [-f] | exec NODE [-- CMD...] | forward NODE [--port P]
    cluster.py destroy                           kill everything, remove the namespaces

The cluster is owned by a small background process (the keeper) that `up` leaves running: it
made the namespaces and started every process, reaps them, and makes every change asked by the
commands above (over a UNIX socket in the run folder), so that state.json there always says
what is true: namespaces, addresses, pids, cuts, links down, stopped processes, log folder.
`destroy` asks it to tear everything down; if it is gone, destroy does it from state.json.
NODE is 1, 2, ... or n1, n2, ...; TASK is ps:0, worker:1, ... or sidecar:n2.

Run as `scripts/python tests/multinode/cluster.py ...` (its helpers, trainscope_testing in tests/py,
on PYTHONPATH). Needs root (network namespaces). Standard library only.
"""

import argparse
import contextlib
import html.parser
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree

from trainscope_testing import netns, training

DEFAULT_RUN = os.environ.get("TRAINSCOPE_CLUSTER_RUN", "/tmp/trainscope-cluster")
# How to run this again, in the hints it prints (scripts/python puts trainscope_testing on
# PYTHONPATH).
SCRIPTS_PYTHON = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts",
                              "python")
ME = (f"{os.path.relpath(SCRIPTS_PYTHON)} "
      f"{os.path.relpath(os.path.abspath(__file__))}"
      if not os.path.abspath(__file__).startswith("/usr") else sys.argv[0])
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update",
                  "--disable-sync", "--hide-scrollbars", "--window-size=1400,1000",
                  "--virtual-time-budget=5000"]


class UserError(Exception):
    """A message for the person at the terminal; exit code 1."""


# ---------------------------------------------------------------- the run folder


class Run:
    """The run folder: state.json (written by the keeper only), keeper.sock, keeper.log, logs/."""

    def __init__(self, path):
        self.dir = os.path.abspath(path)
        self.state_path = os.path.join(self.dir, "state.json")
        self.sock_path = os.path.join(self.dir, "keeper.sock")
        self.keeper_log = os.path.join(self.dir, "keeper.log")
        self.logs = os.path.join(self.dir, "logs")

    def state(self):
        try:
            with open(self.state_path) as f:
                return json.load(f)
        except FileNotFoundError:
            raise UserError(f"no cluster in {self.dir}: start one with `{ME} up --bin build/bin`"
                            " (or give --run DIR)") from None
        except ValueError as e:
            raise UserError(f"{self.state_path} is not readable JSON ({e}); `{ME} destroy` "
                            "removes what it can") from None

    def save(self, state):
        tmp = self.state_path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(state, f, indent=1)
        os.replace(tmp, self.state_path)

    def attach(self):
        """(state, Cluster, TrainingCluster) from state.json, for commands that only look."""
        st = self.state()
        c = netns.Cluster.attach(st["cluster"], log=lambda m: None)
        return st, c, training.TrainingCluster.attach(c, st["training"])

    def keeper_alive(self, st):
        pid = st.get("keeper_pid")
        return bool(pid) and netns.pid_alive(pid) and \
            netns._proc_start_time(pid) == st.get("keeper_start")

    def ask(self, op, timeout=60, **args):
        """Sends one request to the keeper and returns its answer's message."""
        st = self.state()
        if not self.keeper_alive(st):
            raise UserError(f"the cluster's keeper (pid {st.get('keeper_pid')}) is gone, so "
                            f"nothing can be changed; `{ME} destroy` removes what is left")
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.settimeout(timeout)
                s.connect(self.sock_path)
                s.sendall(json.dumps(dict(args, op=op)).encode() + b"\n")
                answer = json.loads(s.makefile().readline() or "{}")
        except (OSError, ValueError) as e:
            raise UserError(f"the keeper (pid {st['keeper_pid']}) did not answer: {e}; its log "
                            f"is {self.keeper_log}") from None
        if not answer.get("ok"):
            raise UserError(answer.get("error", "the keeper gave no answer"))
        return answer.get("message", "")


# ---------------------------------------------------------------- the keeper


class Keeper:
    """Owns the cluster: builds it, then serves requests until destroy or SIGTERM."""

    def __init__(self, run, args, report):
        self.run, self.args, self.report = run, args, report
        self.events = []
        self.stop = False

    def log(self, msg):
        line = f"[{time.strftime('%H:%M:%S')}] {msg}"
        print(line, flush=True)  # keeper.log
        self.report("log", msg)

    def event(self, what):
        self.events = (self.events + [[time.time(), what]])[-200:]
        self.log(what)

    def save(self):
        self.run.save({"version": 1, "keeper_pid": os.getpid(),
                       "keeper_start": netns._proc_start_time(os.getpid()),
                       "created": self.created, "run_dir": self.run.dir,
                       "cluster": self.c.to_state(), "training": self.t.to_state(),
                       "events": self.events})

    def main(self):
        a = self.args
        self.created = time.time()
        layout = layout_of(a)
        with netns.Cluster(a.nodes, log_dir=self.run.logs, log=self.log) as c:
            self.c = c
            sidecar_args = a.sidecar_arg or []
            if training.flag_value(sidecar_args, "--state_dir", None) is None:
                # As the package does: incidents and the ledger kept, a folder per node (fresh
                # for each cluster: a sidecar started again with `start` keeps what it had).
                state = os.path.join(self.run.dir, "state")
                shutil.rmtree(state, ignore_errors=True)
                sidecar_args += ["--state_dir", os.path.join(state, "{node}")]
            self.t = training.TrainingCluster(
                c, a.bin, layout, a.name, a.step_delay_ms, sidecar_args,
                a.task_arg or [], tls=a.tls)
            self.t.start()
            self.save()
            if not a.no_wait:
                self.t.wait_training(a.wait_s, log=self.log)
            server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.run.sock_path)
            server.bind(self.run.sock_path)
            os.chmod(self.run.sock_path, 0o600)
            server.listen()
            server.settimeout(0.1)
            self.event("cluster up")
            self.save()
            self.report("ok")
            self.report = lambda kind, msg="": None
            while not self.stop:
                for p in c.procs:  # reap at once: a killed task must not linger as a zombie
                    if p.popen is not None:
                        p.popen.poll()
                try:
                    conn, _ = server.accept()
                except socket.timeout:
                    continue
                with conn:
                    self.serve(conn)
            server.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.run.sock_path)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.run.state_path)
        self.log("cluster destroyed")

    def serve(self, conn):
        conn.settimeout(10)
        try:
            req = json.loads(conn.makefile().readline())
            message = self.handle(req)
            answer = {"ok": True, "message": message}
        except (netns.HarnessError, KeyError, ValueError) as e:
            answer = {"ok": False, "error": str(e)}
        self.save()
        with contextlib.suppress(OSError):
            conn.sendall(json.dumps(answer).encode() + b"\n")

    def handle(self, req):
        c, t, op = self.c, self.t, req["op"]
        if op in ("cut", "cut-one-way"):
            (c.cut if op == "cut" else c.cut_one_way)(req["a"], req["b"], how=req["how"])
            arrow = "<->" if op == "cut" else "->"
            what = f"cut {c.node(req['a'])} {arrow} {c.node(req['b'])} ({req['how']})"
        elif op == "heal":
            c.heal(req["a"], req["b"])
            what = f"healed {c.node(req['a'])} <-> {c.node(req['b'])}"
        elif op == "down":
            c.link_down(req["node"], at=req["at"])
            what = f"link of {c.node(req['node'])} down (at the {req['at']})"
        elif op == "up-link":
            c.link_up(req["node"])
            what = f"link of {c.node(req['node'])} up"
        elif op == "signal":
            sig = signal.Signals(req["sig"])
            p = t.kill(req["who"], sig)
            what = f"{sig.name} {req['who']} (pid {p.pid} on {p.node})"
        elif op == "start":
            who = req["who"]
            old = t.proc(who) if who in t.tasks or who.startswith("sidecar:") else None
            if old is not None and old.alive():
                raise netns.HarnessError(f"{who} runs already (pid {old.pid})")
            p = (t.start_sidecar(who.split(":", 1)[1]) if who.startswith("sidecar:")
                 else t.start_task(who))
            what = f"started {who} (pid {p.pid} on {p.node})"
        elif op == "slow":
            t.fault(req["who"], **{req["what"]: req["ms"]})
            calls = DELAYED[req["what"]]
            what = (f"{req['who']}: {calls} delayed {req['ms']} ms" if req["ms"]
                    else f"{req['who']}: {calls} no longer delayed")
        elif op == "wedge":
            t.wedge(req["who"], deadlock_training=req["deadlock"],
                    block_parameter_service=req["block"])
            what = (f"{req['who']}: training thread deadlocked" if req["deadlock"]
                    else f"{req['who']}: ParameterService blocked")
        elif op == "destroy":
            self.stop = True
            return "tearing down"
        else:
            raise netns.HarnessError(f"unknown request {op!r}")
        self.event(what)
        return what


def keeper_process(run, args, write_fd):
    """The keeper's life, in the forked child: own session, output to keeper.log."""
    os.setsid()
    pipe = os.fdopen(write_fd, "w", buffering=1)

    def report(kind, msg=""):
        with contextlib.suppress(OSError):
            pipe.write(f"{kind} {json.dumps(msg)}\n")
    log = os.open(run.keeper_log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    code = 0
    try:
        Keeper(run, args, report).main()
    except SystemExit as e:  # SIGTERM: the cluster was torn down on the way out
        code = e.code if isinstance(e.code, int) else 1
        with contextlib.suppress(FileNotFoundError):
            os.unlink(run.state_path)
    except BaseException as e:  # noqa: BLE001 (reported to `up`, then exit)
        import traceback
        traceback.print_exc()
        report("error", str(e))
        code = 1
        with contextlib.suppress(FileNotFoundError):
            os.unlink(run.state_path)
    finally:
        sys.stdout.flush()
        os._exit(code)


# ---------------------------------------------------------------- commands


def layout_of(a):
    """The layout `up` asked for, checked against the number of nodes."""
    if a.layout:
        layout = training.Layout.parse(a.layout)
    else:
        ps_nodes = [n.strip().lstrip("n") for n in a.ps_nodes.split(",")]
        if not all(n.isdigit() for n in ps_nodes):
            raise UserError(f"--ps-nodes {a.ps_nodes!r}: expected node numbers, e.g. 1,2")
        layout = training.Layout.default(a.nodes, [int(n) for n in ps_nodes],
                                         a.workers_per_node)
    layout.check(a.nodes)
    return layout


def cmd_up(run, a):
    why = netns.unsupported_reason()
    if why:
        raise UserError(f"cannot build a cluster here: {why}")
    if os.path.exists(run.state_path):
        st = run.state()
        if run.keeper_alive(st):
            raise UserError(f"a cluster is up in {run.dir} already (keeper pid "
                            f"{st['keeper_pid']}): `{ME} destroy` first, or --run OTHER_DIR")
        print(f"{run.dir} holds a cluster whose keeper is gone: removing what is left")
        cmd_destroy(run, a)
    for b in ("linear_regression", "trainscope-sidecar", "trainscopectl"):
        if not os.access(os.path.join(a.bin, b), os.X_OK):
            raise UserError(f"{os.path.join(a.bin, b)} is missing: build first (cmake --build "
                            "build --target linear_regression trainscope-sidecar trainscopectl)")
    layout_of(a)
    if os.path.isdir(run.logs):  # the previous cluster's logs: kept once
        shutil.rmtree(run.logs + ".previous", ignore_errors=True)
        os.rename(run.logs, run.logs + ".previous")
    os.makedirs(run.logs)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        keeper_process(run, a, w)
    os.close(w)
    print(f"building {a.nodes} nodes in {run.dir} (keeper pid {pid}) ...", flush=True)
    try:
        for line in os.fdopen(r):
            kind, _, msg = line.partition(" ")
            msg = json.loads(msg)
            if kind == "ok":
                break
            if kind == "error":
                raise UserError(f"the cluster did not come up: {msg}\n(keeper log: "
                                f"{run.keeper_log}; logs: {run.logs})")
            print(f"  {msg}", flush=True)
        else:
            raise UserError(f"the keeper ended without a word; see {run.keeper_log}")
    except KeyboardInterrupt:
        print("interrupted: tearing the cluster down", flush=True)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        os.waitpid(pid, 0)
        return 130
    print()
    cmd_info(run, a)
    return 0


def describe_faults(st):
    cl = st["cluster"]
    lines = []
    pairs = {}
    for a, b, how in cl["cuts"]:
        pairs.setdefault((min(a, b), max(a, b), how), set()).add((a, b))
    for (x, y, how), dirs in sorted(pairs.items()):
        if len(dirs) == 2:
            lines.append(f"cut {x} <-> {y} ({how})")
        else:
            (a, b), = dirs
            lines.append(f"cut {a} -> {b} only ({how})")
    for n, at in sorted(cl["links_down"].items()):
        lines.append(f"{n}'s link down (at the {at})")
    for task, delays in sorted(st["training"].get("delays", {}).items()):
        lines.append(f"{task} slowed: " + ", ".join(
            [f"{DELAYED[k]} +{v} ms" for k, v in sorted(delays.items()) if v and k != "links"] +
            [f"its calls to {peer} +{ms} ms (a slow link)"
             for peer, ms in sorted(delays.get("links", {}).items())]))
    names = {p["pid"]: p["name"] for p in cl["procs"]}
    for pid in cl["stopped"]:
        lines.append(f"{names.get(pid, pid)} (pid {pid}) stopped (SIGSTOP)")
    return lines


def cmd_info(run, a):
    st, c, t = run.attach()
    print(f"trainscope cluster {t.name!r}: {len(c.nodes)} nodes on {c.subnet}.0/24 (only inside "
          f"its namespaces), keeper pid {st['keeper_pid']}"
          + ("" if run.keeper_alive(st) else " (GONE: `destroy` cleans up)"))
    print(f"run folder {run.dir}: state.json, keeper.log; task and sidecar logs in {c.log_dir}")
    if t.tls:
        print(f"mutual TLS: CA, node and client certificates in {t.tls.dir} (ca.crt; "
              f"harness.crt/.key for a client, e.g. curl --cacert ca.crt --cert harness.crt "
              f"--key harness.key)")
    print()
    rows = [("node", "address", "namespace", "tasks", "sidecar")]
    for n in c.nodes:
        tasks = ", ".join(f"{name} {c.address(n)}:{t.task_address[name].split(':')[1]} "
                          f"({pid_text(t.tasks.get(name))})"
                          for name, node in t.task_node.items() if node == n) or "-"
        sc = t.sidecars.get(n)
        rows.append((n, c.address(n), c.namespace(n), tasks,
                     f"{t.sidecar_url(n)} ({pid_text(sc)})" if sc else "-"))
    print_table(rows)
    faults = describe_faults(st)
    print("\nfaults now: " + ("; ".join(faults) if faults else "none"))
    recent = [e for e in st.get("events", [])][-5:]
    if recent:
        print("recent: " + "; ".join(f"{time.strftime('%H:%M:%S', time.localtime(ts))} {w}"
                                     for ts, w in recent))
    print()
    for group, rows in HOWTO:
        print(group)
        for cmd, what in rows:
            print(f"  {ME} {cmd:<22} {what}")
    return 0


DELAYED = {"parameter_delay_ms": "parameter calls", "heartbeat_delay_ms": "heartbeat answers"}

HOWTO = [
    ("look:", [("status", "trainscopectl status, inside every node"),
               ("page 1", "node 1's sidecar page (screenshot with chromium, else text)"),
               ("get 3 /api/v1/tasks", "any sidecar endpoint, asked inside node 3"),
               ("stacks ps:0 --from 3", "where ps:0 is stuck (its threads), read on node 3"),
               ("exec 2", "a shell inside node 2 (its network, host name n2)"),
               ("logs worker:0 [-f]", "a task's log (sidecar:n1 for a sidecar's)"),
               ("forward 1", "node 1's sidecar on 127.0.0.1:PORT here, for a browser")]),
    ("break:", [("cut 1 2 [--drop]", "route cut n1 <-> n2 (--drop: the switch drops instead)"),
                ("cut-one-way 1 2", "n1's packets to n2 only"),
                ("heal 1 2", "undo the cuts between n1 and n2"),
                ("down 3 [--at switch]", "n3's link down; up-link 3 brings it back"),
                ("kill worker:0 [SIG]", "SIGKILL (or SIG); start worker:0 starts it again"),
                ("stop ps:0", "SIGSTOP; cont ps:0 for SIGCONT"),
                ("slow ps:0 700", "every parameter call of ps:0 700 ms late (0 clears)"),
                ("wedge worker:0 --deadlock", "its training thread deadlocks (--block: a ps's "
                                              "service blocks)")]),
    ("end:", [("destroy", "stop everything, remove the namespaces (logs are kept)")]),
]


def pid_text(p):
    if p is None:
        return "not started"
    return f"pid {p.pid}" + ("" if p.alive() else ", exited")


def print_table(rows):
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(str(v).ljust(w) for v, w in zip(r, widths)).rstrip())


def cmd_status(run, a):
    st, c, t = run.attach()
    faults = describe_faults(st)
    print(f"faults now: {'; '.join(faults) if faults else 'none'}")
    worst = 0
    for n in [c.node(x) for x in a.nodes] or c.nodes:
        print(f"\n== {n} ({c.address(n)}): trainscopectl status, asked inside {n} ==", flush=True)
        try:
            r = t.ctl_status(n, capture=False, timeout=a.timeout)
            worst = max(worst, r.returncode)
        except netns.HarnessError as e:
            print(f"  {e}")
            worst = 2
    return worst if a.exit_code else 0


def cmd_get(run, a):
    st, c, t = run.attach()
    node = c.node(a.node)
    path = a.path if a.path.startswith("/") else "/" + a.path
    url = t.sidecar_url(node, path)
    try:
        status, body = t.http_get(a.from_node or node, url, timeout=a.timeout)
    except OSError as e:
        raise UserError(f"GET {url} from inside {c.node(a.from_node or node)}: {e}") from None
    text = body.decode(errors="replace")
    with contextlib.suppress(ValueError):
        text = json.dumps(json.loads(text), indent=1)
    print(text)
    return 0 if status == 200 else 1


class _Text(html.parser.HTMLParser):
    """Visible text of an HTML document: one line per table row or block."""

    BLOCKS = {"tr", "div", "p", "h1", "h2", "header", "table", "li", "br"}

    def __init__(self):
        super().__init__()
        self.out, self.skip, self.cell = [""], 0, 0

    def handle_starttag(self, tag, attrs):
        if tag in ("script", "style", "title"):
            self.skip += 1
        elif tag in self.BLOCKS and not (self.cell and tag == "div"):
            self.out.append("")
        elif tag in ("td", "th", "span", "div") and self.out[-1]:
            self.out[-1] += "  "
        self.cell += tag in ("td", "th")

    def handle_endtag(self, tag):
        if tag in ("script", "style", "title"):
            self.skip -= 1
        self.cell -= tag in ("td", "th") and self.cell > 0

    def handle_data(self, data):
        if self.skip or not data:
            return
        line = self.out[-1]
        if data[0].isspace() and line and not line.endswith(" "):
            line += " "
        line += " ".join(data.split())
        if data[-1].isspace() and line and not line.endswith(" "):
            line += " "
        self.out[-1] = line

    def text(self):
        return "\n".join(line.strip() for line in self.out if line.strip())


def page_from_api(c, t, node, timeout):
    """The page's content from the sidecar's JSON, for a terminal without a browser."""
    view = t.view(node, timeout=timeout)
    tasks = view.get("tasks", [])
    bad = [x for x in tasks if x.get("state") not in ("up", "done")]
    lines = [f"cluster {view.get('cluster')}, as the sidecar of {node} ({view.get('node', '?')}) "
             f"sees it at {time.strftime('%H:%M:%S')}",
             f"{len(bad)} of {len(tasks)} tasks need attention" if bad
             else f"all {len(tasks)} tasks up or done"]
    if view.get("isolated"):
        lines.append("THIS NODE IS CUT OFF FROM EVERY OTHER NODE")
    for n in view.get("nodes", []):
        if n.get("status") != "alive" or n.get("reason"):
            lines.append(f"node {n.get('hostname') or ''} ({n.get('node')}): {n.get('status')}"
                         f" - {n.get('reason', '')}")
    for p in view.get("partitions", []):
        lines.append(f"partition: {p.get('a')} ({p.get('a_node')}) cannot reach {p.get('b')} "
                     f"({p.get('b_node')}, {p.get('b_address')}) since "
                     f"{time.strftime('%H:%M:%S', time.localtime(p.get('since', 0)))}: "
                     f"{p.get('error', '')}")
    rows = [("task", "state", "since", "reason", "waiting on", "address", "host / pid", "steps",
             "via")]
    for x in tasks:
        since = x.get("since")
        rows.append((x.get("name") or f"{x.get('role')}:{x.get('task')}", x.get("state"),
                     f"{time.time() - since:.0f} s" if since else "",
                     x.get("reason", ""), ", ".join(x.get("waiting_on", [])),
                     x.get("address", ""), f"{x.get('hostname', '')} / {x.get('pid', '')}",
                     f"{x.get('steps', 0):.0f}" if x.get("steps") is not None else "",
                     x.get("source") or "first-hand"))
    return lines, rows


def run_chromium(c, node, chromium, jobs, timeout=60):
    """Runs headless Chromium inside node once per job (extra args), at the same time, each
    with a fresh profile; returns their CompletedProcess objects."""
    with contextlib.ExitStack() as stack:
        profiles = [stack.enter_context(tempfile.TemporaryDirectory(prefix="chromium-"))
                    for _ in jobs]
        results = [None] * len(jobs)

        def one(i, extra):
            argv = [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profiles[i]}", *extra]
            try:
                results[i] = c.run(node, argv, timeout=timeout)
            except netns.HarnessError as e:
                results[i] = subprocess.CompletedProcess(argv, -1, "", str(e))
        threads = [threading.Thread(target=one, args=(i, j)) for i, j in enumerate(jobs)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        return results


def cmd_page(run, a):
    st, c, t = run.attach()
    node = c.node(a.node)
    url = t.sidecar_url(node)
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if t.tls and chromium and not a.text:  # headless Chromium cannot present a client cert
        print("(mutual TLS: headless chromium has no client certificate; the page as text)\n")
        chromium = None
    elif chromium and not a.text:
        out = os.path.abspath(a.out or os.path.join(
            run.dir, f"page-{node}-{time.strftime('%H%M%S')}.png"))
        shot, dom = run_chromium(c, node, chromium, [[f"--screenshot={out}", url],
                                                     ["--dump-dom", url]])
        if dom.returncode == 0 and dom.stdout.strip():
            parser = _Text()
            parser.feed(dom.stdout)
            print(parser.text())
        else:
            print(f"(chromium could not render {url}: {dom.stderr.strip()[-300:]})")
        if shot.returncode == 0 and os.path.exists(out):
            print(f"\nscreenshot of {url} (chromium inside {node}): {out}")
        else:
            print(f"\nno screenshot: {shot.stderr.strip()[-300:]}")
        return 0
    try:
        lines, rows = page_from_api(c, t, node, a.timeout)
    except OSError as e:
        raise UserError(f"the sidecar of {node} does not answer at {url}: {e}") from None
    if not chromium and not t.tls:
        print("(chromium is not installed, so no screenshot: the page's data from "
              f"{t.sidecar_url(node, '/api/v1/tasks')}, as text)\n")
    print("\n".join(lines))
    print()
    print_table(rows)
    return 0


def cmd_logs(run, a):
    st, c, t = run.attach()
    p = t.proc(a.task)
    if a.follow:
        os.execvp("tail", ["tail", "-n", str(a.lines), "-f", p.log_path])
    print(f"== {p.log_path} ({pid_text(p)})")
    print(p.tail(a.lines), end="")
    return 0


def cmd_exec(run, a):
    st, c, t = run.attach()
    argv = a.cmd[1:] if a.cmd[:1] == ["--"] else a.cmd
    argv = argv or [os.environ.get("SHELL", "/bin/bash")]
    node = c.node(a.node)
    print(f"(inside {node}: {c.address(node)}, host name {node}; the sidecar is "
          f"{t.sidecar_url(node)}; exit to leave)", file=sys.stderr, flush=True)
    os.execvp("ip", c.exec_argv(node, argv))


def cmd_forward(run, a):
    """A TCP forwarder from 127.0.0.1:PORT (this namespace) to the node's sidecar, for a real
    browser. Runs until Ctrl-C; adds nothing to any network configuration."""
    st, c, t = run.attach()
    node = c.node(a.node)
    target = (c.address(node), t.http_port)
    server = socket.create_server(("127.0.0.1", a.port))
    print(f"http://127.0.0.1:{server.getsockname()[1]}/ -> {node}'s sidecar "
          f"http://{target[0]}:{target[1]}/ (connections made inside {node}); Ctrl-C to stop",
          flush=True)

    def pump(src, dst):
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                dst.sendall(data)
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)

    def handle(client):
        try:
            upstream = c.in_node(node, lambda: socket.create_connection(target, timeout=5))
        except OSError as e:
            print(f"cannot reach {target[0]}:{target[1]} from {node}: {e}", flush=True)
            client.close()
            return
        upstream.settimeout(None)
        threading.Thread(target=pump, args=(upstream, client), daemon=True).start()
        pump(client, upstream)
    try:
        while True:
            client, _ = server.accept()
            threading.Thread(target=handle, args=(client,), daemon=True).start()
    except KeyboardInterrupt:
        return 0


def cmd_fault(op):
    def run_it(run, a):
        args = {}
        if op in ("cut", "cut-one-way"):
            args = {"a": a.a, "b": a.b, "how": "drop" if a.drop else "route"}
        elif op == "heal":
            args = {"a": a.a, "b": a.b}
        elif op == "down":
            args = {"node": a.node, "at": a.at}
        elif op == "up-link":
            args = {"node": a.node}
        print(run.ask(op, **args))
        return 0
    return run_it


def parse_signal(text):
    s = text.upper()
    try:
        return signal.Signals(int(s)) if s.isdigit() else signal.Signals[
            s if s.startswith("SIG") else "SIG" + s]
    except (KeyError, ValueError):
        raise UserError(f"unknown signal {text!r} (e.g. KILL, TERM, STOP, 9)") from None


def cmd_signal(fixed=None):
    def run_it(run, a):
        sig = fixed or parse_signal(a.sig)
        print(run.ask("signal", who=a.task, sig=int(sig)))
        return 0
    return run_it


def cmd_slow(run, a):
    what = "heartbeat_delay_ms" if a.heartbeat else "parameter_delay_ms"
    print(run.ask("slow", who=a.task, what=what, ms=a.ms))
    return 0


def cmd_wedge(run, a):
    if a.deadlock == a.block:
        raise UserError("say --deadlock (a worker's training thread) or --block (a ps's "
                        "ParameterService)")
    print(run.ask("wedge", who=a.task, deadlock=a.deadlock, block=a.block))
    return 0


def cmd_stacks(run, a):
    st, c, t = run.attach()
    node = c.node(a.from_node or 1)
    print(f"== trainscopectl stacks {a.task}, asked inside {node} ({c.address(node)}) of its "
          f"own sidecar ==", flush=True)
    r = t.ctl_stacks(node, a.task, fresh=a.fresh, timeout=a.timeout)
    sys.stdout.write(r.stdout)
    sys.stderr.write(r.stderr)
    return r.returncode


def cmd_start(run, a):
    print(run.ask("start", who=a.task))
    return 0


def cmd_destroy(run, a):
    try:
        st = run.state()
    except UserError:
        print(f"no cluster in {run.dir}")
        return 0
    pid = st.get("keeper_pid")
    if run.keeper_alive(st):
        with contextlib.suppress(UserError):
            run.ask("destroy", timeout=10)
        deadline = time.monotonic() + 30
        while netns.pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if not netns.pid_alive(pid) and not os.path.exists(run.state_path):
            names = ", ".join(st["cluster"]["namespaces"])
            print(f"destroyed: every process stopped, namespaces {names} removed; logs kept in "
                  f"{st['cluster']['log_dir']}")
            return 0
        print(f"the keeper (pid {pid}) did not finish: tearing down from state.json")
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    c = netns.Cluster.attach(st["cluster"], log=print)
    try:
        c.destroy()
    except netns.HarnessError as e:
        raise UserError(str(e)) from None
    with contextlib.suppress(FileNotFoundError):
        os.unlink(run.state_path)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(run.sock_path)
    print(f"destroyed; logs kept in {st['cluster']['log_dir']}")
    return 0


# ---------------------------------------------------------------- command line


def parser():
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--run", default=argparse.SUPPRESS,
                        help=f"run folder (default $TRAINSCOPE_CLUSTER_RUN or {DEFAULT_RUN})")
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], parents=[common],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    sub = ap.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(name, fn, help, **kw):
        p = sub.add_parser(name, parents=[common], help=help, description=help, **kw)
        p.set_defaults(fn=fn)
        return p

    add_up(add)
    add_look(add)
    add_break(add)
    add("destroy", cmd_destroy, "stop everything, remove the namespaces (logs are kept)")
    return ap


def add_up(add):
    p = add("up", cmd_up, "build the nodes, start the tasks and sidecars, wait for training")
    p.add_argument("--nodes", type=int, default=3)
    p.add_argument("--bin", default="build/bin", help="folder with linear_regression, "
                   "trainscope-sidecar, trainscopectl (default build/bin)")
    p.add_argument("--ps-nodes", default="1", help="nodes that run a ps, e.g. 1,2 (default 1)")
    p.add_argument("--workers-per-node", type=int, default=1,
                   help="workers on each node without a ps (default 1)")
    p.add_argument("--layout", help="explicit placement instead: ps@1,worker@2,worker@2,...")
    p.add_argument("--name", default=training.CLUSTER_NAME, help="cluster name")
    p.add_argument("--step-delay-ms", type=int, default=training.DEFAULT_STEP_DELAY_MS)
    p.add_argument("--sidecar-arg", action="append", metavar="ARG",
                   help="one more sidecar flag, e.g. --sidecar-arg=--stall_after_s=5 "
                        "(repeatable)")
    p.add_argument("--task-arg", action="append", metavar="ARG",
                   help="one more linear_regression flag, e.g. --task-arg=--rpc_deadline_ms=2000")
    p.add_argument("--tls", action="store_true",
                   help="mutual TLS everywhere: a CA and a certificate per node made with openssl "
                        "in the run folder, the three --tls_* flags on every process, HTTPS reads")
    p.add_argument("--no-wait", action="store_true", help="do not wait for steps")
    p.add_argument("--wait-s", type=float, default=60, help="how long to wait for steps")


def add_look(add):
    add("info", cmd_info, "nodes, addresses, pids, faults now, how to look")
    p = add("status", cmd_status, "trainscopectl status inside every node (or those given)")
    p.add_argument("nodes", nargs="*", metavar="NODE")
    p.add_argument("--timeout", type=float, default=15)
    p.add_argument("--exit-code", action="store_true",
                   help="exit with trainscopectl's worst code (1: a task not up)")
    p = add("page", cmd_page, "the node's sidecar page: screenshot and text with chromium, "
                              "else its data as text")
    p.add_argument("node", metavar="NODE")
    p.add_argument("--out", help="screenshot file (default: run folder/page-NODE-TIME.png)")
    p.add_argument("--text", action="store_true", help="text from the API, even with chromium")
    p.add_argument("--timeout", type=float, default=5)
    p = add("get", cmd_get, "GET a sidecar endpoint, asked inside a node")
    p.add_argument("node", metavar="NODE", help="whose sidecar")
    p.add_argument("path", nargs="?", default="/api/v1/tasks")
    p.add_argument("--from", dest="from_node", metavar="NODE", help="ask from inside this node")
    p.add_argument("--timeout", type=float, default=5)
    p = add("logs", cmd_logs, "a task's or sidecar's log")
    p.add_argument("task", metavar="TASK")
    p.add_argument("-n", dest="lines", type=int, default=30)
    p.add_argument("-f", dest="follow", action="store_true", help="follow (tail -f)")
    p = add("exec", cmd_exec, "run a command (default: a shell) inside a node")
    p.add_argument("node", metavar="NODE")
    p.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD")
    p = add("forward", cmd_forward, "serve a node's sidecar on 127.0.0.1:PORT here, for a "
                                    "browser")
    p.add_argument("node", metavar="NODE")
    p.add_argument("--port", type=int, default=0, help="default: any free port")


def add_break(add):
    for name, help in (("cut", "cut two nodes apart (blackhole routes both ways)"),
                       ("cut-one-way", "cut A's packets to B only")):
        p = add(name, cmd_fault(name), help)
        p.add_argument("a", metavar="A")
        p.add_argument("b", metavar="B")
        p.add_argument("--drop", action="store_true", help="drop in the switch instead "
                       "(nftables; the nodes' kernels do not know)")
    p = add("heal", cmd_fault("heal"), "undo every cut between A and B")
    p.add_argument("a", metavar="A")
    p.add_argument("b", metavar="B")
    p = add("down", cmd_fault("down"), "take a node's link down")
    p.add_argument("node", metavar="NODE")
    p.add_argument("--at", choices=("node", "switch"), default="node",
                   help="the node's eth0 (default) or the switch's port (carrier lost)")
    p = add("up-link", cmd_fault("up-link"), "bring a node's link back up")
    p.add_argument("node", metavar="NODE")
    p = add("kill", cmd_signal(), "send a signal (default KILL) to a task or sidecar:nK")
    p.add_argument("task", metavar="TASK")
    p.add_argument("sig", nargs="?", default="KILL", metavar="SIG")
    p = add("stop", cmd_signal(signal.SIGSTOP), "SIGSTOP a task or sidecar")
    p.add_argument("task", metavar="TASK")
    p = add("cont", cmd_signal(signal.SIGCONT), "SIGCONT a task or sidecar")
    p.add_argument("task", metavar="TASK")
    p = add("slow", cmd_slow, "delay every parameter call of a task by MS (0 clears): a slow "
                              "ps (trainscopectl fault)")
    p.add_argument("task", metavar="TASK")
    p.add_argument("ms", type=int, metavar="MS")
    p.add_argument("--heartbeat", action="store_true",
                   help="delay its heartbeat answers instead")
    p = add("wedge", cmd_wedge, "wedge a task for real (trainscopectl fault): --deadlock a "
                                "worker's training thread, --block a ps's ParameterService")
    p.add_argument("task", metavar="TASK")
    p.add_argument("--deadlock", action="store_true")
    p.add_argument("--block", action="store_true")
    p = add("stacks", cmd_stacks, "where a task is stuck: trainscopectl stacks inside a node")
    p.add_argument("task", metavar="TASK")
    p.add_argument("--from", dest="from_node", metavar="NODE", help="ask inside this node "
                   "(default n1)")
    p.add_argument("--fresh", action="store_true", help="take a snapshot now")
    p.add_argument("--timeout", type=float, default=30)
    p = add("start", cmd_start, "start a task or sidecar:nK that is not running")
    p.add_argument("task", metavar="TASK")


def main():
    a = parser().parse_args()
    run = Run(getattr(a, "run", None) or DEFAULT_RUN)
    try:
        return a.fn(run, a)
    except UserError as e:
        print(f"cluster.py: {e}", file=sys.stderr)
        return 1
    except netns.HarnessError as e:
        print(f"cluster.py: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # e.g. `cluster.py page 1 | head`
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
