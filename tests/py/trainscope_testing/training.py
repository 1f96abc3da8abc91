#!/usr/bin/python3
"""A trainscope training cluster on nodes: real linear_regression tasks and one
trainscope-sidecar per node, with the ways to look at them from inside the nodes.

The one place that says how the tests start tasks and sidecars (TASK_FLAGS, sidecar_argv, the
spec file, TF_CONFIG, ports): cluster.py, the multi-node tests and the drills all build on it.
The nodes are a nodes.Nodes: netns.Cluster (a network namespace per node, root) or
nodes.Loopback (every node this machine; each task and sidecar on a free port, each sidecar
told its node's tasks, no exchange between sidecars).

    with netns.Cluster(3) as c:        # or nodes.Loopback(3)
        t = training.TrainingCluster(c, "build/bin", training.Layout.default(3))
        t.start()
        t.wait_training()
        t.steps("worker:0")            # from worker:0's own sidecar, asked inside its node
        t.view(3)["tasks"]             # node 3's sidecar's whole-cluster view
        t.kill("worker:1")             # SIGKILL, by pid

Standard library only.
"""

import base64
import json
import os
import signal
import subprocess
import time

from trainscope_testing import certs as tls_certs
from trainscope_testing import waiting
from trainscope_testing.cluster_spec import tf_config
from trainscope_testing.waiting import HarnessError

# Ports on nodes with networks of their own; on loopback, free ports instead.
TASK_PORT = 2222  # first task port on each node (then 2223, ...)
SIDECAR_HTTP_PORT = 9400  # the sidecar's default --http_port
SIDECAR_GRPC_PORT = 4317  # the sidecar's default --grpc_port (exchange, OTLP)
# Set by the cluster on loopback, where the sidecars share one network.
LOOPBACK_SIDECAR_FLAGS = ("--local_tasks", "--http_port", "--grpc_port", "--peer_sidecars")
CLUSTER_NAME = "multinode"

# Every task: trains "forever", slowly enough to leave the CPU to the others, and accepts
# `trainscopectl fault`. Riding out a stopped ps, a partition or a cut-off node is the runtime's
# default (--ps_patience_s), as users get it: nothing here stretches it.
TASK_FLAGS = ["--steps", "1000000000", "--log_every", "1000", "--enable_fault_injection"]
DEFAULT_STEP_DELAY_MS = 10


def sidecar_argv(bin_dir, spec_path, cluster_name, extra=()):
    """The sidecar of one node: default flags plus the cluster spec and name; its peers are
    the spec's default (every other host of the spec). extra: more flags (--sidecar-arg)."""
    return [os.path.join(bin_dir, "trainscope-sidecar"), "--cluster_spec", spec_path,
            "--cluster_name", cluster_name, *extra]


def flag_value(argv, flag, default):
    """The value of --flag in argv (`--flag V` or `--flag=V`), else default."""
    for i, a in enumerate(argv):
        if a == flag and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith(flag + "="):
            return a[len(flag) + 1:]
    return default


