#!/usr/bin/python3
"""Chaos: random and overlapping faults on a namespace cluster, every verdict checked in every
view and timed, and every page at a real Alertmanager's webhook (issue 20).

Four nodes (ps:0 on n1, ps:1 on n2, worker:0 on n3, worker:1 on n4, a sidecar on each, default
flags, checkpoints every 2 s into one shared directory); n5 runs Alertmanager (the shipped
alertmanager.yml) and a webhook receiver, and every sidecar posts to it (--alertmanager_url).
Every sidecar's /api/v1/tasks is read from inside its node all the time, each by its own thread.
--workers 3 (the fail-slow layout) adds worker:2 on n5, moves the monitor to n6, and lets the
nodes see this machine's /sys, so that a sidecar sees its tasks' cgroups as on a real node.

From --seed, it draws --faults faults of these types, in episodes of one, two or three at once
(a later one lands 0.1-0.8 s after the first, while that one is still being named); the faults
of an episode touch different nodes, and at most one node drops out of the sidecars' exchange
(cut off, or its sidecar killed):

  kill_worker  kill -9 of a worker, started again   -> dead in every view, paged
  kill_ps      kill -9 of a ps, started again (it restores the newest checkpoint)
                                                     -> dead in every view, paged
  kill_sidecar kill -9 of a node's sidecar, started again
                                                     -> the others call its node down, its tasks
                                                        unreachable (nobody watches them)
  stop         SIGSTOP of a worker or a ps, SIGCONT  -> hung in every view, paged
  cut          a worker's node and a ps's node cut apart, both ways (the switch drops)
                                                     -> the partition worker -> ps in every view,
                                                        paged
  cut_one_way  the same, one direction only          -> the same
  link_down    a node's link down                    -> the others call it cut off, its tasks
                                                        unreachable, it calls itself isolated;
                                                        paged
  slow_ps      every parameter call of a ps 700 ms late
                                                     -> the ps slow by its own figures
  slow_link    a worker's calls to one ps 80 ms late (trainscopectl fault --link_delay_ms),
               alone; not in the default --types
                                                     -> the worker slow, its reason naming the
                                                        link; the ps and the other worker up
  straggler    a worker put in a cgroup v1 cpu group with a quota of 5% of a core, alone; not in
               the default --types, implies --workers 3
                                                     -> the worker slow, a straggler held back by
                                                        its own CPU quota; the rest up
  starved_node both workers of n5 put in one cgroup v1 cpu group with a quota of 5% of a core,
               alone; not in the default --types, implies --workers 4
                                                     -> both workers slow, their reasons naming
                                                        n5 a throttled or starved node (neither
                                                        a straggler); the rest up
  flap         a node's link down and up every 0.5-2 s for about 6 s (first down 2 s)
                                                     -> called cut off in every other view
                                                        (partitions of its tasks in its short
                                                        ups and downs are true too)

A fault is held until its verdict holds in every view that can see it (a node cut off sees only
itself; a killed sidecar has no view), and at least 1 s, then undone. Then every view must come
back to all up, every worker must train again, and the next 10 s must stay all up in every view.

Counted, per fault type: n, found (verdict in every view within --verdict_limit_s), wrong
verdicts (a task no fault touches called dead, hung or unreachable, a partition or a cut-off node
no fault made, or a first-hand page no fault explains), precision, recall, the time from the
fault to the verdict in every view and to its page at the webhook (median, p99, worst), the time
from the heal of its episode (its last fault undone) to training again (not where a fault
restarted a ps, nor for a restarted worker: those resume with a process start), any state other
than up in the 10 s after recovery (flapping), and how many came late: a verdict over the issue's
goal (1 s for a kill or a stop, 1.5 s for a cut, a node cut off or a flap) or a page over 2 s
(3 s for a partition: its notification waits 1 s for its other side). For each late one it
prints what every view said until the verdict.

Then the incidents against the truth (when each fault began and was undone): every sidecar's
/api/v1/incidents (each keeps them in its --state_dir, as the package does) must hold each fault
as exactly one incident naming its cause (the task, the node, or the link between the two nodes),
and no incident without a fault; and the job's goodput from the ledger (each worker's own node,
over the run) must be within a point of the bench's own count from the step counters (time
between two rises of a worker's steps past the most it had reached is productive when they came
at its usual pace, else only the new steps at that pace). It prints the episodes where the two
differ most. --check_truth makes both a goal of --check.

--soak_s S: no faults; S seconds, with a CPU hog on n1 (--hog: a busy loop, one core), counting
every state other than up in any view and every page (docs/sidecar.md, "Quiet soak").

Usage (root):
  scripts/python tests/multinode/chaos_bench.py --bin build/bin --faults 200 --seed 1
  scripts/python tests/multinode/chaos_bench.py --bin build/bin --soak_s 1800 --hog
--check makes it a test: exit 1 when a goal is missed (precision or recall below 1, a page
missing or false, flapping, no training again); the times are printed, never asserted.
Exit 77 (one line) without network namespaces.
"""

import argparse
import json
import os
import random
import re
import signal
import statistics
import sys
import tempfile
import threading
import time

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.abspath(os.path.join(HERE, "..", ".."))

from trainscope_testing import diagnosis as d
from trainscope_testing import monitoring, netns, training
from trainscope_testing.cgroups import CpuCgroup
from trainscope_testing.logs import logger

log = logger("chaos")

NODES = (1, 2, 3, 4)
MONITOR = 5
AM_PORT, HOOK_PORT = 9093, 9095
PS, WORKERS = ("ps:0", "ps:1"), ("worker:0", "worker:1")
LAYOUT = [("ps:0", 1), ("ps:1", 2), ("worker:0", 3), ("worker:1", 4)]
SLOW_PS_MS = 700
SLOW_LINK_MS = 80
STRAGGLER_CORES = 0.05  # A straggler's CPU quota, in cores
QUIET_S = 10
PAGE_GOAL_S = 2.0  # A first-hand fault at the webhook within this long
# A partition's first notification waits this long for its other side (the incident route's
# group_wait in dashboards/alertmanager/alertmanager.yml), so that both come as one: its goal is
# that much longer.
PARTITION_GROUP_WAIT_S = 1.0


def page_goal_s(f):
    partition = f.page and f.page[0] == "TrainscopeTaskPartitioned"
    return PAGE_GOAL_S + (PARTITION_GROUP_WAIT_S if partition else 0)
FIRST_HAND = ("TrainscopeTaskDead", "TrainscopeTaskHung", "TrainscopeTaskPartitioned",
              "TrainscopeNodeIsolated")
HELD_UP = ("up", "blocked", "stalled", "slow")


def use_workers(count):
    """--workers 3, the fail-slow layout: worker:2 on n5 (a sidecar there too) and the monitor on
    n6. A straggler is slow against its peers, so it needs two of them. --workers 4 adds worker:3
    on n5 too: a node of two workers, which may starve together."""
    global NODES, MONITOR, WORKERS, LAYOUT
    if count >= 3:
        NODES, MONITOR = (1, 2, 3, 4, 5), 6
        WORKERS, LAYOUT = WORKERS + ("worker:2",), LAYOUT + [("worker:2", 5)]
    if count == 4:
        WORKERS, LAYOUT = WORKERS + ("worker:3",), LAYOUT + [("worker:3", 5)]


def pct(values, q):
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))] if s else None


