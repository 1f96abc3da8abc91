"""Mutual TLS on every gRPC listener and client, end to end (docs/security.md).

Real binaries on loopback; certificates made here with `openssl` in a temporary directory (none
is committed): a CA, a second CA, and certificates with SAN IP:127.0.0.1 signed by each.

  cluster   ps + worker + two sidecars all on mTLS: the worker trains to done, each sidecar
            watches one task and learns of the other's through the exchange (up, then done),
            spans reach a sidecar's OTLP receiver; a plain-text client is refused,
            trainscopectl with the flags is not.
  wrong_ca  a ps whose certificate another CA signed: the worker and the sidecar say "TLS
            handshake failed: certificate signed by an unknown authority" (the worker's blocked
            reason and log, the ps's missing reason), the ps logs one line naming the client that
            hung up; a worker with such a certificate: the ps logs one line saying why, however
            often the worker retries, and the worker says its certificate was refused.
  wrong_name  a ps whose certificate names another host: the worker says "certificate does
            not name 127.0.0.1".
  identity  a worker whose certificate (from the right CA) names another host: the ps refuses
            its CreateVariable with PERMISSION_DENIED naming both, and counts it.
  rotation  a task's certificate and key files replaced while it runs: the new serial is served
            within seconds, without a restart.

Usage: tls_test.py --bin BUILD/bin [--only NAME] [--keep]. Exit 0 when all pass. Standard
library only; the helpers are trainscope_testing's (tests/py): run by hand as
`scripts/python tests/tls/tls_test.py --bin build/bin`.
"""

import argparse
import functools
import json
import os
import re
import shutil
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.dont_write_bytecode = True

from trainscope_testing import skips, waiting
from trainscope_testing.certs import LoopbackCerts as Certs, openssl
from trainscope_testing.cluster_spec import tf_config
from trainscope_testing.logs import logger
from trainscope_testing.ports import free_port
from trainscope_testing.processes import Proc
from trainscope_testing.waiting import HarnessError as DrillError

CLUSTER = "tls"
log = logger("drill")
wait_for = functools.partial(waiting.wait_for, interval=0.1)  # polls every 0.1 s, as the drill


def serial_of_pem(path):
    return openssl("x509", "-in", path, "-noout", "-serial").strip().split("=")[1]


def served_serial(address, certs):
    """The serial of the certificate the TLS server at address presents (as our client)."""
    out = subprocess.run(
        ["openssl", "s_client", "-connect", address, "-cert", certs.path("client", "crt"),
         "-key", certs.path("client", "key"), "-CAfile", certs.path("ca", "crt")],
        capture_output=True, text=True, input="", timeout=15).stdout
    pem = re.search(r"-----BEGIN CERTIFICATE-----.*?-----END CERTIFICATE-----", out, re.S)
    if not pem:
        return None
    return openssl("x509", "-noout", "-serial", stdin=pem.group(0)).strip().split("=")[1]


class Cluster:
    """ps:0 and worker:0 on loopback, and one sidecar watching both, each with its TLS flags."""

    def __init__(self, bin_dir, work, certs):
        self.bin, self.work, self.certs = bin_dir, work, certs
        self.logdir = os.path.join(work, "logs")
        os.makedirs(self.logdir, exist_ok=True)
        self.addr = {"ps:0": f"127.0.0.1:{free_port()}", "worker:0": f"127.0.0.1:{free_port()}"}
        self.spec = {"cluster": {"ps": [self.addr["ps:0"]], "worker": [self.addr["worker:0"]]}}
        self.spec_path = os.path.join(work, "spec.json")
        with open(self.spec_path, "w") as f:
            json.dump(self.spec, f)
        self.grpc_port = free_port()
        self.procs = {}

    def start_task(self, name, tls, extra=()):
        role, index = name.split(":")
        argv = [os.path.join(self.bin, "linear_regression"), "--cluster_name", CLUSTER,
                "--metrics_port", "0", "--session_log_interval_s", "1", *tls, *extra]
        env = {"TF_CONFIG": tf_config(self.spec, role, index),
               "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{self.grpc_port}",
               "OTEL_BSP_SCHEDULE_DELAY": "100"}
        self.procs[name] = Proc(name, argv, self.logdir, env).start()
        return self.procs[name]

    def start_sidecar(self, tls, name="sidecar", local="ps:0,worker:0", grpc_port=None,
                      peers="none"):
        """A sidecar watching `local`, its gRPC port (OTLP receive, exchange) at grpc_port
        (the tasks' OTLP endpoint by default); returns its HTTP host:port. The first one
        started is the one views() asks."""
        http = f"127.0.0.1:{free_port()}"
        grpc_port = grpc_port or self.grpc_port
        argv = [os.path.join(self.bin, "trainscope-sidecar"), "--cluster_spec", self.spec_path,
                "--cluster_name", CLUSTER, "--local_tasks", local, "--http_address",
                "127.0.0.1", "--http_port", http.split(":")[1], "--grpc_port", str(grpc_port),
                "--advertise_address", f"127.0.0.1:{grpc_port}", "--peer_sidecars", peers,
                "--gossip_interval_ms", "200", *tls]
        self.procs[name] = Proc(name, argv, self.logdir).start()
        wait_for(f"{name}'s /healthz",
                 lambda: https_get(f"https://{http}/healthz", self.certs)[0] == 200, 20)
        if not hasattr(self, "http"):
            self.http = http
        return http

    def views(self, http=None):
        body = json.loads(https_get(f"https://{http or self.http}/api/v1/tasks", self.certs)[1])
        tasks = body["tasks"] if isinstance(body, dict) else body
        return {f"{t['role']}:{t['task']}": t for t in tasks}

    def wait_view(self, name, predicate, what, timeout=30):
        seen = {}

        def check():
            seen.update(self.views().get(name, {}))
            return predicate(seen)
        try:
            wait_for(f"{name} {what}", check, timeout, interval=0.2)
        except DrillError:
            raise DrillError(f"{name} never {what}; last view: {seen}")
        return dict(seen)

    def log_of(self, name):
        with open(self.procs[name].log_path, errors="replace") as f:
            return f.read()

    def stop(self):
        for p in self.procs.values():
            p.stop()


