#!/usr/bin/python3
"""Lies from the network, on real namespace nodes: a process on a node of the same network,
without the cluster key, tells every sidecar that the others are silent, suspect or gone, that
their workers are dead, that strangers are members, and asks them to probe arbitrary targets.

Three nodes train (ps:0 on n1, worker:0 on n2, worker:1 on n3), each sidecar with the cluster
key (the harness's default, as the package asks) and posting first-hand alerts to a real
Alertmanager on n4, whose webhook records every page. From n4 (trainscope_testing.forge):

  1. for each sidecar, 10 rounds of every forgery, "as" each of the other two nodes: every one
     refused as unsigned, and after 5 s every view still shows every task up and every member
     alive, no page was sent, and each sidecar counted its refusals
     (trainscope_sidecar_exchange_refused_total{reason="unsigned"}) and logged them once a
     minute per address; its open file descriptors and RSS stayed within bounds.
  2. spans from n4 (an OTLP Export of a 30 s ps request) to each sidecar's gRPC port: refused
     (PERMISSION_DENIED), counted (trainscope_sidecar_api_refused_total{reason="otlp_not_local"}),
     and nowhere in /api/v1/traces/slow or /errors; the nodes' own tasks' spans still arrive.
  3. a real fault still pages: worker:1 killed, paged once (the silence above means something).

Usage: forgery_test.py --bin build/bin [--src .] [--keep_logs]. Exit 0 passed, 1 failed, 77
skipped (no root or no network namespaces; one line says why).
"""

import argparse
import os
import subprocess
import sys
import time

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))

from trainscope_testing import diagnosis as d
from trainscope_testing import monitoring, netns, training
from trainscope_testing.logs import logger
from trainscope_testing.waiting import wait_for

log = logger("forgery")

DEADLINE_S = 200
NODES = (1, 2, 3)
ATTACKER = 4
AM_PORT, HOOK_PORT = "9093", "9099"
ROUNDS = 10


def every(t, predicate):
    return d.in_every_view(t, NODES, predicate)


def all_up(t, n, v):
    names = {x["name"] for x in v["tasks"]}
    return names == set(t.task_node) and all(x["state"] == "up" for x in v["tasks"])


def metric(t, node, series):
    status, body = t.http_get(node, t.sidecar_url(node, "/metrics"))
    for line in body.decode(errors="replace").splitlines():
        if line.startswith(series + " "):
            return float(line.split()[-1])
    return None


def sidecar_pid_stats(t, node):
    """(open fds, RSS KiB) of node's sidecar."""
    pid = t.sidecars[t.c.node(node)].pid
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    with open(f"/proc/{pid}/status") as f:
        rss = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
    return fds, rss


def forge(c, t, to_node, as_node, kind="all"):
    """Runs forgeries of `kind` ROUNDS times from the attacker's node; returns its output lines."""
    grpc_to = f"{c.address(to_node)}:{t.grpc_ports[c.node(to_node)]}"
    grpc_as = f"{c.address(as_node)}:{t.grpc_ports[c.node(as_node)]}"
    tasks = ",".join(x for x, n in t.task_node.items() if n == c.node(as_node))
    argv = c.exec_argv(ATTACKER, [sys.executable, "-m", "trainscope_testing.forge",
                                  "--to", grpc_to, "--as", grpc_as, "--cluster", t.name,
                                  "--count", str(ROUNDS), "--tasks", tasks, "--kind", kind])
    env = dict(os.environ, PYTHONPATH=os.path.join(HERE, "..", "py"))
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 0, f"the forger failed: {out.stderr[-2000:]}"
    return out.stdout.splitlines()