class Layout:
    """Which task runs on which node: an ordered list of (task name, node index)."""

    def __init__(self, placement):
        self.placement = list(placement)
        roles = {}
        for task, _ in self.placement:
            role, _, index = task.partition(":")
            if not index.isdigit():
                raise HarnessError(f"layout: {task!r} is not role:index")
            roles.setdefault(role, []).append(int(index))
        for role, indices in roles.items():
            if sorted(indices) != list(range(len(indices))):
                raise HarnessError(f"layout: {role} indices {sorted(indices)} are not "
                                   f"0..{len(indices) - 1}, each once")

    def check(self, nodes):
        """HarnessError when a task is placed on a node beyond 1..nodes."""
        for task, node in self.placement:
            if not 1 <= node <= nodes:
                raise HarnessError(f"layout: {task} on node {node}, but the nodes are "
                                   f"1..{nodes}")

    @classmethod
    def default(cls, nodes, ps_nodes=(1,), workers_per_node=1):
        """ps:i on each of ps_nodes; workers_per_node workers on every other node (on node 1
        too when there is no other)."""
        placement = [(f"ps:{i}", n) for i, n in enumerate(ps_nodes)]
        others = [n for n in range(1, nodes + 1) if n not in ps_nodes] or [1]
        w = 0
        for n in others:
            for _ in range(workers_per_node):
                placement.append((f"worker:{w}", n))
                w += 1
        return cls(placement)

    @classmethod
    def parse(cls, text):
        """"ps@1,worker@2,worker@3" (indices per role in order), or with explicit indices
        "ps:0@1,worker:0@2"."""
        counts, placement = {}, []
        for item in filter(None, (s.strip() for s in text.split(","))):
            task, _, node = item.partition("@")
            if not node.lstrip("n").isdigit():
                raise HarnessError(f"layout {item!r}: expected role@node, e.g. worker@2")
            role, _, index = task.partition(":")
            if not index:
                index = str(counts.get(role, 0))
            counts[role] = int(index) + 1
            placement.append((f"{role}:{index}", int(node.lstrip("n"))))
        if not any(t.startswith("worker:") or t.startswith("chief:") for t, _ in placement):
            raise HarnessError(f"layout {text!r} has no worker")
        return cls(placement)

    def to_list(self):
        return [list(p) for p in self.placement]


def task_name(t):
    """"role:index" of a task as a sidecar lists it (/api/v1/tasks)."""
    return f"{t['role']}:{t['task']}" if "role" in t else t.get("name")