def client_context(certs):
    """HTTPS as the harness's client: the CA, and the client certificate the sidecars' and
    tasks' HTTP listeners require under mutual TLS."""
    ctx = ssl.create_default_context(cafile=certs.path("ca", "crt"))
    ctx.load_cert_chain(certs.path("client", "crt"), certs.path("client", "key"))
    return ctx


def https_get(url, certs, timeout=2.0):
    with urllib.request.urlopen(url, timeout=timeout, context=client_context(certs)) as r:
        return r.status, r.read()


def metric(text, name):
    m = re.search(rf"^{re.escape(name)}(?:{{[^}}]*}})? (\S+)$", text, re.M)
    return float(m.group(1)) if m else None


def test_cluster(args, certs, work):
    c = Cluster(args.bin, work, certs)
    try:
        # Two sidecars, each watching one task, exchanging what they see: each learns of the
        # other's task only through the exchange.
        other_grpc = free_port()
        c.start_sidecar(certs.flags("node"), local="ps:0",
                        peers=f"127.0.0.1:{other_grpc}")
        other = c.start_sidecar(certs.flags("node"), name="sidecar-2", local="worker:0",
                                grpc_port=other_grpc, peers=f"127.0.0.1:{c.grpc_port}")
        c.start_task("ps:0", certs.flags("node"), ["--enable_fault_injection"])
        c.start_task("worker:0", certs.flags("node"), ["--steps", "400", "--step_delay_ms", "10"])
        c.wait_view("worker:0", lambda v: v.get("state") == "up", "up over mTLS (by exchange)")
        c.wait_view("ps:0", lambda v: v.get("state") == "up", "up over mTLS")
        wait_for("ps:0 up at the other sidecar (by exchange)",
                 lambda: c.views(other).get("ps:0", {}).get("state") == "up", 20, interval=0.2)

        def spans():
            return metric(https_get(f"https://{c.http}/metrics", certs)[1].decode(),
                          "trainscope_sidecar_traces_spans_received_total") or 0
        wait_for("spans at the sidecar over mTLS", lambda: spans() > 0, 30, interval=0.5)
        log(f"  sidecar received {spans():.0f} spans over mTLS")
        # Plain text is refused; trainscopectl with the same flags gets through.
        ctl = [os.path.join(args.bin, "trainscopectl"), "fault", "--task", c.addr["ps:0"],
               "--parameter_delay_ms", "0"]
        plain = subprocess.run(ctl, capture_output=True, text=True, timeout=30)
        if plain.returncode == 0:
            raise DrillError("a plain-text client reached a mTLS ps")
        tls = subprocess.run(ctl + certs.flags("client"), capture_output=True, text=True,
                             timeout=30)
        if tls.returncode != 0:
            raise DrillError(f"trainscopectl with --tls_*: {tls.stdout}{tls.stderr}")
        c.wait_view("worker:0", lambda v: v.get("state") == "done", "done", 90)
        c.wait_view("ps:0", lambda v: v.get("state") == "done", "done", 30)
        if c.procs["worker:0"].popen.wait(10) != 0:
            raise DrillError("worker:0 exited with an error:\n" + c.procs["worker:0"].tail())
    finally:
        c.stop()