def pages(hook_file, since):
    return [a for at, p in monitoring.webhook_records(hook_file, since)
            for a in p.get("alerts", []) if a.get("status") == "firing"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", required=True)
    ap.add_argument("--src", default=os.path.abspath(os.path.join(HERE, "..", "..")))
    ap.add_argument("--keep_logs", action="store_true")
    args = ap.parse_args()

    def body(logs):
        with netns.Cluster(4, log_dir=logs) as c:
            mon = os.path.join(logs, "monitoring")
            os.makedirs(mon)
            hook_file = os.path.join(mon, "webhook.jsonl")
            cfg = os.path.join(mon, "alertmanager.yml")
            monitoring.render_alertmanager(args.src, cfg,
                                           f"http://{c.address(ATTACKER)}:{HOOK_PORT}/alerts")
            c.spawn(ATTACKER, [sys.executable, os.path.join(HERE, "..", "drill",
                                                            "webhook_receiver.py"),
                               "--address", c.address(ATTACKER), "--port", HOOK_PORT,
                               "--out", hook_file], name="webhook")
            am = monitoring.tool("prometheus-alertmanager", "prometheus-alertmanager")
            c.spawn(ATTACKER, monitoring.argv_alertmanager(
                am, cfg, os.path.join(mon, "am-data"), AM_PORT, address=c.address(ATTACKER)),
                name="alertmanager")
            am_url = f"http://{c.address(ATTACKER)}:{AM_PORT}"
            wait_for("Alertmanager ready", lambda: c.http_get(
                ATTACKER, f"{am_url}/-/ready")[0] == 200, 30)
            t = training.TrainingCluster(c, args.bin, training.Layout.default(3),
                                         sidecar_nodes=list(NODES),
                                         sidecar_args=["--alertmanager_url", am_url])
            t.start()
            t.wait_training(60, log=log)
            d.wait("every view: every task up", lambda: every(t, lambda n, v: all_up(t, n, v)),
                   40)
            before = {n: sidecar_pid_stats(t, n) for n in NODES}

            log(f"--- from n{ATTACKER}, without the key: {ROUNDS} rounds of every forgery to "
                "each sidecar, as each other node")
            t0 = time.time()
            answers = []
            for to in NODES:
                for as_node in NODES:
                    if as_node != to:
                        answers += forge(c, t, to, as_node)
            taken = [a for a in answers if "-> OK" in a]
            assert not taken, f"forged messages taken: {taken[:5]}"
            unsigned = [a for a in answers if "unsigned" in a]
            assert len(unsigned) == len(answers), \
                f"not all refused as unsigned: {[a for a in answers if 'unsigned' not in a][:5]}"
            assert not any(t.name in a for a in answers), "a refusal tells the cluster's name"
            log(f"ok: {len(answers)} forged messages, every one refused; e.g. {answers[0]}")
            time.sleep(5)
            assert every(t, lambda n, v: all_up(t, n, v)), \
                "a view changed: " + "; ".join(
                    f"n{n}: " + ", ".join(f"{x['name']} {x['state']}" for x in t.view(n)["tasks"])
                    for n in NODES)
            for n in NODES:
                silent = metric(t, n, 'trainscope_sidecar_members{status="silent"}')
                alive = metric(t, n, 'trainscope_sidecar_members{status="alive"}')
                refused = metric(t, n, 'trainscope_sidecar_exchange_refused_total'
                                       '{reason="unsigned"}')
                assert (alive, silent) == (2, 0), f"n{n}'s members: {alive} alive, {silent} silent"
                assert refused >= 2 * ROUNDS * 8, f"n{n} counted {refused} unsigned refusals"
                fds, rss = sidecar_pid_stats(t, n)
                fds0, rss0 = before[n]
                assert fds <= fds0 + 8, f"n{n}'s sidecar: {fds0} -> {fds} open files"
                assert rss <= rss0 + 16 * 1024, f"n{n}'s sidecar: RSS {rss0} -> {rss} KiB"
                with open(t.sidecars[c.node(n)].log_path, errors="replace") as f:
                    lines = [x.strip() for x in f if "refused an exchange message" in x]
                assert 0 < len(lines) <= 4, f"n{n} logged {len(lines)} refusal lines"
                log(f"ok: n{n}: every task up, members 2 alive 0 silent, {refused:.0f} refused "
                    f"unsigned, fds {fds0}->{fds}, RSS {rss0}->{rss} KiB; log: {lines[0][:200]}")
            got = pages(hook_file, t0)
            assert not got, f"pages sent: {[p['labels'] for p in got]}"
            log("ok: no page")

            log(f"--- from n{ATTACKER}: {ROUNDS} OTLP Exports of a forged 30 s ps request to "
                "each sidecar")
            for n in NODES:
                received = metric(t, n, "trainscope_sidecar_traces_spans_received_total")
                answers = forge(c, t, n, n, kind="spans")
                refused = [a for a in answers if a.startswith("spans -> PERMISSION_DENIED")]
                assert len(refused) == ROUNDS == len(answers), f"n{n}: {answers[:3]}"
                counted = metric(t, n, 'trainscope_sidecar_api_refused_total'
                                       '{reason="otlp_not_local"}')
                assert counted == ROUNDS, f"n{n} counted {counted} OTLP refusals"
                for path in ("/api/v1/traces/slow", "/api/v1/traces/errors"):
                    status, body = t.http_get(n, t.sidecar_url(n, path))
                    assert status == 200 and b"forged-slow-request" not in body, \
                        f"n{n}'s {path} shows the forged span (HTTP {status})"
                wait_for(f"n{n}: its own tasks' spans still arrive", lambda: metric(
                    t, n, "trainscope_sidecar_traces_spans_received_total") > received, 20)
                log(f"ok: n{n}: {len(refused)} refused, counted {counted:.0f}; e.g. {answers[0]}")

            log("--- a real fault still pages: kill -9 worker:1")
            t1 = time.time()
            t.kill("worker:1")
            wait_for("worker:1 paged", lambda: [p for p in pages(hook_file, t1)
                                                if p["labels"].get("task") == "1"], 30)
            log(f"ok: worker:1's death paged after {time.time() - t1:.1f} s")
    return netns.run_test("the forgery test", "multinode-forgery-", DEADLINE_S, body,
                          args.keep_logs, log, errors=(monitoring.RenderError,))


if __name__ == "__main__":
    sys.exit(main())