# ------------------------------------------------------------------ the views, read all the time

class Watch:
    """One thread per node reads its sidecar's /api/v1/tasks every `interval` s; latest() is
    {node: (monotonic time read, view)} of the views read in the last second."""

    def __init__(self, t, nodes, interval=0.05):
        self.t, self.nodes, self.interval = t, nodes, interval
        self.lock = threading.Lock()
        self.views = {}
        self.stopping = threading.Event()
        self.threads = [threading.Thread(target=self.loop, args=(n,), daemon=True)
                        for n in nodes]
        self.on_view = None  # f(node, monotonic time read, view), from the node's thread

    def start(self):
        for th in self.threads:
            th.start()

    def stop(self):
        self.stopping.set()
        for th in self.threads:
            th.join(5)

    def loop(self, node):
        while not self.stopping.is_set():
            try:
                v = self.t.view(node, timeout=1.0)
                at = time.monotonic()
                with self.lock:
                    self.views[node] = (at, v)
                if self.on_view:
                    self.on_view(node, at, v)
            except (OSError, ValueError, netns.HarnessError):
                with self.lock:
                    self.views.pop(node, None)
            self.stopping.wait(self.interval)

    def latest(self):
        now = time.monotonic()
        with self.lock:
            return {n: v for n, (at, v) in self.views.items() if now - at < 1.0}


# ------------------------------------------------------------------ the faults

class Fault:
    """One fault: what it touches, how it is made and undone, and what every view must say."""
    kind = "process"
    page = None  # (alertname, {label: value}) the fault must page, or None
    goal_s = 1.0  # The goal for the verdict in every view (None: none set)
    limit_s = 0  # Its own longest wait for the verdict, when over --verdict_limit_s
    trail_after_s = None  # With no goal: a verdict later than this logs what the views said

    def __init__(self, bench, rng):
        self.b, self.rng = bench, rng
        self.t0 = self.undone_at = None
        self.verdict_s = self.first_s = self.page_s = self.training_s = None
        self.training_counted = False
        self.wrong = []
        # What each view said until the verdict: [(seconds after the fault, node, words)], kept
        # on every change and printed when the verdict came late.
        self.trail, self.said, self.held = [], {}, {}

    # What it touches: tasks whose state it changes, nodes it owns, nodes whose views are blind
    # to the rest of the cluster while it lasts, and workers whose training it holds up.
    tasks = ()
    nodes = ()
    blind = ()
    restarted = False

    def held_up(self):
        return set()

    def min_hold_s(self):
        """Held at least this long, even with every verdict in: a fault shorter than the
        sidecars' incident tick (200 ms) may come and go between two ticks, unlike a real one."""
        return 1.0

    def prepare(self):
        """Waits, before the episode, for what the fault's verdict needs to exist."""

    def views(self, active):
        """The nodes whose views must name this fault: not one cut off (it sees only itself),
        not one whose sidecar is down."""
        blind = set().union(*(set(f.blind) | set(f.no_view()) for f in active))
        return [n for n in NODES if n not in blind]

    def no_view(self):
        return ()

    def allows(self, node, view):
        """Extra things this fault explains in a view: (tasks, partitions, nodes) allowed."""
        return set(self.tasks), set(), set()

    def explains_page(self, labels):
        """Another page this fault explains besides its own (self.page)."""
        return False

    def __str__(self):
        return self.name


def node_of(task):
    return dict(LAYOUT)[task]


class KillTask(Fault):
    def __init__(self, bench, rng, task):
        super().__init__(bench, rng)
        self.task = task
        self.name = "kill_ps" if task.startswith("ps:") else "kill_worker"
        self.tasks = (task,)
        self.nodes = (node_of(task),)
        self.restarted = True
        role, index = task.split(":")
        self.page = ("TrainscopeTaskDead", {"role": role, "task": index})

    def held_up(self):
        return set(WORKERS) if self.task in PS else {self.task}

    def inject(self):
        self.b.t.kill(self.task)

    def undo(self):
        self.b.t.start_task(self.task)

    def holds(self, node, v):
        return d.state_is(v, self.task, "dead")

    def __str__(self):
        return f"{self.name} {self.task}"


class StopTask(KillTask):
    def __init__(self, bench, rng, task):
        super().__init__(bench, rng, task)
        self.name = "stop"
        self.restarted = False
        self.page = ("TrainscopeTaskHung", self.page[1])

    def inject(self):
        self.b.t.kill(self.task, signal.SIGSTOP)

    def undo(self):
        self.b.t.kill(self.task, signal.SIGCONT)

    def holds(self, node, v):
        return d.state_is(v, self.task, "hung")


class KillSidecar(Fault):
    name = "kill_sidecar"

    def __init__(self, bench, rng, node):
        super().__init__(bench, rng)
        self.node = node
        self.nodes = (node,)
        self.tasks = tuple(t for t, n in LAYOUT if n == node)
        self.restarted = True

    def no_view(self):
        return (self.node,)

    def allows(self, node, view):
        return set(self.tasks), set(), {self.b.c.hostname(self.node)}

    def inject(self):
        self.b.t.kill(f"sidecar:{self.node}")

    def undo(self):
        self.b.t.start_sidecar(self.node)

    def holds(self, node, v):
        n = d.node(v, self.b.c.hostname(self.node))
        return n is not None and n.get("status") == "down" and all(
            d.state_is(v, t, "unreachable") for t in self.tasks)

    def __str__(self):
        return f"kill_sidecar n{self.node}"


class Cut(Fault):
    kind = "network"
    goal_s = 1.5

    def __init__(self, bench, rng, worker, ps, one_way=False):
        super().__init__(bench, rng)
        self.worker, self.ps, self.one_way = worker, ps, one_way
        self.name = "cut_one_way" if one_way else "cut"
        self.nodes = (node_of(worker), node_of(ps))
        self.tasks = ()
        w, p = worker.split(":"), ps.split(":")
        self.page = ("TrainscopeTaskPartitioned", {"role": w[0], "task": w[1],
                                                   "peer_role": p[0], "peer_task": p[1]})
        # One way: which side's packets are dropped.
        self.forward = rng.random() < 0.5

    def cut_pairs(self):
        """The cut is between nodes: every worker of the worker's node (two on n5 with --workers
        4) is cut from every ps of the ps's node."""
        a, b = self.nodes
        return [(w, p) for w in WORKERS if node_of(w) == a for p in PS if node_of(p) == b]

    def held_up(self):
        return {w for w, _ in self.cut_pairs()}

    def allows(self, node, view):
        pairs = self.cut_pairs()
        return set(), set(pairs) | {(p, w) for w, p in pairs}, set()

    def explains_page(self, labels):
        pair = (f"{labels.get('role')}:{labels.get('task')}",
                f"{labels.get('peer_role')}:{labels.get('peer_task')}")
        return labels.get("alertname") == "TrainscopeTaskPartitioned" and pair in self.cut_pairs()

    def inject(self):
        a, b = self.nodes
        if self.one_way:
            self.b.c.cut_one_way(*((a, b) if self.forward else (b, a)), how="drop")
        else:
            self.b.c.cut(a, b, how="drop")

    def undo(self):
        self.b.c.heal(*self.nodes)

    def holds(self, node, v):
        return d.partition_named(v, self.worker, self.ps)

    def __str__(self):
        how = (" one way, " + ("worker -> ps" if self.forward else "ps -> worker")
               if self.one_way else "")
        return f"{self.name} {self.worker} | {self.ps}{how}"