class TrainingCluster:
    """Tasks and sidecars on nodes (a nodes.Nodes: netns.Cluster or nodes.Loopback). Not
    thread-safe (like the nodes).

    Every read goes to a sidecar over HTTP from inside a node (default: the node it asks
    about), so what it sees is what that node sees."""

    task_flags = TASK_FLAGS  # every task's; a subclass may give its own

    def __init__(self, cluster, bin_dir, layout, cluster_name=CLUSTER_NAME,
                 step_delay_ms=DEFAULT_STEP_DELAY_MS, sidecar_args=(), task_args=(),
                 sidecar_nodes=None, tls=False, _state=None):
        self.c = cluster
        self.bin = os.path.abspath(bin_dir)
        self.name = cluster_name
        self.step_delay_ms = step_delay_ms
        self.sidecar_args = list(sidecar_args)
        self.task_args = list(task_args)
        self.layout = layout
        layout.check(len(cluster.nodes))
        self.task_node = {t: cluster.node(n) for t, n in layout.placement}
        self.sidecar_nodes = [cluster.node(n) for n in (sidecar_nodes or cluster.nodes)]
        if not cluster.own_networks:
            given = [f for f in LOOPBACK_SIDECAR_FLAGS if flag_value(self.sidecar_args, f, None)]
            if given:
                raise HarnessError(f"sidecar flags {', '.join(given)}: set by the cluster on "
                                   "nodes that share one network")
        http = int(flag_value(self.sidecar_args, "--http_port", SIDECAR_HTTP_PORT))
        grpc = int(flag_value(self.sidecar_args, "--grpc_port", SIDECAR_GRPC_PORT))
        self.http_ports = {n: cluster.listen_port(n, http) for n in cluster.nodes}
        self.grpc_ports = {n: cluster.listen_port(n, grpc) for n in cluster.nodes}
        self.tasks = {}  # name -> the nodes' Proc
        self.delays = {}  # name -> {"parameter_delay_ms": .., "heartbeat_delay_ms": ..}
        self.sidecars = {}  # node -> the nodes' Proc
        ports = {}
        self.task_address = {}
        for t, node in self.task_node.items():
            port = ports[node] = ports.get(node, TASK_PORT - 1) + 1
            self.task_address[t] = f"{cluster.address(node)}:{cluster.listen_port(node, port)}"
        roles = {}
        for t in self.task_node:
            role, index = t.split(":")
            roles.setdefault(role, {})[int(index)] = self.task_address[t]
        self.spec = {"cluster": {r: [by[i] for i in sorted(by)] for r, by in roles.items()}}
        self.spec_path = os.path.join(cluster.log_dir, "cluster_spec.json")
        # The cluster key every sidecar signs its exchange with, as the package asks users to
        # set up (docs/security.md); exchange_key = False runs them unauthenticated.
        self.key_path = os.path.join(cluster.log_dir, "exchange.key")
        self.exchange_key = True
        # The token fresh captures need (--api_token_file), given to every sidecar and to
        # trainscopectl stacks --fresh.
        self.token_path = os.path.join(cluster.log_dir, "api.token")
        # Mutual TLS everywhere: certificates made in the run folder (tls/), each node's
        # naming its address; every process gets the three flags, every read is HTTPS.
        self.tls = tls_certs.Certs(os.path.join(cluster.log_dir, "tls")) if tls else None
        self.ssl_context = self.tls.context() if tls else None
        if _state:
            self._load(_state)

    # ------------------------------------------------------------ starting

    def need(self, name):
        path = os.path.join(self.bin, name)
        if not os.access(path, os.X_OK):
            raise HarnessError(f"{path} is missing: build it first (cmake --build build "
                               f"--target {name})")
        return path

    def prepare(self):
        """Checks the binaries, writes the spec and (tls) the certificates: what starting a
        sidecar or a task needs."""
        for b in ("linear_regression", "trainscope-sidecar", "trainscopectl"):
            self.need(b)
        with open(self.spec_path, "w") as f:
            json.dump(self.spec, f, indent=1)
        if not os.path.exists(self.key_path):
            fd = os.open(self.key_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(base64.b64encode(os.urandom(32)).decode() + "\n")
        if not os.path.exists(self.token_path):
            fd = os.open(self.token_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(os.urandom(32).hex() + "\n")
        if self.tls:
            for node in self.c.nodes:
                self.tls.node(node, self.c.address(node))

    def start(self):
        """prepare(), then starts every sidecar, then the ps tasks, then the others."""
        self.prepare()
        for node in self.sidecar_nodes:
            self.start_sidecar(node)
        for t in sorted(self.task_node, key=lambda t: not t.startswith("ps:")):
            self.start_task(t)

    def tls_flags(self, node):
        """The TLS flags of every process on node ([] without tls)."""
        return self.tls.flags(self.c.node(node)) if self.tls else []

    def tasks_on(self, node):
        node = self.c.node(node)
        return [t for t, n in self.task_node.items() if n == node]

    def sidecar_argv(self, node, tls_flags=None):
        flags = list(self.tls_flags(node) if tls_flags is None else tls_flags)
        if not self.c.own_networks:
            # Every node is one host to the sidecars: each is told its node's tasks and ports,
            # and they do not exchange (all of them would be one node to each other).
            node = self.c.node(node)
            if not self.tasks_on(node):
                raise HarnessError(f"no task on {node}: its sidecar would watch every task")
            flags += ["--local_tasks", ",".join(self.tasks_on(node)),
                      "--http_port", str(self.http_ports[node]),
                      "--grpc_port", str(self.grpc_ports[node]), "--peer_sidecars", "none"]
        if self.exchange_key and flag_value(self.sidecar_args, "--exchange_key_file", None) is None:
            flags += ["--exchange_key_file", self.key_path]
        if flag_value(self.sidecar_args, "--api_token_file", None) is None:
            flags += ["--api_token_file", self.token_path]
        # "{node}" in a sidecar flag is the node's name: a folder of its own (--state_dir).
        own = [a.replace("{node}", str(node)) for a in self.sidecar_args]
        return sidecar_argv(self.bin, self.spec_path, self.name, [*flags, *own])

    def start_sidecar(self, node, tls_flags=None):
        """Starts (or starts again) node's sidecar; tls_flags replace the node's own."""
        node = self.c.node(node)
        self.sidecars[node] = self.c.spawn(node, self.sidecar_argv(node, tls_flags),
                                           name=f"sidecar:{node}")
        return self.sidecars[node]

    def task_argv(self, task, tls_flags=None):
        flags = self.tls_flags(self.task_node[task]) if tls_flags is None else tls_flags
        return [os.path.join(self.bin, "linear_regression"), "--cluster_name", self.name,
                "--step_delay_ms", str(self.step_delay_ms), *self.task_flags, *flags,
                *self.task_args]

    def task_env(self, task):
        role, index = task.split(":")
        grpc_port = self.grpc_ports[self.task_node[task]]
        return {"TF_CONFIG": tf_config(self.spec, role, index),
                # Spans go to this node's own sidecar, whatever the caller's environment says.
                "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{grpc_port}",
                "OTEL_SERVICE_NAME": f"{self.name}-{role}"}

    def start_task(self, task, tls_flags=None):
        """Starts (or starts again) task on its node; tls_flags replace its node's (e.g. a
        certificate from another CA, to be refused)."""
        if task not in self.task_node:
            raise HarnessError(f"no task {task!r}: the tasks are "
                               f"{', '.join(self.task_node)}")
        self.tasks[task] = self.c.spawn(self.task_node[task], self.task_argv(task, tls_flags),
                                        env=self.task_env(task), name=task)
        return self.tasks[task]

    # ------------------------------------------------------------ processes

    def proc(self, who):
        """The Proc of a task ("worker:0") or a node's sidecar ("sidecar:n2", "sidecar:2")."""
        if who.startswith("sidecar:"):
            node = self.c.node(who.split(":", 1)[1])
            if node not in self.sidecars:
                raise HarnessError(f"no sidecar on {node}")
            return self.sidecars[node]
        if who not in self.tasks:
            raise HarnessError(f"no task {who!r}: the tasks are {', '.join(self.tasks)}"
                               "; sidecars are sidecar:n1, ...")
        return self.tasks[who]

    def kill(self, who, sig=signal.SIGKILL):
        """Sends sig (default SIGKILL) to a task or sidecar, by pid."""
        p = self.proc(who)
        if not p.alive():
            raise HarnessError(f"{who} (pid {p.pid}) is not running")
        self.c.signal(p, sig)
        return p

    def fault(self, task, parameter_delay_ms=None, heartbeat_delay_ms=None, link_delay_ms=None):
        """Delays every parameter call (a slow ps) and/or heartbeat answer of task, and/or its
        own calls to some peers (link_delay_ms: {"ps:1": 80}, slow links), through
        `trainscopectl fault` run inside its node; None keeps a delay as it is, 0 (or {})
        clears it."""
        if task not in self.task_node:
            raise HarnessError(f"no task {task!r}: the tasks are "
                               f"{', '.join(self.task_node)}")
        delays = self.delays.setdefault(task, {"parameter_delay_ms": 0, "heartbeat_delay_ms": 0})
        for key, value in (("parameter_delay_ms", parameter_delay_ms),
                           ("heartbeat_delay_ms", heartbeat_delay_ms)):
            if value is not None:
                delays[key] = int(value)
        if link_delay_ms is not None:
            delays["links"] = {peer: int(ms) for peer, ms in link_delay_ms.items() if ms}
        links = delays.get("links", {})
        r = self.c.run(self.task_node[task], [
            os.path.join(self.bin, "trainscopectl"), *self.tls_flags(self.task_node[task]),
            "fault", "--task", self.task_address[task],
            *[f"--{k}={v}" for k, v in sorted(delays.items()) if k != "links"],
            *[f"--link_delay_ms={peer}={ms}" for peer, ms in sorted(links.items())]],
            timeout=15)
        if r.returncode != 0:
            raise HarnessError(f"trainscopectl fault on {task}: "
                               f"{(r.stdout + r.stderr).strip()}")
        if not any(delays.values()):
            del self.delays[task]
        return dict(delays)

    def wedge(self, task, deadlock_training=False, block_parameter_service=False):
        """Wedges task for real through `trainscopectl fault` inside its node: its training
        thread deadlocks on two mutexes, or its ParameterService blocks (restart it to undo)."""
        if task not in self.task_node:
            raise HarnessError(f"no task {task!r}: the tasks are "
                               f"{', '.join(self.task_node)}")
        flags = (["--deadlock_training"] if deadlock_training else []) + (
            ["--block_parameter_service"] if block_parameter_service else [])
        r = self.c.run(self.task_node[task], [
            os.path.join(self.bin, "trainscopectl"), *self.tls_flags(self.task_node[task]),
            "fault", "--task", self.task_address[task], *flags], timeout=15)
        if r.returncode != 0:
            raise HarnessError(f"trainscopectl fault on {task}: "
                               f"{(r.stdout + r.stderr).strip()}")

    # ------------------------------------------------------------ looking

    def stacks(self, task, node, timeout=5.0):
        """/api/v1/stacks?task=task from node's sidecar, asked inside node (JSON)."""
        url = self.sidecar_url(node, f"/api/v1/stacks?task={task}")
        return self.c.http_json(node, url, timeout, self.ssl_context)

    def ctl_stacks(self, node, task, fresh=False, timeout=30):
        """`trainscopectl stacks task` run inside node against node's own sidecar."""
        tls = self.tls.flags(tls_certs.HARNESS) if self.tls else []
        token = ["--api_token_file", self.token_path] if fresh else []
        argv = [os.path.join(self.bin, "trainscopectl"), *tls, "stacks", task, "--sidecar",
                self.sidecar_url(node, "").replace("http://", ""),
                *(["--fresh", *token] if fresh else [])]
        return self.c.run(node, argv, timeout=timeout)

    @property
    def http_port(self):
        """The HTTP port of every node's sidecar, where it is one (nodes with networks of their
        own); else HarnessError: see http_ports."""
        return self._one_port(self.http_ports)

    @property
    def grpc_port(self):
        """As http_port, for the gRPC port (grpc_ports)."""
        return self._one_port(self.grpc_ports)

    def _one_port(self, ports):
        if len(set(ports.values())) != 1:
            raise HarnessError(f"the sidecars' ports differ by node: {ports}")
        return next(iter(ports.values()))

    def sidecar_address(self, node):
        """host:port of node's sidecar's HTTP server."""
        node = self.c.node(node)
        return f"{self.c.address(node)}:{self.http_ports[node]}"

    def sidecar_url(self, node, path="/"):
        scheme = "https" if self.tls else "http"
        return f"{scheme}://{self.sidecar_address(node)}{path}"

    def wait_sidecar(self, node, timeout=20):
        """Waits until node's sidecar answers /healthz; HarnessError with its log's tail when it
        exits or does not answer in time."""
        p = self.proc(f"sidecar:{self.c.node(node)}")

        def healthy():
            if not p.alive():
                raise HarnessError(f"{p.name} exited ({p.returncode}); its log "
                                   f"{p.log_path}:\n{p.tail(6)}")
            return self.http_get(node, self.sidecar_url(node, "/healthz"))[0] == 200
        waiting.wait_for(f"{p.name}'s /healthz", healthy, timeout)

    def http_get(self, node, url, timeout=2.0):
        """GET url from inside node, over HTTPS with the harness's certificate under tls."""
        return self.c.http_get(node, url, timeout, self.ssl_context)

    def view(self, node, local=False, from_node=None, timeout=2.0):
        """/api/v1/tasks of node's sidecar (local: its own tasks only), asked from inside
        from_node (default: node itself)."""
        url = self.sidecar_url(node, "/api/v1/tasks" + ("?local=1" if local else ""))
        return self.c.http_json(from_node or node, url, timeout, self.ssl_context)

    def task_view(self, task, node=None):
        """The task as node's sidecar shows it (default: its own node's, first-hand); None when
        that sidecar does not list it."""
        node = self.c.node(node or self.task_node[task])
        for t in self.view(node, local=node == self.task_node[task])["tasks"]:
            if task_name(t) == task:
                return t
        return None

    def states(self):
        """Each task's state, first-hand from its node's sidecar (left out: tasks whose node
        has no sidecar)."""
        out = {}
        for node in self.sidecars:
            for t in self.view(node, local=True)["tasks"]:
                if self.task_node.get(task_name(t)) == node:
                    out[task_name(t)] = t["state"]
        return out

    def steps(self, task):
        """The task's step count, first-hand from its own node's sidecar (None when unknown)."""
        t = self.task_view(task)
        return None if t is None or t.get("steps") is None else float(t["steps"])

    def wait_training(self, timeout=60, tasks=None, log=None):
        """Waits until every worker (or the given tasks) has made steps; HarnessError naming
        the ones that did not, with the tail of their logs."""
        tasks = tasks or [t for t in self.task_node if not t.startswith("ps:")]
        deadline = time.monotonic() + timeout
        pending = set(tasks)
        while pending and time.monotonic() < deadline:
            for who, p in [(t, self.tasks.get(t)) for t in pending] + [
                    (f"sidecar:{self.task_node[t]}", self.sidecars.get(self.task_node[t]))
                    for t in pending]:
                if p is not None and not p.alive():
                    raise HarnessError(f"{who} exited ({p.returncode}) before training "
                                       f"began; its log {p.log_path}:\n{p.tail(6)}")
            for t in sorted(pending):
                try:
                    if (self.steps(t) or 0) > 0:
                        pending.discard(t)
                        if log:
                            log(f"{t} is training")
                except (OSError, ValueError):
                    pass
            time.sleep(0.2)
        if pending:
            raise HarnessError(
                f"no steps from {', '.join(sorted(pending))} after {timeout:.0f} s; "
                + "; ".join(f"{p}: {self._tail(p)}" for p in sorted(pending)))

    def _tail(self, who):
        p = self.tasks.get(who)
        if p is None:
            return "not started"
        state = "running" if p.alive() else f"exited ({p.returncode})"
        return f"{state}, log {p.log_path}:\n{p.tail(6)}"

    def ctl_status(self, node, about=None, capture=True, timeout=15):
        """`trainscopectl status` run inside node, asking the sidecar of `about` (default:
        node's own). Returns the CompletedProcess (capture=False: printed to our stdout)."""
        tls = self.tls.flags(tls_certs.HARNESS) if self.tls else []  # global: before "status"
        argv = [os.path.join(self.bin, "trainscopectl"), *tls, "status", "--sidecar",
                self.sidecar_url(about or node, "").replace("http://", "")]
        if capture:
            return self.c.run(node, argv, timeout=timeout)
        return subprocess.run(self.c.exec_argv(node, argv), timeout=timeout)

    # ------------------------------------------------------------ state (cluster.py)

    def to_state(self):
        return {"bin": self.bin, "name": self.name, "step_delay_ms": self.step_delay_ms,
                "sidecar_args": self.sidecar_args, "task_args": self.task_args,
                "layout": self.layout.to_list(), "sidecar_nodes": self.sidecar_nodes,
                "http_port": self.http_port, "spec": self.spec, "tls": bool(self.tls),
                "tasks": {t: p.pid for t, p in self.tasks.items()}, "delays": self.delays,
                "sidecars": {n: p.pid for n, p in self.sidecars.items()}}

    def _load(self, st):
        by_pid = {p.pid: p for p in self.c.procs}
        self.tasks = {t: by_pid[pid] for t, pid in st["tasks"].items() if pid in by_pid}
        self.sidecars = {n: by_pid[pid] for n, pid in st["sidecars"].items() if pid in by_pid}
        self.delays = st.get("delays", {})

    @classmethod
    def attach(cls, cluster, st):
        """The TrainingCluster of a state written by to_state (cluster: the attached Cluster)."""
        return cls(cluster, st["bin"], Layout([tuple(p) for p in st["layout"]]), st["name"],
                   st["step_delay_ms"], st["sidecar_args"], st["task_args"],
                   st["sidecar_nodes"], st.get("tls", False), _state=st)
