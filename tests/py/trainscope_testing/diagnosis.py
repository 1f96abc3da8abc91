#!/usr/bin/python3
"""What the sidecars must say about each network fault, as predicates over their views.

Shared by network_truth_test.py (which asserts them) and network_bench.py (which times them).
A view is a sidecar's /api/v1/tasks, asked from inside its own node. Standard library only.
"""

import time

HELD_UP = ("blocked", "stalled", "slow", "up")
NEVER_FOR_A_LIVE_TASK = ("dead", "hung")


def task(view, name):
    for t in view.get("tasks", []):
        if t.get("name") == name:
            return t
    return None


def node(view, hostname):
    for n in view.get("nodes", []):
        if n.get("hostname") == hostname:
            return n
    return None


def views(t, nodes):
    """{node: view}; a sidecar that does not answer is left out."""
    out = {}
    for n in nodes:
        try:
            out[n] = t.view(n, timeout=1.5)
        except (OSError, ValueError):
            pass
    return out


def partition_named(view, a, b):
    """The view names the partition: a cannot reach b, both alive; a's reason starts with it;
    neither is called dead or hung."""
    if not any(p.get("a") == a and p.get("b") == b for p in view.get("partitions", [])):
        return False
    ta, tb = task(view, a), task(view, b)
    return (ta is not None and tb is not None and ta["state"] in HELD_UP
            and "partition: cannot reach " + b in ta["reason"]
            and ta["state"] not in NEVER_FOR_A_LIVE_TASK
            and tb["state"] not in NEVER_FOR_A_LIVE_TASK
            and "partitioned from " + a in tb["reason"])


def no_partition(view):
    return not view.get("partitions")


def isolated_seen_from_outside(view, hostname, tasks):
    """The node is one incident: silent, and each of its tasks unreachable because of it."""
    n = node(view, hostname)
    if n is None or n.get("status") != "silent":
        return False
    return all((task(view, t) or {}).get("state") == "unreachable"
               and "is cut off from every other node" in task(view, t)["reason"] for t in tasks)


def isolated_seen_from_inside(view):
    return view.get("isolated") is True and any(
        n.get("status") == "isolated" for n in view.get("nodes", []))


def state_is(view, name, *states):
    t = task(view, name)
    return t is not None and t["state"] in states


def edges_learned(view, worker, count, ps=None):
    """The view has `count` edges of `worker` (or its one edge to `ps`, count 1), each with a usual
    latency: learned 10 s after the worker starts training (EdgeWatch), never from a slow stretch.
    A slow link is named against it."""
    peers = [p for p in (task(view, worker) or {}).get("peers", [])
             if ps is None or p.get("peer") == ps]
    return len(peers) == count and all(p.get("usual_latency_seconds", 0) > 0 for p in peers)


def straggler_by_quota(view, worker):
    """The view calls `worker` slow, a straggler held back by its own CPU quota."""
    w = task(view, worker) or {}
    reason = w.get("reason", "")
    return w.get("state") == "slow" and "straggler: " in reason and \
        "held back by its own CPU quota" in reason


def node_starved(view, worker, node):
    """The view calls `worker` slow, its reason naming `node` ("n5") a throttled or starved node
    first (not a straggler)."""
    w = task(view, worker) or {}
    reason = w.get("reason", "")
    return w.get("state") == "slow" and reason.startswith(f"throttled or starved node {node}")


def ps_blamed(view, ps, workers):
    """The ps is slow by its own figures; each worker names it as where its step went."""
    p = task(view, ps)
    if p is None or p["state"] != "slow" or "on the ps itself" not in p["reason"]:
        return False
    return all(("in calls to " + ps) in (task(view, w) or {}).get("reason", "") for w in workers)


def in_every_view(t, nodes, predicate):
    """predicate(node, view) holds in the view of each of `nodes`, every one of them answering."""
    vs = views(t, nodes)
    return len(vs) == len(nodes) and all(predicate(n, v) for n, v in vs.items())


def partition_drill(c, t, nodes, log, named_s, healed_s, check=None):
    """Cuts n1 (worker:0) from n2 (ps:0) for real: every view must name the partition
    worker:0 -> ps:0, and so must `check()` (more assertions, optional) and trainscopectl on
    n3; then heals, and every view must drop it, worker:0 up again."""
    c.cut(1, 2, how="drop")
    s = wait("every view names the partition worker:0 -> ps:0",
             lambda: in_every_view(t, nodes, lambda n, v: partition_named(v, "worker:0", "ps:0")),
             named_s)
    log(f"ok: partition named in every view after {s:.1f} s")
    w = task(t.view(3), "worker:0")
    log(f"    n3 says worker:0 {w['state']}: {w['reason'][:200]}")
    if check:
        check()
    ctl = t.ctl_status(3).stdout
    assert "PARTITION worker:0" in ctl, f"trainscopectl on n3 names it:\n{ctl}"
    log("ok: trainscopectl status on n3 names it")
    c.heal(1, 2)
    wait("healed: no partition in any view, worker:0 up",
         lambda: in_every_view(t, nodes, lambda n, v: no_partition(v))
         and state_is(t.view(2), "worker:0", "up"), healed_s)
    log("ok: healed")


def wait(what, predicate, timeout, interval=0.05):
    """Seconds until predicate() is true; raises AssertionError naming `what` on timeout."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        try:
            if predicate():
                return time.monotonic() - start
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(interval)
    raise AssertionError(f"not within {timeout:.0f} s: {what}")