class LinkDown(Fault):
    kind = "network"
    goal_s = 1.5
    name = "link_down"

    def __init__(self, bench, rng, node):
        super().__init__(bench, rng)
        self.node = node
        self.nodes = self.blind = (node,)
        self.tasks = tuple(t for t, n in LAYOUT if n == node)
        self.page = ("TrainscopeNodeIsolated", {"node": f"{bench.c.address(node)}:"})

    def held_up(self):
        return set(WORKERS) if any(t in PS for t in self.tasks) else set(self.tasks)

    def allows(self, node, view):
        return set(self.tasks), set(), {self.b.c.hostname(self.node)}

    def inject(self):
        self.b.c.link_down(self.node)

    def undo(self):
        self.b.c.link_up(self.node)

    def holds(self, node, v):
        if node == self.node:
            return d.isolated_seen_from_inside(v)
        return d.isolated_seen_from_outside(v, self.b.c.hostname(self.node), self.tasks)

    def views(self, active):
        others = super().views([f for f in active if f is not self])
        down = set().union(*(set(f.no_view()) for f in active))
        return others + ([self.node] if self.node not in down else [])

    def __str__(self):
        return f"link_down n{self.node}"


class Flap(LinkDown):
    name = "flap"

    def inject(self):
        self.b.c.link_down(self.node)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.flap, daemon=True)
        self.thread.start()

    def allows(self, node, view):
        # A flapping link cuts the node's tasks from their peers in its short up-and-downs: a
        # partition between one of them and a task elsewhere is a true verdict too.
        tasks, _, nodes = super().allows(node, view)
        parts = {(a, b) for a in self.tasks for b in PS + WORKERS if b not in self.tasks}
        return tasks, parts | {(b, a) for a, b in parts}, nodes

    def explains_page(self, labels):
        return labels.get("alertname") == "TrainscopeTaskPartitioned" and any(
            f"{labels.get(r)}:{labels.get(t)}" in self.tasks
            for r, t in (("role", "task"), ("peer_role", "peer_task")))

    def flap(self):
        # Down 2 s first (long enough to be named), then up and down every 0.5-2 s.
        if self.stop.wait(2.0):
            return
        up = False
        end = time.monotonic() + 4.5
        while time.monotonic() < end and not self.stop.is_set():
            (self.b.c.link_down if up else self.b.c.link_up)(self.node)
            up = not up
            self.stop.wait(self.rng.uniform(0.5, 2.0))

    def undo(self):
        self.stop.set()
        self.thread.join(10)
        self.b.c.link_up(self.node)

    def holds(self, node, v):
        # Named once, outside: the node is cut off. (Inside, it may be up again by now.)
        return node == self.node or super().holds(node, v)

    def min_hold_s(self):
        return 6.0

    def __str__(self):
        return f"flap n{self.node}"


class SlowPs(Fault):
    name = "slow_ps"
    goal_s = None

    def __init__(self, bench, rng, ps):
        super().__init__(bench, rng)
        self.ps = ps
        self.nodes = (node_of(ps),)
        self.tasks = (ps,)

    def inject(self):
        self.b.t.fault(self.ps, parameter_delay_ms=SLOW_PS_MS)

    def undo(self):
        self.b.t.fault(self.ps, parameter_delay_ms=0)

    def holds(self, node, v):
        callers = [w for w in WORKERS if w not in self.b.impeded]
        return d.ps_blamed(v, self.ps, callers)

    def held_up(self):
        return set(WORKERS)  # slower steps

    def __str__(self):
        return f"slow_ps {self.ps}"


class SlowLink(Fault):
    """One worker's path to one ps slow (issue 35). Named once the edge has been above its own
    past for 5 s over a 10 s median, so about 10 s after it lands: no 1 s goal."""
    name = "slow_link"
    goal_s = None
    limit_s = 30
    trail_after_s = 15

    def __init__(self, bench, rng, worker, ps):
        super().__init__(bench, rng)
        self.worker, self.ps = worker, ps
        self.nodes = (node_of(worker),)
        self.tasks = (worker,)

    def prepare(self):
        """A slow link is a change against the edge's own past: every view must have learned the
        edge's usual latency first (10 s after training starts, or after a worker restarts)."""
        def learned():
            views = self.b.watch.latest()
            return len(views) == len(NODES) and all(
                d.edges_learned(v, self.worker, 1, self.ps) for v in views.values())
        d.wait(f"every view has learned {self.worker} -> {self.ps}'s usual latency", learned, 60)

    def inject(self):
        self.b.t.fault(self.worker, link_delay_ms={self.ps: SLOW_LINK_MS})

    def undo(self):
        self.b.t.fault(self.worker, link_delay_ms={})

    def holds(self, node, v):
        w = d.task(v, self.worker) or {}
        return w.get("state") == "slow" and f"slow link {self.worker} -> {self.ps}" in w.get(
            "reason", "")

    def held_up(self):
        return {self.worker}

    def __str__(self):
        return f"slow_link {self.worker} -> {self.ps}"


class Straggler(Fault):
    """A worker held to STRAGGLER_CORES of a core by a real cgroup v1 cpu quota, made beneath this
    process's own cpu group (issue 35). Its steps must stay above its peers' in their 10 s
    medians before it is named: no 1 s goal."""
    name = "straggler"
    goal_s = None
    limit_s = 45
    trail_after_s = 15

    def __init__(self, bench, rng, worker):
        super().__init__(bench, rng)
        self.worker = worker
        self.nodes = (node_of(worker),)
        self.tasks = (worker,)
        self.group = None

    def inject(self):
        self.group = CpuCgroup(f"straggler-{self.b.episode}", STRAGGLER_CORES)
        self.group.add(self.b.t.proc(self.worker).pid)

    def undo(self):
        self.group.close()

    def holds(self, node, v):
        return d.straggler_by_quota(v, self.worker)

    def held_up(self):
        return {self.worker}

    def __str__(self):
        return f"straggler {self.worker}"


class StarvedNode(Fault):
    """Every worker of a node of two held together to STRAGGLER_CORES of a core by one real
    cgroup v1 cpu quota: a throttled node, named as the node in both workers' reasons."""
    name = "starved_node"
    goal_s = None
    limit_s = 45
    trail_after_s = 15

    def __init__(self, bench, rng, node):
        super().__init__(bench, rng)
        self.node = node
        self.nodes = (node,)
        self.tasks = tuple(w for w in WORKERS if node_of(w) == node)
        self.group = None

    def inject(self):
        self.group = CpuCgroup(f"starved-{self.b.episode}", STRAGGLER_CORES)
        for w in self.tasks:
            self.group.add(self.b.t.proc(w).pid)

    def undo(self):
        self.group.close()

    def holds(self, node, v):
        return all(d.node_starved(v, w, f"n{self.node}") for w in self.tasks)

    def held_up(self):
        return set(self.tasks)

    def __str__(self):
        return f"starved_node n{self.node} ({', '.join(self.tasks)})"


TYPES = ("kill_worker", "kill_ps", "kill_sidecar", "stop", "cut", "cut_one_way", "link_down",
         "slow_ps", "flap", "slow_link", "straggler", "starved_node")
