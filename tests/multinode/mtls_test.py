#!/usr/bin/python3
"""Mutual TLS on a real multi-node network: what the loopback TLS tests cannot show.

Three nodes (ps:0 on n1, worker:0 on n2, worker:1 on n3), every task, sidecar and read under
mutual TLS with certificates made now by `openssl` (trainscope_testing.certs in tests/py: one CA,
one certificate per node naming its address):

  1. training runs across nodes; every sidecar's view shows every task up, the other nodes'
     learned from their sidecars (the exchange works over mTLS); a plain HTTP read and an
     HTTPS read without a client certificate get nothing.
  2. n1 and n2 cut apart (the switch drops their packets): every view names the partition
     worker:0 -> ps:0, as in plain text (network_truth_test.py); healed, worker:0 trains again.
  3. worker:1 started again with a certificate from another CA: its own sidecar's view says
     "TLS handshake failed: certificate signed by an unknown authority" (it cannot verify the
     task), the worker's log says the ps refused its certificate, the ps's and the sidecar's logs
     say they refused a TLS client. Started again with its node's certificate: up again.
  4. (no cluster key here: mutual TLS alone authenticates the exchange) from n3, a process
     with n3's own certificate speaking as n1's sidecar, and one with a certificate of the same
     CA naming a host that runs no member sidecar (a task's, say), send forged SILENT updates
     and dead-worker records (trainscope_testing.forge): every one refused, the refusals say
     whose certificate names what, and every view still shows every task up.

Usage: mtls_test.py --bin build/bin [--keep_logs]. Exit 0 passed, 1 failed, 77 skipped (no
root, no network namespaces or no openssl; one line says why).
"""

import argparse
import os
import shutil
import ssl
import subprocess
import sys
import time

sys.dont_write_bytecode = True

from trainscope_testing import diagnosis as d
from trainscope_testing import netns, skips, training
from trainscope_testing.logs import logger

log = logger("mtls")

DEADLINE_S = 170
NODES = (1, 2, 3)
HANDSHAKE = "TLS handshake failed"
WRONG_CA = HANDSHAKE + ": certificate signed by an unknown authority"


def every(t, predicate):
    return d.in_every_view(t, NODES, predicate)


def all_up_and_exchanged(t, n, v):
    """Every task up in node n's view; the other nodes' tasks learned from their sidecars."""
    own = {task for task, node in t.task_node.items() if node == f"n{n}"}
    names = {x["name"] for x in v["tasks"]}
    return names == set(t.task_node) and all(
        x["state"] == "up" and (x["name"] in own or x.get("source")) for x in v["tasks"])


def refused(c, url, context):
    """True when a GET with this context (None: plain HTTP) gets no answer from the sidecar."""
    try:
        c.http_get(1, url, 3.0, context)
    except (OSError, ssl.SSLError):
        return True
    return False


def cluster_over_mtls(c, t):
    s = d.wait("every sidecar shows every task up, the others' through the exchange",
               lambda: every(t, lambda n, v: all_up_and_exchanged(t, n, v)), 40)
    log(f"ok: every view shows all {len(t.task_node)} tasks up after {s:.1f} s")
    log("    n2's view: " + "; ".join(
        f"{x['name']} {x['state']} via {x.get('source') or 'first-hand'}"
        for x in t.view(2)["tasks"]))
    plain = t.sidecar_url(1, "/api/v1/tasks").replace("https://", "http://")
    assert refused(c, plain, None), f"plain HTTP {plain} was answered"
    no_cert = ssl.create_default_context(cafile=t.tls.path("ca", "crt"))
    assert refused(c, t.sidecar_url(1, "/api/v1/tasks"), no_cert), \
        "HTTPS without a client certificate was answered"
    log("ok: plain HTTP and HTTPS without a client certificate get nothing")


def partition(c, t):
    """A real cut, named in every view and by trainscopectl on n3 (over HTTPS here)."""
    d.partition_drill(c, t, NODES, log, named_s=30, healed_s=40)


def log_line(proc, needle):
    with open(proc.log_path, errors="replace") as f:
        return next((line.strip() for line in f if needle in line), None)


def refused_task(view, name):
    """Not up, and the reason names the handshake that failed and why. (The sidecar calls it
    dead: the process it knew is gone, and it cannot learn the new one's pid without a poll
    that passes.)"""
    x = d.task(view, name) or {}
    return x.get("state") not in (None, "up") and WRONG_CA in x.get("reason", "")


