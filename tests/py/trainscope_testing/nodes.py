"""The nodes a training.TrainingCluster runs on: the interface (Nodes) and its loopback
implementation (Loopback); netns.Cluster is the other, with a network namespace per node.

A TrainingCluster asks its nodes only what Nodes lists: their names, addresses and log folder,
whether each has a network of its own, a port for a listener, and to start, signal and run
programs and GET URLs "in" a node. On Loopback every node is this machine (127.0.0.1, one
network, no root needed), so listeners take free ports and nothing can be cut apart.

    with nodes.Loopback(2, log_dir) as n:
        t = training.TrainingCluster(n, "build/bin", training.Layout.default(2))
        t.start()

Standard library only.
"""

import json
import os
import signal
import socket
import subprocess
import tempfile
import time

from trainscope_testing import processes, web
from trainscope_testing.ports import free_port
from trainscope_testing.waiting import HarnessError


class Nodes:
    """N nodes named n1..nN (given as 1..N, "1".."N" or "n1".."nN"). A subclass sets `nodes`,
    `log_dir`, `procs` (every process started) and `own_networks`, and implements address,
    hostname, exec_argv, spawn, signal and http_get. Not thread-safe."""

    # True: each node has its own network (its own address, every port free on it).
    own_networks = True

    def node(self, node):
        """The node's name (n3) for 3, "3" or "n3"; HarnessError for anything else."""
        s = str(node)
        name = s if s.startswith("n") else f"n{s}"
        if name not in self.nodes:
            raise HarnessError(f"no node {node!r}: the nodes are {', '.join(self.nodes)}")
        return name

    def index(self, node):
        return self.nodes.index(self.node(node)) + 1

    def listen_port(self, node, default):
        """The port a listener on node should take when it would take `default`: that one
        where each node has its own network, else a free one (every node shares the ports)."""
        self.node(node)
        return default if self.own_networks else free_port()

    def run(self, node, argv, timeout=30, input=None):
        """Runs argv in the node to its end; returns subprocess.CompletedProcess (text stdout,
        stderr). HarnessError when it takes longer than timeout."""
        try:
            return subprocess.run(self.exec_argv(node, argv), capture_output=True, text=True,
                                  timeout=timeout, input=input,
                                  stdin=None if input is not None else subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise HarnessError(f"`{' '.join(map(str, argv))}` on {self.node(node)} took more "
                               f"than {timeout} s") from None

    def http_json(self, node, url, timeout=2.0, context=None):
        """GET url from inside the node and parse JSON; OSError/ValueError when that fails."""
        status, body = self.http_get(node, url, timeout, context)
        if status != 200:
            raise OSError(f"GET {url} from {self.node(node)}: HTTP {status}")
        return json.loads(body)


class Loopback(Nodes):
    """Nodes that are all this machine: address 127.0.0.1, its host name, one network.
    Processes are processes.Proc, stopped by pid (destroy, or the end of a `with` block).
    Not thread-safe."""

    own_networks = False

    def __init__(self, nodes=1, log_dir=None, grace_s=5.0, log=None):
        if nodes < 1:
            raise HarnessError(f"nodes must be 1 or more, not {nodes}")
        self.nodes = [f"n{k}" for k in range(1, nodes + 1)]
        self.log_dir = log_dir or tempfile.mkdtemp(prefix="trainscope-loopback-")
        os.makedirs(self.log_dir, exist_ok=True)
        self.grace_s = grace_s
        self.log = log or (lambda msg: None)
        self.procs = []

    def address(self, node):
        self.node(node)
        return "127.0.0.1"

    def hostname(self, node):
        self.node(node)
        return socket.gethostname()

    def exec_argv(self, node, argv):
        self.node(node)
        return list(map(str, argv))

    def spawn(self, node, argv, env=None, name=None):
        """Starts argv (log `log_dir/name.log`, name by default argv[0]'s file name); returns
        its Proc. env is added to this process's environment."""
        name = name or os.path.basename(str(argv[0]))
        p = processes.Proc(name, self.exec_argv(node, argv), self.log_dir,
                           {k: str(v) for k, v in (env or {}).items()}, self.node(node))
        self.procs.append(p.start())
        return p

    def signal(self, proc, sig):
        """Sends sig to a process this cluster started; HarnessError for any other."""
        if proc not in self.procs:
            raise HarnessError(f"{proc.name} (pid {proc.pid}) was not started here")
        if not proc.alive():
            raise HarnessError(f"{proc.name} (pid {proc.pid}) has exited")
        proc.signal(sig)

    def http_get(self, node, url, timeout=2.0, context=None):
        """GET url (no proxy); (status, body bytes). As netns.Cluster.http_get."""
        self.node(node)
        return web.get(url, timeout, context)

    def destroy(self, first=()):
        """Stops every process started: those whose names start with first[0], then first[1],
        ..., then the rest; each group SIGCONT + SIGTERM at once, SIGKILL for whatever has not
        ended grace_s later. Safe to call twice."""
        groups = [[p for p in self.procs if p.name.startswith(prefix)] for prefix in first]
        groups.append([p for p in self.procs if not any(p in g for g in groups)])
        for group in groups:
            live = [p for p in group if p.alive()]
            for p in live:
                p.signal(signal.SIGCONT)
                p.popen.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + self.grace_s
            for p in live:
                try:
                    p.popen.wait(max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    self.log(f"{p.name} (pid {p.pid}) ignored SIGTERM; killing it")
                    p.kill9()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        self.destroy()
        return False