def first_line(log_text, needle):
    return next(line for line in log_text.splitlines() if needle in line)


def check_one_line(log_text, needle, who):
    lines = [line for line in log_text.splitlines() if needle in line]
    if len(lines) != 1:
        raise DrillError(f"{who}: expected one line with {needle!r}, found {len(lines)}:\n"
                         + "\n".join(lines[:5]))
    return lines[0]


def test_wrong_ca(args, certs, work):
    # A ps with a certificate from another CA: nobody reaches it, and everybody says why.
    c = Cluster(args.bin, work, certs)
    try:
        c.start_sidecar(certs.flags("node"))
        c.start_task("ps:0", certs.flags("rogue"))
        c.start_task("worker:0", certs.flags("node"))
        want = "TLS handshake failed: certificate signed by an unknown authority"
        v = c.wait_view("worker:0", lambda v: v.get("state") == "blocked" and
                        want in v.get("reason", ""), "blocked naming the TLS failure", 40)
        log(f"  worker:0 {v['state']}: {v['reason']}")
        v = c.wait_view("ps:0", lambda v: want in v.get("reason", ""),
                        "refused by the sidecar naming the TLS failure", 20)
        log(f"  ps:0 {v['state']}: {v['reason']}")
        waiting = f"CreateSession still waiting for /job:ps/replica:0/task:0 at {c.addr['ps:0']}"
        wait_for("worker:0's waiting line", lambda: waiting in c.log_of("worker:0"), 20)
        line = first_line(c.log_of("worker:0"), waiting)
        if want not in line:
            raise DrillError(f"worker:0's waiting line does not say {want!r}: {line}")
        log(f"  worker:0 log: {line.strip()[:240]}")
        time.sleep(3)  # several more attempts by the worker and the sidecar: still one line
        line = check_one_line(c.log_of("ps:0"), "refused a TLS client", "ps:0")
        if f"ps:0 at {c.addr['ps:0']} refused a TLS client at 127.0.0.1:" not in line or \
                "closed the connection during the handshake" not in line:
            raise DrillError(f"ps:0's refusal line: {line}")
        log(f"  ps:0 log: {line.strip()[:240]}")
    finally:
        c.stop()
    # A worker with a certificate from another CA: the ps refuses it and says so.
    c = Cluster(args.bin, work + "-2", certs)
    try:
        c.start_task("ps:0", certs.flags("node"))
        c.start_task("worker:0", certs.flags("rogue", ca="ca"))
        wait_for("worker:0's waiting line",
                 lambda: "refused this task's certificate" in c.log_of("worker:0"), 30)
        time.sleep(3)  # several more attempts: still one line at the ps
        line = check_one_line(c.log_of("ps:0"), "refused a TLS client", "ps:0")
        if f"ps:0 at {c.addr['ps:0']} refused a TLS client: certificate signed by an unknown " \
                "authority" not in line:
            raise DrillError(f"ps:0's refusal line: {line}")
        log(f"  ps:0 log: {line.strip()[:240]}")
        line = first_line(c.log_of("worker:0"), "refused this task's certificate")
        log(f"  worker:0 log: {line.strip()[:240]}")
    finally:
        c.stop()


def test_wrong_name(args, certs, work):
    # A ps whose certificate (from the right CA) names another host than the spec's.
    c = Cluster(args.bin, work, certs)
    try:
        c.start_task("ps:0", certs.flags("impostor"))
        c.start_task("worker:0", certs.flags("node"))
        want = "TLS handshake failed: certificate does not name 127.0.0.1"
        waiting = f"CreateSession still waiting for /job:ps/replica:0/task:0 at {c.addr['ps:0']}"
        wait_for("worker:0's waiting line", lambda: waiting in c.log_of("worker:0"), 20)
        line = first_line(c.log_of("worker:0"), waiting)
        if want not in line:
            raise DrillError(f"worker:0's waiting line does not say {want!r}: {line}")
        log(f"  worker:0 log: {line.strip()[:240]}")
    finally:
        c.stop()