def wrong_ca(c, t):
    rogue = "rogue-n3"
    t.tls.node(rogue, c.address(3), ca="other_ca")
    t.kill("worker:1")
    worker = t.start_task("worker:1", t.tls.flags(rogue, ca="ca"))
    s = d.wait(f"n3's sidecar: worker:1 not up, {WRONG_CA!r} in its reason",
               lambda: refused_task(t.view(3), "worker:1"), 40)
    x = d.task(t.view(3), "worker:1")
    log(f"ok: n3's sidecar after {s:.1f} s: worker:1 {x['state']}: {x['reason'][:240]}")
    x = d.task(t.view(1), "worker:1")
    log(f"    n1's sidecar: worker:1 {x['state']}: {x['reason'][:240]}")
    refusal = "refused this task's certificate"
    d.wait("worker:1's log: the ps refused its certificate",
           lambda: log_line(worker, refusal), 30)
    log(f"    worker:1 log: {log_line(worker, refusal)[:240]}")
    d.wait("ps:0's log: it refused a TLS client",
           lambda: log_line(t.tasks["ps:0"], "refused a TLS client"), 20)
    log(f"    ps:0 log: {log_line(t.tasks['ps:0'], 'refused a TLS client')[:240]}")
    d.wait("n3's sidecar's log: it refused a TLS client (the worker's spans)",
           lambda: log_line(t.sidecars["n3"], "refused a TLS client"), 20)
    log(f"    n3's sidecar log: {log_line(t.sidecars['n3'], 'refused a TLS client')[:240]}")
    t.kill("worker:1")
    t.start_task("worker:1")
    d.wait("worker:1 with its node's certificate: up in every view",
           lambda: every(t, lambda n, v: d.state_is(v, "worker:1", "up")), 60)
    log("ok: worker:1 up again with its node's certificate")


def forge_as_n1(c, t, cert_name):
    """Forgeries to n2's sidecar, as n1's, over mutual TLS with `cert_name`'s certificate, sent
    from inside n3; the answers."""
    to = f"{c.address(2)}:{t.grpc_ports[c.node(2)]}"
    as_n1 = f"{c.address(1)}:{t.grpc_ports[c.node(1)]}"
    tls = [t.tls.path(cert_name, "crt"), t.tls.path(cert_name, "key"), t.tls.path("ca", "crt")]
    argv = c.exec_argv(3, [sys.executable, "-m", "trainscope_testing.forge", "--to", to, "--as",
                           as_n1, "--cluster", t.name, "--count", "3", "--kind", "silent",
                           "--tasks", "ps:0", "--tls", *tls])
    env = dict(os.environ, PYTHONPATH=os.path.join(os.path.dirname(__file__), "..", "py"))
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 0, f"the forger failed: {out.stderr[-2000:]}"
    return out.stdout.splitlines()


def forged_certificates(c, t):
    t.tls.node("task-host", "10.213.255.250")  # Same CA; a host with no member sidecar.
    for cert in ("n3", "task-host"):
        answers = forge_as_n1(c, t, cert)
        assert answers and all("FAILED_PRECONDITION" in a and "certificate names" in a
                               for a in answers), f"with {cert}'s certificate: {answers}"
        log(f"ok: as n1's sidecar with {cert}'s certificate: refused: {answers[0][:220]}")
    time.sleep(2)
    assert every(t, lambda n, v: all_up_and_exchanged(t, n, v)), "a view changed"
    log("ok: every view still shows every task up")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", required=True)
    ap.add_argument("--keep_logs", action="store_true")
    args = ap.parse_args()
    if shutil.which("openssl") is None:
        skips.skip("the mutual TLS multi-node test", "no openssl command (apt-get install openssl)")

    def body(logs):
        with netns.Cluster(3, log_dir=logs) as c:
            t = training.TrainingCluster(c, args.bin, training.Layout.default(3), tls=True)
            t.exchange_key = False  # Mutual TLS alone authenticates the exchange here.
            t.start()
            t.wait_training(60, log=log)
            for scenario in (cluster_over_mtls, partition, wrong_ca, forged_certificates):
                log(f"--- {scenario.__name__}")
                scenario(c, t)
    return netns.run_test("the mutual TLS multi-node test", "multinode-mtls-", DEADLINE_S, body,
                          args.keep_logs, log)


if __name__ == "__main__":
    sys.exit(main())