DEFAULT_TYPES = TYPES[:-3]
FAIL_SLOW = ("slow_link", "straggler", "starved_node")  # Each alone in its episode: its row and column calm


def make(bench, rng, kind, free):
    """A fault of `kind` on nodes in `free` (None when none fits)."""
    def pick(cands):
        cands = [c for c in cands if set(c[1]) <= free]
        return rng.choice(cands)[0] if cands else None
    if kind in ("kill_worker", "kill_ps", "stop"):
        tasks = WORKERS if kind == "kill_worker" else PS if kind == "kill_ps" else PS + WORKERS
        task = pick([(t, (node_of(t),)) for t in tasks])
        return task and (StopTask if kind == "stop" else KillTask)(bench, rng, task)
    if kind in ("kill_sidecar", "link_down", "flap"):
        node = pick([(n, (n,)) for n in NODES])
        cls = {"kill_sidecar": KillSidecar, "link_down": LinkDown, "flap": Flap}[kind]
        return node and cls(bench, rng, node)
    if kind in ("cut", "cut_one_way"):
        pair = pick([((w, p), (node_of(w), node_of(p))) for w in WORKERS for p in PS])
        return pair and Cut(bench, rng, *pair, one_way=kind == "cut_one_way")
    if kind == "slow_link":
        pair = pick([((w, p), (node_of(w),)) for w in WORKERS for p in PS])
        return pair and SlowLink(bench, rng, *pair)
    if kind == "straggler":
        worker = pick([(w, (node_of(w),)) for w in WORKERS])
        return worker and Straggler(bench, rng, worker)
    if kind == "starved_node":
        shared = sorted({node_of(w) for w in WORKERS
                         if sum(node_of(x) == node_of(w) for x in WORKERS) >= 2})
        node = pick([(n, (n,)) for n in shared])
        return node and StarvedNode(bench, rng, node)
    ps = pick([(p, (node_of(p),)) for p in PS])
    return ps and SlowPs(bench, rng, ps)


def compatible(first, fault):
    """Faults whose verdicts do not hang on each other. A slow ps is named by the calls that
    still reach it: only beside faults that leave a worker calling both ps tasks. At most two
    nodes cut off at once (else the last one alone would be right to call itself cut off)."""
    every = [*first, fault]
    # A slow link is an edge far above the rest of its row and column, a straggler a worker far
    # above its peers: each needs them all calm.
    if len(every) > 1 and any(f.name in FAIL_SLOW for f in every):
        return False
    if sum(f.name == "slow_ps" for f in every) > 1:
        return False
    # A cut is named from the worker's calls across it. Beside a stopped ps, every worker hangs
    # in its call to that ps and calls nothing else: no call crosses the cut, and no view can
    # tell it until the ps resumes (seeds 6 and 11 drew it; docs/sidecar.md, "Chaos").
    if any(f.name in ("cut", "cut_one_way") for f in every) and any(
            f.name == "stop" and f.task in PS for f in every):
        return False
    if any(f.name == "slow_ps" for f in every):
        calm = ("kill_worker", "kill_sidecar", "cut", "cut_one_way")
        if any(f.name not in calm and not (f.name == "stop" and f.task in WORKERS)
               for f in every if f.name != "slow_ps"):
            return False
        if set(WORKERS) <= set().union(*(f.held_up() for f in every if f.name != "slow_ps")):
            return False
    # Nodes that drop out of the exchange (cut off, or their sidecar down): one at a time. With
    # two of four out, the two left have no third node to probe each other through, and one lost
    # probe would be right to doubt the other.
    return sum(f.name in ("link_down", "flap", "kill_sidecar") for f in every) <= 1


# ------------------------------------------------------------------ the bench