def test_identity(args, certs, work):
    c = Cluster(args.bin, work, certs)
    try:
        ps = c.start_task("ps:0", certs.flags("node"))
        w = c.start_task("worker:0", certs.flags("impostor"), ["--steps", "50"])
        if w.popen.wait(60) == 0:
            raise DrillError("a worker whose certificate names another host trained")
        want = "refused CreateVariable from worker:0 at ipv4:127.0.0.1:"
        line = first_line(c.log_of("ps:0"), want)
        if "its certificate names" not in line or "not 127.0.0.1" not in line:
            raise DrillError(f"ps:0's identity refusal: {line}")
        log(f"  ps:0 log: {line.strip()[:240]}")
        if "PERMISSION_DENIED" not in c.log_of("worker:0") and \
                "refused CreateVariable" not in c.log_of("worker:0"):
            raise DrillError("worker:0 does not say why it stopped:\n" + w.tail())
        address = re.search(r"metrics on https://(\S+)/metrics", c.log_of("ps:0")).group(1)
        with urllib.request.urlopen(f"https://{address}/metrics", timeout=5,
                                    context=client_context(certs)) as r:
            refused = metric(r.read().decode(), "trainscope_tls_identity_refused_total")
        if not refused:
            raise DrillError(f"trainscope_tls_identity_refused_total is {refused}")
        ps.stop()
    finally:
        c.stop()


def check_alive(c, what):
    if not c.procs["ps:0"].alive():
        raise DrillError(f"ps:0 died on {what}: {c.log_of('ps:0')[-600:]}")


def test_rotation(args, certs, work):
    live = os.path.join(work, "live")
    os.makedirs(live, exist_ok=True)
    for ext in ("crt", "key"):
        shutil.copy(certs.path("node", ext), os.path.join(live, f"tls.{ext}"))
    c = Cluster(args.bin, work, certs)
    try:
        c.start_task("ps:0", ["--tls_cert_file", os.path.join(live, "tls.crt"), "--tls_key_file",
                              os.path.join(live, "tls.key"), "--tls_ca_file",
                              certs.path("ca", "crt")])
        before = serial_of_pem(certs.path("node", "crt"))
        wait_for("ps:0 serving TLS", lambda: served_serial(c.addr["ps:0"], certs) == before, 20)
        certs.leaf("node_next")
        after = serial_of_pem(certs.path("node_next", "crt"))
        # Written in place, as `openssl x509 -out` or `cp` does: for a moment the certificate
        # file is empty, then it holds a certificate the old key does not fit. gRPC 1.51 aborts
        # on an empty one if it reads it; the last good pair must go on being served instead.
        crt = os.path.join(live, "tls.crt")
        open(crt, "w").close()
        time.sleep(2.5)
        check_alive(c, "an empty certificate file")
        shutil.copyfile(certs.path("node_next", "crt"), crt)
        time.sleep(2.5)
        check_alive(c, "a certificate its key does not fit")
        if served_serial(c.addr["ps:0"], certs) != before:
            raise DrillError("ps:0 stopped serving its last good certificate")
        log(f"  a half-written rotation: ps:0 alive, serial {before} still served")
        start = time.monotonic()
        for ext in ("key", "crt"):  # each file replaced at once, as Kubernetes swaps them
            tmp = os.path.join(live, f".tls.{ext}.new")
            shutil.copy(certs.path("node_next", ext), tmp)
            os.replace(tmp, os.path.join(live, f"tls.{ext}"))
        wait_for("the new serial served",
                 lambda: served_serial(c.addr["ps:0"], certs) == after, 20, interval=0.2)
        log(f"  serial {before} -> {after} served {time.monotonic() - start:.1f} s after the "
            f"files changed, same pid {c.procs['ps:0'].pid}")
        if not c.procs["ps:0"].alive():
            raise DrillError("ps:0 died")
    finally:
        c.stop()


TESTS = {"cluster": test_cluster, "wrong_ca": test_wrong_ca, "wrong_name": test_wrong_name,
         "identity": test_identity, "rotation": test_rotation}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bin", required=True)
    parser.add_argument("--only", choices=sorted(TESTS))
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = parser.parse_args()
    args.bin = os.path.abspath(args.bin)
    if shutil.which("openssl") is None:
        skips.skip("the mutual TLS tests", "no openssl command (apt-get install openssl)")
    work = tempfile.mkdtemp(prefix="trainscope-tls-")
    certs = Certs(work)
    certs.leaf("node")
    certs.leaf("client")
    certs.leaf("rogue", ca="other_ca")
    certs.leaf("impostor", san="IP:127.0.0.2")
    failed = []
    for name, test in TESTS.items():
        if args.only and name != args.only:
            continue
        log(f"{name} ...")
        try:
            test(args, certs, os.path.join(work, name))
            log(f"{name}: PASS")
        except (DrillError, OSError, subprocess.SubprocessError) as e:
            log(f"{name}: FAIL: {e}")
            failed.append(name)
    if args.keep or failed:
        log(f"files and logs kept in {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