class Bench:
    def __init__(self, c, t, args):
        self.c, self.t, self.args = c, t, args
        self.rng = random.Random(args.seed)
        self.types = [k for k in args.types.split(",") if k]
        unknown = set(self.types) - set(TYPES)
        if unknown:
            raise SystemExit(f"--types: unknown {', '.join(sorted(unknown))}; "
                             f"known: {', '.join(TYPES)}")
        self.watch = Watch(t, NODES)
        self.hook_file = os.path.join(c.log_dir, "webhook.jsonl")
        self.done = []  # every fault made, with its figures
        self.wrong = []  # (episode, fault names, what)
        self.flapping = []  # (episode, fault names, seconds after recovery, what)
        self.false_pages = []
        self.missed = []  # (episode, fault names, what the views that did not name it said)
        self.impeded = set()
        self.episode = 0
        self.seen = set()
        self.late_evidence = False  # Kept with --keep_logs even when every goal was met
        self.marks = None  # [(monotonic, ledger_times, faults)] before each episode, when kept

    # ------------------------------------------------------------ monitoring on the monitor node

    def start_monitoring(self):
        am_cfg = os.path.join(self.c.log_dir, "alertmanager.yml")
        monitoring.render_alertmanager(SRC, am_cfg, f"http://127.0.0.1:{HOOK_PORT}/alerts")
        self.c.spawn(MONITOR, [sys.executable, os.path.join(SRC, "tests/drill/webhook_receiver.py"),
                               "--port", HOOK_PORT, "--out", self.hook_file], name="webhook")
        # Every node posts to it: it listens on the monitor node's address, not its loopback.
        self.c.spawn(MONITOR, monitoring.argv_alertmanager(
            monitoring.tool("prometheus-alertmanager", "prometheus-alertmanager"), am_cfg,
            os.path.join(self.c.log_dir, "am-data"), AM_PORT, address=self.c.address(MONITOR)),
            name="alertmanager")
        d.wait("Alertmanager ready", lambda: self.c.http_get(
            MONITOR, f"http://{self.c.address(MONITOR)}:{AM_PORT}/-/ready")[0] == 200, 30)

    def pages(self, since_wall):
        """[(received wall time, labels)] of firing first-hand notifications since since_wall."""
        return [(at, a["labels"]) for at, payload in monitoring.webhook_records(
            self.hook_file, since_wall) for a in payload.get("alerts", [])
            if a.get("status") == "firing" and a["labels"].get("alertname") in FIRST_HAND]

    # ------------------------------------------------------------ what the views say

    def all_up(self, views):
        return len(views) == len(NODES) and all(
            not v.get("isolated") and not v.get("partitions")
            and all(x["state"] == "up" for x in v["tasks"])
            and all(n.get("status") in ("alive", "self") for n in v.get("nodes", []))
            for v in views.values())

    def not_up(self, node, v):
        """Everything in a view that is not all up, in words."""
        out = [f"n{node} calls {x['name']} {x['state']}: {x['reason'][:160]}"
               for x in v["tasks"] if x["state"] != "up"]
        out += [f"n{node} names the partition {p['a']} | {p['b']}" for p in v.get("partitions", [])]
        out += [f"n{node} calls node {n.get('hostname') or n.get('id')} {n.get('status')}"
                for n in v.get("nodes", []) if n.get("status") not in ("alive", "self")]
        if v.get("isolated"):
            out.append(f"n{node} calls itself isolated")
        return out

    def wrong_in(self, faults, node, v):
        """What the view says that none of `faults` explains."""
        tasks, parts, nodes, held = set(), set(), set(), set()
        for f in faults:
            a, b, c = f.allows(node, v)
            tasks |= a
            parts |= b
            nodes |= c
            held |= f.held_up()
        if any(node in f.blind or node in f.no_view() for f in faults):
            # A node cut off may say anything about the others; a sidecar started again knows
            # nothing yet ("has not asked the sidecar of its node ... yet") until its first exchanges.
            return []
        out = []
        for x in v["tasks"]:
            ok = x["state"] == "up" or x["name"] in tasks or (
                x["name"] in held and x["state"] in HELD_UP)
            if not ok:
                out.append(f"n{node} calls {x['name']} {x['state']}: {x['reason'][:200]}")
        for p in v.get("partitions", []):
            if (p["a"], p["b"]) not in parts:
                out.append(f"n{node} names a partition {p['a']} | {p['b']}")
        for n in v.get("nodes", []):
            if n.get("status") in ("silent", "down", "unreachable", "isolated") and \
                    n.get("hostname") not in nodes:
                out.append(f"n{node} calls node {n.get('hostname')} {n['status']}")
        if v.get("isolated"):
            out.append(f"n{node} calls itself isolated")
        return out

    def steps(self, views):
        """{worker: steps} first-hand, from each worker's own node's view."""
        out = {}
        for w in WORKERS:
            v = views.get(node_of(w))
            x = v and d.task(v, w)
            if x and x.get("steps") is not None and x["state"] == "up":
                out[w] = x["steps"]
        return out

    # ------------------------------------------------------------ one episode

    def draw(self, budget):
        count = min(budget, self.rng.choice((1, 1, 2, 2, 3)))
        faults = []
        for _ in range(30):
            if len(faults) == count:
                break
            free = set(NODES) - set().union(*(f.nodes for f in faults))
            f = make(self, self.rng, self.rng.choice(self.types), free)
            if f is not None and compatible(faults, f):
                faults.append(f)
        return faults

    def note(self, store, faults, what, extra=(), view=None):
        """Once per episode and thing said (the same words, figures aside). The whole view that
        said it goes to evidence.jsonl in the log folder (kept with --keep_logs)."""
        names = ", ".join(map(str, faults))
        key = re.sub(r"[0-9.]+ ?(ms|s)\b", "", what.split(":")[0] + ":" + what.split(":")[1]
                     if what.count(":") > 1 else what)
        if (self.episode, key) not in self.seen:
            self.seen.add((self.episode, key))
            store.append((self.episode, names, what, *extra))
            log(f"  !! {what}")
            if view is not None:
                self.evidence(what, view)

    def evidence(self, what, view):
        with open(os.path.join(self.c.log_dir, "evidence.jsonl"), "a") as out:
            out.write(json.dumps({"episode": self.episode, "what": what, "wall": time.time(),
                                  "view": view}) + "\n")

    def run_episode(self, faults):
        self.episode += 1
        log(f"episode {self.episode}: " + " + ".join(map(str, faults)))
        start_wall = time.time()
        self.impeded = set().union(*(f.held_up() for f in faults))
        # A later fault lands 0.1-0.8 s after the one before, while the views are read: each
        # fault's times count from its own landing, and the ones before are being named meanwhile.
        due = [0.0]
        for _ in faults[1:]:
            due.append(due[-1] + self.rng.uniform(0.1, 0.8))
        pending = list(zip(due, faults))
        start = time.monotonic()
        def limit(f):
            return max(self.args.verdict_limit_s, f.limit_s)
        while True:
            while pending and time.monotonic() - start >= pending[0][0]:
                f = pending.pop(0)[1]
                f.t0, f.t0_wall, f.episode = time.monotonic(), time.time(), self.episode
                f.inject()
            now = time.monotonic()
            active = [f for f in faults if f.t0 is not None]
            views = self.watch.latest()
            for n, v in views.items():
                for w in self.wrong_in(active, n, v):
                    self.note(self.wrong, faults, w, view=v)
            for f in active:
                if f.verdict_s is None and now - f.t0 < limit(f):
                    self.keep_trail(f, active, views, now)
                    need = f.views(active)
                    held = [n for n in need if n in views and f.holds(n, views[n])]
                    if held and f.first_s is None:
                        f.first_s = now - f.t0
                    if len(held) == len(need):
                        f.verdict_s = now - f.t0
            for f in active:
                if f.page and f.page_s is None:
                    f.page_s = self.first_page(f)
            if pending:
                time.sleep(0.01)
                continue
            waiting = [f for f in faults if now - f.t0 < limit(f) and (
                f.verdict_s is None or (f.page and f.page_s is None)
                or now - f.t0 < f.min_hold_s())]
            if not waiting:
                break
            time.sleep(0.03)
        views = self.watch.latest()
        for f in faults:
            if f.verdict_s is None:
                said = [f"n{n}: " + ("no answer" if n not in views else "; ".join(
                    self.not_up(n, views[n])[:3]) or "all up") for n in f.views(faults)
                    if n not in views or not f.holds(n, views[n])]
                self.note(self.missed, faults, f"{f}: " + " | ".join(said))
        for f in faults:
            late_page = f.page_s is not None and f.page_s > page_goal_s(f)
            after = f.goal_s or f.trail_after_s
            if after and (f.verdict_s is None or f.verdict_s > after) or late_page:
                self.late_evidence = True
                log(f"  {f}: verdict {fmt(f.verdict_s)}, page {fmt(f.page_s)}; "
                    "what the views said until the verdict:")
                for at, n, said in f.trail[:24]:
                    log(f"    +{at:.2f} s n{n}: " + ("; ".join(said) or "all up"))
        for f in faults:
            f.undo()
            f.undone_at, f.undone_wall = time.monotonic(), time.time()
        self.recover(faults, start_wall)
        self.done.extend(faults)

    def keep_trail(self, f, faults, views, now):
        for n in f.views(faults):
            if n not in views:
                continue
            said = tuple(w[:110] for w in self.not_up(n, views[n])[:6])
            if f.said.get(n) != said:
                f.said[n] = said
                f.trail.append((now - f.t0, n, said))
            # A verdict a view had and lost before every view had it: the whole view, to read.
            holds = f.holds(n, views[n])
            if f.held.get(n) and not holds:
                self.late_evidence = True
                self.evidence(f"{f}: n{n} had the verdict at +{f.held[n]:.2f} s and lost it",
                              views[n])
            if holds and not f.held.get(n):
                f.held[n] = now - f.t0
            elif not holds:
                f.held.pop(n, None)

    def first_page(self, f):
        name, labels = f.page
        for at, got in self.pages(f.t0_wall):
            if got.get("alertname") != name:
                continue
            if self.page_matches(f, got):
                return at - f.t0_wall
        return None

    @staticmethod
    def page_matches(f, got):
        name, labels = f.page
        if got.get("alertname") != name:
            return False
        if name == "TrainscopeTaskPartitioned":  # either side's page names both
            a = (labels["role"], labels["task"], labels["peer_role"], labels["peer_task"])
            b = (got.get("role"), got.get("task"), got.get("peer_role"), got.get("peer_task"))
            return b in (a, (a[2], a[3], a[0], a[1]))
        return all(got.get(k, "").startswith(v) if k == "node" else got.get(k) == v
                   for k, v in labels.items())

    def recover(self, faults, start_wall):
        """Every view all up and every worker training again, then QUIET_S seconds all up."""
        undone = max(f.undone_at for f in faults)
        base = self.steps(self.watch.latest())
        moved = {}
        deadline = undone + self.args.recover_limit_s
        while time.monotonic() < deadline:
            views = self.watch.latest()
            now = time.monotonic()
            for w, s in self.steps(views).items():
                if w not in moved and w in base and s != base[w]:
                    moved[w] = now
                elif w not in base:
                    base[w] = s
            for n, v in views.items():
                for w in self.wrong_in(faults, n, v):
                    self.note(self.wrong, faults, w, view=v)
            if self.all_up(views) and len(moved) == len(WORKERS):
                break
            time.sleep(0.03)
        else:
            views = self.watch.latest()
            what = [w for n, v in views.items() for w in self.not_up(n, v)] or ["a view missing"]
            self.note(self.wrong, faults, "not back to all up in "
                      f"{self.args.recover_limit_s:.0f} s: " + "; ".join(what[:4]))
        # Training again: from the heal of the whole episode (a worker held up by two faults
        # trains once both are undone), for the workers it held up. A restarted worker resumes
        # with its process, and after a restarted ps every worker waits for that process to start
        # and restore: neither is a heal, and neither is counted (the times are process starts).
        heal = max(f.undone_at for f in faults)
        restarted = {f.task for f in faults if isinstance(f, KillTask) and f.restarted}
        for f in faults:
            held = f.held_up() - restarted
            if held <= set(moved):
                f.training_s = max([moved[w] - heal for w in held] or [0.0])
            f.training_counted = bool(held) and not restarted & set(PS) and not f.restarted
        recovered = time.monotonic()
        quiet_from_wall = time.time()
        while time.monotonic() - recovered < QUIET_S:
            for n, v in self.watch.latest().items():
                for w in self.not_up(n, v):
                    self.note(self.flapping, faults, w, (time.monotonic() - recovered,), view=v)
            time.sleep(0.05)
        for at, labels in self.pages(start_wall):
            if not any(f.page and self.page_matches(f, labels) or f.explains_page(labels)
                       for f in faults):
                self.note(self.false_pages, faults, f"page {json.dumps(labels, sort_keys=True)}")
            elif at > quiet_from_wall:
                self.note(self.false_pages, faults,
                          f"page after recovery {json.dumps(labels, sort_keys=True)}")

    def run(self, total):
        made = 0
        while made < total:
            faults = self.draw(total - made)
            for f in faults:
                f.prepare()
            if self.marks is not None:
                self.marks.append((time.monotonic(), ledger_times(self), faults))
            self.run_episode(faults)
            made += len(faults)
            for f in faults:
                log(f"  {f}: first view {fmt(f.first_s)}, verdict {fmt(f.verdict_s)}, page {fmt(f.page_s) if f.page else '-'}"
                    f", training again {fmt(f.training_s)}")

    # ------------------------------------------------------------ the table

    def report(self):
        print(f"\n{len(self.done)} faults in {self.episode} episodes, seed {self.args.seed}, "
              f"{len(NODES)} nodes (2 ps, {len(WORKERS)} workers), default flags; times in seconds")
        head = (f"{'fault':13s} {'n':>4s} {'found':>5s} {'wrong':>5s} {'prec':>5s} {'recall':>6s}"
                f" {'first view med':>14s} {'verdict med/p99/worst':>22s} {'page med/p99/worst':>20s}"
                f" {'training again med/worst':>25s} {'flaps':>5s} {'late':>5s}")
        print(head)
        ok = True
        for kind in TYPES:
            fs = [f for f in self.done if f.name == kind]
            if not fs:
                continue
            found = [f for f in fs if f.verdict_s is not None]
            in_eps = self.episodes_with(kind)
            wrong = len([w for w in self.wrong if w[0] in in_eps])
            flaps = len([w for w in self.flapping if w[0] in in_eps])
            prec = len(found) / (len(found) + wrong) if found or wrong else 1.0
            recall = len(found) / len(fs)
            v = [f.verdict_s for f in found]
            first = [f.first_s for f in fs if f.first_s is not None]
            p = [f.page_s for f in fs if f.page and f.page_s is not None]
            paged = "-" if not fs[0].page else three(p)
            tr = [f.training_s for f in fs if f.training_s is not None and f.training_counted]
            late = sum(1 for f in fs if f.goal_s and (f.verdict_s is None or f.verdict_s > f.goal_s)
                       or (f.page_s or 0) > page_goal_s(f))
            print(f"{kind:13s} {len(fs):4d} {len(found):5d} {wrong:5d} {prec:5.2f} {recall:6.2f}"
                  f" {(f'{statistics.median(first):.2f}' if first else '-'):>14s}"
                  f" {three(v):>22s} {paged:>20s} "
                  f"{(f'{statistics.median(tr):.2f} / {max(tr):.2f}' if tr else '-'):>25s}"
                  f" {flaps:5d} {late:5d}")
            ok &= prec == 1.0 and recall == 1.0 and not flaps
            ok &= not fs[0].page or len(p) == len(fs)
        for title, rows in (("missed verdicts", self.missed), ("wrong verdicts", self.wrong),
                            ("flapping after recovery", self.flapping),
                            ("false or late pages", self.false_pages)):
            print(f"{title}: {len(rows) or 'none'}")
            for r in rows:
                print(f"  episode {r[0]} ({r[1]}): {r[2]}" + (f" at +{r[3]:.1f} s" if
                                                             len(r) > 3 else ""))
        ok &= not self.false_pages
        self.report_notifications()
        untrained = [f for f in self.done if f.training_s is None]
        if untrained:
            print("no training again after: " + ", ".join(map(str, untrained)))
        return ok and not untrained

    def report_notifications(self):
        """How many notifications (webhook POSTs) paged for each paged fault, from its start to
        a second after its undo: one per incident is the goal (docs/alerts.md, "One page per
        fault"). A flap may page again once resolved. Printed, not checked:
        multinode_alertmanager_ha checks that a partition's two sides come as one."""
        posts = monitoring.webhook_records(self.hook_file, 0)
        got = {}
        for f in self.done:
            if not f.page or getattr(f, "undone_wall", None) is None:
                continue
            got[f] = [(at, a) for at, p in posts if f.t0_wall <= at <= f.undone_wall + 1
                      for a in p.get("alerts", [])[:1] if any(
                          b.get("status") == "firing" and self.page_matches(f, b["labels"])
                          for b in p.get("alerts", []))]
        more = [f for f, n in got.items() if len(n) > 1]
        print(f"notifications per paged fault: {len(got) - len(more)} of {len(got)} in one")
        for f in more:  # When each came, and its incident, as its first alert says
            print(f"  {f}: " + ", ".join(
                f"+{at - f.t0_wall:.2f} s {a['labels'].get('incident', 'no incident')} "
                f"({a.get('generatorURL', '?')[:32]})" for at, a in got[f]))

    def episodes_with(self, kind):
        return {f.episode for f in self.done if f.name == kind}


def three(values):
    if not values:
        return "-"
    return f"{statistics.median(values):.2f}/{pct(values, 0.99):.2f}/{max(values):.2f}"


def fmt(x):
    return "-" if x is None else f"{x:.2f} s"


# ------------------------------------------------------------------ incidents and goodput

class StepCount:
    """The bench's own count of each worker's training time, from its step counter as its own
    node's view reads it (every 50 ms; the task's heartbeat comes every 100 ms). Between two
    reads where the steps rose past the most the worker had reached, the time was productive when
    the new steps came at up to twice the worker's usual pace (the median over the run), else
    only the new steps at that pace (a slowed worker); the rest was lost (waiting, down, or
    redoing steps lost to a restore)."""

    PACE_SLACK = 2.0

    def __init__(self):
        self.lock = threading.Lock()
        self.counting = False
        self.first, self.last_rise, self.end = {}, {}, None
        self.highest, self.incarnation = {}, {}
        self.rises = {}  # worker -> [(when, seconds since the last rise, new steps)]

    def start(self):
        with self.lock:
            self.counting = True

    def stop(self):
        with self.lock:
            self.counting, self.end = False, time.monotonic()

    def on_view(self, node, at, view):
        with self.lock:
            if not self.counting:
                return
            for w in WORKERS:
                x = node_of(w) == node and d.task(view, w)
                if not x or x.get("steps") is None or x["state"] in ("dead", "missing"):
                    continue
                steps, incarnation = int(x["steps"]), x.get("incarnation")
                if w not in self.first:
                    self.first[w] = self.last_rise[w] = at
                elif incarnation != self.incarnation.get(w):
                    # Started again: it counts from 0 and redoes nothing (the model is on the ps).
                    self.highest[w], self.last_rise[w] = steps, at
                elif steps > self.highest[w]:
                    self.rises.setdefault(w, []).append((at, at - self.last_rise[w],
                                                         steps - self.highest[w]))
                    self.last_rise[w] = at
                self.incarnation[w] = incarnation
                self.highest[w] = max(self.highest.get(w, -1), steps)

    def seconds(self, w, since=None, until=None):
        """(productive, total) seconds of worker w over the count (or of the rises from
        `since` to `until`, monotonic)."""
        rises = self.rises.get(w, [])
        paces = sorted(dt / n for _, dt, n in rises if dt < 0.3)
        if not paces:
            return 0.0, 0.0
        usual = paces[len(paces) // 2]
        since, until = since or self.first[w], until or self.end
        productive = sum(dt if dt <= self.PACE_SLACK * n * usual else n * usual
                         for at, dt, n in rises if since < at <= until)
        return productive, until - max(since, self.first[w])


def ledger_times(bench):
    """{worker: {outcome: seconds}} from each worker's own node's ledger (/api/v1/incidents'
    goodput); a worker whose node's sidecar does not answer is left out."""
    out = {}
    for w in WORKERS:
        n = node_of(w)
        try:
            got = bench.c.http_json(n, bench.t.sidecar_url(n, "/api/v1/incidents?limit=1"), 3,
                                    bench.t.ssl_context)
        except (OSError, ValueError, netns.HarnessError):
            continue
        for row in got.get("goodput", {}).get("tasks", []):
            if row.get("task") == w:
                out[w] = {k[:-len("_seconds")]: v for k, v in row.items() if k != "task"}
    return out


def node_id(bench, n):
    return f"{bench.c.address(n)}:{bench.t.grpc_ports[bench.c.node(n)]}"


def expected_causes(bench, f):
    """The causes an incident of fault f may name: (cause kind, its names)."""
    if isinstance(f, (KillSidecar, LinkDown, StarvedNode)):
        return {("node", frozenset([node_id(bench, f.node)]))}
    if isinstance(f, (Cut, SlowLink)):
        a, b = node_of(f.worker), node_of(f.ps)
        return {("link", frozenset([node_id(bench, a), node_id(bench, b)])),
                ("link", frozenset([f.worker, f.ps]))}
    task = getattr(f, "task", None) or getattr(f, "ps", None) or getattr(f, "worker", None)
    return {("task", frozenset([task]))}


def cause_of(incident):
    c = incident.get("cause", {})
    kind = c.get("kind", "")
    names = {"link": (c.get("task") or c.get("node"), c.get("peer")),
             "node": (c.get("node"),)}.get(kind, (c.get("task"),))
    return kind, frozenset(x for x in names if x)


# An incident's start falls from this long before its fault's (a view that saw it first, dated
# by its cause's own state) to this long after it was undone (a view that saw it last).
TRUTH_BEFORE_S, TRUTH_AFTER_S = 2.0, 1.0


def compare_incidents(bench, faults):
    """Every sidecar's incidents against the faults made (the truth: when each began and was
    undone). Returns (lines to print, ok)."""
    incidents, lists = {}, {}
    for n in NODES:
        try:
            got = bench.c.http_json(n, bench.t.sidecar_url(n, "/api/v1/incidents?limit=1000"),
                                    5, bench.t.ssl_context)
        except (OSError, ValueError, netns.HarnessError) as e:
            lists[n] = f"no answer ({e})"
            continue
        lists[n] = got.get("incidents", [])
        with open(os.path.join(bench.c.log_dir, f"incidents-n{n}.json"), "w") as out:
            json.dump(got, out, indent=1)
        for inc in lists[n]:
            incidents.setdefault(inc["id"], (inc, set()))[1].add(n)
    start = min((f.t0_wall for f in faults), default=time.time())
    lines, ok, matched = [], True, set()
    per_fault = []
    for f in faults:
        want = expected_causes(bench, f)
        ids = sorted(i for i, (inc, _) in incidents.items() if cause_of(inc) in want and
                     f.t0_wall - TRUTH_BEFORE_S <= inc["started"] <= f.undone_wall + TRUTH_AFTER_S)
        matched |= set(ids)
        per_fault.append((f, ids))
    extra = [(inc, nodes) for i, (inc, nodes) in incidents.items()
             if i not in matched and inc["started"] >= start - TRUTH_BEFORE_S]
    one = [f for f, ids in per_fault if len(ids) == 1]
    lines.append(f"incidents: {len(one)} of {len(faults)} faults are exactly one incident with "
                 f"the right cause; {len(extra)} incidents without a fault "
                 f"({len(incidents)} incidents on {len(NODES)} sidecars)")
    for f, ids in per_fault:
        if len(ids) != 1:
            ok = False
            lines.append(f"  episode {f.episode} {f}: {len(ids)} incidents " + " ".join(
                f"{i} ({incidents[i][0].get('summary', '')[:100]})" for i in ids))
    for inc, nodes in extra:
        ok = False
        lines.append(f"  no fault: {inc['id']} on n{','.join(map(str, sorted(nodes)))} from "
                     f"+{inc['started'] - start:.1f} s: {inc.get('summary', '')[:160]}")
    # Every node names a fault it could see alike: the same id on each node that lists one.
    for f, ids in per_fault:
        if len(ids) == 1:
            f.incident_nodes = incidents[ids[0]][1]
    # A node that named a fault otherwise and then took its owner's id (ownership through the
    # exchange) says so in `former_ids`: how often that mended a split.
    took = sorted((n, inc["id"]) for n in NODES if isinstance(lists[n], list)
                  for inc in lists[n] if inc.get("former_ids"))
    lines.append(f"owners' ids: {len(took)} time(s) a node took the owner's id for a fault it had "
                 f"named otherwise" + "".join(f"; n{n} {i}" for n, i in took[:6]))
    return lines, ok


def episodes_apart(count, marks, end):
    """The episodes where the ledger and the step counters differ most, in productive seconds
    (each worker's own node), for reading."""
    rows = []
    for (t0, led0, faults), (t1, led1, _) in zip(marks, marks[1:] + [end]):
        gap = 0.0
        for w in WORKERS:
            if w in led0 and w in led1:
                gap += (led1[w].get("productive", 0) - led0[w].get("productive", 0)) - \
                    count.seconds(w, t0, t1)[0]
        rows.append((gap, ", ".join(map(str, faults))))
    rows.sort(key=lambda r: -abs(r[0]))
    return [f"  ledger minus step counters, productive: {g:+.2f} s in {f}" for g, f in rows[:6]]


def compare_goodput(count, before, after):
    """The ledger's goodput over the run (each worker's own node) against the bench's count from
    the step counters. Returns (lines, ok): ok when the two are within a point of each other."""
    lines, rows = [], []
    for w in WORKERS:
        productive, total = count.seconds(w)
        if w not in before or w not in after or not total:
            lines.append(f"  {w}: no ledger on its node before and after, or no steps")
            continue
        delta = {k: after[w].get(k, 0) - before[w].get(k, 0) for k in after[w]}
        counted = sum(delta.values()) - delta.get("idle", 0)
        rows.append((w, delta.get("productive", 0), counted, productive, total))
    if not rows:
        return lines + ["goodput: nothing to compare"], False
    led = sum(r[1] for r in rows) / max(1e-9, sum(r[2] for r in rows))
    own = sum(r[3] for r in rows) / max(1e-9, sum(r[4] for r in rows))
    for w, p, c, bp, bt in rows:
        lines.append(f"  {w}: ledger {p:.1f} of {c:.1f} s productive ({p / max(c, 1e-9):.3f}), "
                     f"step counter {bp:.1f} of {bt:.1f} s ({bp / max(bt, 1e-9):.3f})")
    ok = abs(led - own) <= 0.01
    lines.insert(0, f"goodput: ledger {led:.4f}, step counters {own:.4f}, "
                    f"{abs(led - own) * 100:.2f} points apart (goal: within 1)")
    return lines, ok


# ------------------------------------------------------------------ soak

def soak(c, t, bench, seconds, hog):
    if hog:
        c.spawn(1, [sys.executable, "-c", "while True: pass"], name="hog")
        log("a CPU hog on n1 (one of the machine's cores)")
    start_wall, start = time.time(), time.monotonic()
    seen, last = [], {}
    checks = 0
    while time.monotonic() - start < seconds:
        views = bench.watch.latest()
        for n in NODES:
            if n not in views:
                seen.append((time.monotonic() - start, f"n{n}'s sidecar did not answer"))
                continue
            for w in bench.not_up(n, views[n]):
                key = (n, w.split(":")[0])
                if last.get(key) != w:
                    seen.append((time.monotonic() - start, w))
                last[key] = w
        checks += 1
        time.sleep(0.1)
    pages = bench.pages(start_wall)
    print(f"\nquiet soak: {seconds:.0f} s, {'a CPU hog on n1' if hog else 'no load'}, "
          f"{checks} checks of the {len(NODES)} views")
    print(f"states other than up (or a view missing): {len(seen)}")
    for at, w in seen[:40]:
        print(f"  +{at:.1f} s {w}")
    print(f"pages at the webhook: {len(pages)}")
    for at, labels in pages[:20]:
        print(f"  {json.dumps(labels, sort_keys=True)}")
    return not seen and not pages


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", required=True)
    ap.add_argument("--faults", type=int, default=20)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--verdict_limit_s", type=float, default=10)
    ap.add_argument("--recover_limit_s", type=float, default=60)
    ap.add_argument("--types", default=",".join(DEFAULT_TYPES),
                    help="fault types to draw from, comma-separated")
    ap.add_argument("--soak_s", type=float, default=0)
    ap.add_argument("--hog", action="store_true")
    ap.add_argument("--workers", type=int, choices=(2, 3, 4), default=2,
                    help="3: worker:2 on n5, the monitor on n6, and the nodes see this machine's "
                    "/sys (a sidecar sees its tasks' cgroups); implied by --types straggler; 4: worker:3 on "
                    "n5 too, implied by --types starved_node")
    ap.add_argument("--check", action="store_true", help="exit 1 when a goal is missed")
    ap.add_argument("--check_truth", action="store_true",
                    help="with --check: also when a fault is not exactly one incident of its "
                    "cause, an incident has no fault, or the ledger's goodput is more than a "
                    "point from the step counters'")
    ap.add_argument("--keep_logs", action="store_true",
                    help="keep every process's log and evidence.jsonl (the views behind wrong, "
                    "flapping, lost or late verdicts) when a goal was missed or a verdict was late")
    args = ap.parse_args()
    if "straggler" in args.types.split(","):
        args.workers = max(args.workers, 3)
    if "starved_node" in args.types.split(","):
        args.workers = 4
    use_workers(args.workers)
    netns.skip_unless_supported("the chaos bench")
    netns.limit_time(int(300 + (args.soak_s or 40 * args.faults)))
    log_dir = tempfile.mkdtemp(prefix="chaos-")
    ok = False
    with netns.Cluster(MONITOR, log_dir=log_dir, log=lambda m: None,
                       host_sys=args.workers >= 3) as c:
        ckpt = os.path.join(log_dir, "checkpoints")
        t = training.TrainingCluster(
            c, args.bin, training.Layout(LAYOUT), sidecar_nodes=NODES,
            # Every sidecar keeps its incidents and ledger, as the package does: one killed and
            # started again keeps what it had.
            sidecar_args=["--alertmanager_url", f"http://{c.address(MONITOR)}:{AM_PORT}",
                          "--state_dir", os.path.join(log_dir, "state-{node}")],
            task_args=["--checkpoint_dir", ckpt, "--checkpoint_every_s", "2"])
        bench = Bench(c, t, args)
        bench.start_monitoring()
        t.start()
        t.wait_training(90)
        bench.watch.start()
        d.wait("every view all up", lambda: bench.all_up(bench.watch.latest()), 90)
        time.sleep(3)
        if args.soak_s:
            ok = soak(c, t, bench, args.soak_s, args.hog)
        else:
            count = StepCount()
            bench.watch.on_view = count.on_view
            before = ledger_times(bench)
            count.start()
            bench.marks = []
            bench.run(args.faults)
            count.stop()
            after = ledger_times(bench)
            apart = episodes_apart(count, bench.marks, (count.end, after, []))
            ok = bench.report()
            lines, found_ok = compare_incidents(bench, bench.done)
            more, goodput_ok = compare_goodput(count, before, after)
            print("\n".join(lines + more + apart))
            with open(os.path.join(log_dir, "steps.json"), "w") as out:
                json.dump({"rises": count.rises, "first": count.first, "end": count.end,
                           "marks": [(t, led, list(map(str, fs))) for t, led, fs in bench.marks],
                           "after": after}, out)
            # With --keep_logs, what every sidecar held (incidents-nN.json) and the step
            # counters' rises with the ledgers before each episode (steps.json) are kept to read.
            bench.late_evidence |= not (found_ok and goodput_ok)
            if args.check_truth:
                ok &= found_ok and goodput_ok
        bench.watch.stop()
    netns.limit_time(0)
    kept = args.keep_logs and (not ok or (not args.soak_s and bench.late_evidence))
    if not kept:
        import shutil
        shutil.rmtree(log_dir, ignore_errors=True)
    else:
        print(f"logs: {log_dir}")
    if args.check and not ok:
        print("FAILED: a goal was missed (above)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
