#!/usr/bin/python3
"""HTTPS on the HTTP listeners (a task's /metrics, the sidecar's page and API), their default
bind address, and a certificate rotated without a restart. docs/security.md, "HTTP listeners".

A CA, a server certificate, a client certificate and a client certificate of another CA are
made here with `openssl` in a temporary folder. A real linear_regression ps and a real
trainscope-sidecar run with --tls_cert_file/--tls_key_file/--tls_ca_file on loopback:
- a client with a certificate of the CA is served, one without or with the other CA's is
  refused, and plain HTTP gets nothing;
- trainscopectl status reaches the sidecar over https:// with its certificate, and not without;
- a real Prometheus scrapes the task's /metrics with `scheme: https` and `tls_config` (up == 1);
- the server certificate replaced on disk is served from a later handshake on, while
  handshakes in a loop never fail (the time to pick it up is printed, not asserted);
- with the spec's host `localhost`, /metrics and the sidecar listen on 127.0.0.1 only: nothing
  answers on 127.0.0.2.

Usage: http_tls_test.py --bin BUILD/bin [--keep]; by hand, with the helpers (tests/py):
`scripts/python tests/integration/http_tls_test.py --bin build/bin`.
Exit 0 when every check passed. Without prometheus or prometheus-alertmanager their checks are
skipped, saying so (under CI=true the test fails instead). Standard library only.
"""

import argparse
import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request

from trainscope_testing import skips
from trainscope_testing.certs import issue_pem, make_pem_certs, pem_context
from trainscope_testing.cluster_spec import tf_config
from trainscope_testing.checks import Checks
from trainscope_testing.logs import logger
from trainscope_testing.ports import free_port
from trainscope_testing.processes import ProcGroup
from trainscope_testing.waiting import HarnessError, wait_for

log = logger()
check = Checks(log)


def https_get(ctx, port, path, host="127.0.0.1", timeout=5):
    """(status, body, serial of the server's certificate) or raises."""
    with socket.create_connection((host, port), timeout=timeout) as raw:
        with ctx.wrap_socket(raw, server_hostname="localhost") as s:
            s.sendall(f"GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n".encode())
            data = b""
            while chunk := s.recv(65536):
                data += chunk
            der = s.getpeercert(binary_form=True)
    if not data:
        raise ConnectionError("no answer")
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), body.decode(errors="replace"), serial_of(der)


def raw_status(ctx, port, request):
    """The status line's code of `request` (bytes) sent as is over TLS."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        with ctx.wrap_socket(raw, server_hostname="localhost") as s:
            s.sendall(request)
            data = b""
            while chunk := s.recv(65536):
                data += chunk
    return int(data.split()[1])


def check_bounds(ctx, port):
    many = "".join(f"X-H{i}: v\r\n" for i in range(200))
    check(raw_status(ctx, port, f"GET /healthz HTTP/1.0\r\n{many}\r\n".encode()) == 200,
          "200 short header lines: served")
    big = "X-Big: " + "a" * 17000 + "\r\n"
    check(raw_status(ctx, port, f"GET /healthz HTTP/1.0\r\n{big}\r\n".encode()) == 431,
          "17 KiB of headers: 431 Request Header Fields Too Large (max_header_bytes 16 KiB)")


def serial_of(der):
    out = subprocess.run(["openssl", "x509", "-inform", "DER", "-noout", "-serial"], input=der,
                         capture_output=True, check=True).stdout.decode()
    return int(out.strip().split("=")[1], 16)


def refused(fn):
    try:
        fn()
        return False
    except (OSError, ssl.SSLError, ConnectionError, ValueError):
        return True


def within(fn, timeout, what):
    """True once fn() is truthy (any exception meaning not yet, every 0.1 s); else a failed
    check "what within timeout s" and False."""
    try:
        return bool(wait_for(what, fn, timeout, interval=0.1, errors=(Exception,)))
    except HarnessError:
        check(False, f"{what} within {timeout} s")
        return False


def rotate(d, ports):
    """Replaces server.pem (serial 0x1002, same key) by rename while a thread handshakes with
    each port in a loop; returns seconds until every port served the new serial, or None."""
    stop, errors, served = threading.Event(), [], {}
    ctx = pem_context(d)

    def hammer(port):
        while not stop.is_set():
            try:
                served[port] = https_get(ctx, port, "/healthz" if port == ports[0] else
                                         "/metrics")[2]
            except Exception as e:  # noqa: BLE001 (counted: there must be none)
                errors.append(f"{port}: {e}")
            time.sleep(0.02)
    threads = [threading.Thread(target=hammer, args=(p,), daemon=True) for p in ports]
    for t in threads:
        t.start()
    time.sleep(0.5)
    issue_pem(d, "server", "ca", serial=0x1002, ext="server.ext", out="server.pem.new")
    os.rename(os.path.join(d, "server.pem.new"), os.path.join(d, "server.pem"))
    t0 = time.time()
    took = None
    while time.time() - t0 < 10:
        if all(served.get(p) == 0x1002 for p in ports):
            took = time.time() - t0
            break
        time.sleep(0.01)
    time.sleep(0.3)
    stop.set()
    for t in threads:
        t.join()
    check(not errors, f"no handshake failed during the rotation ({len(errors)} failed"
          f"{': ' + errors[0] if errors else ''})")
    return took


def half_rotation(d, port):
    """A certificate that does not match the key (a rotation half written) keeps the last good
    pair served; the matching one then loads."""
    ctx = pem_context(d)
    before = https_get(ctx, port, "/healthz")[2]
    shutil.copy(os.path.join(d, "client.pem"), os.path.join(d, "server.pem"))  # Not server.key's.
    time.sleep(1.5)
    status, _, serial = https_get(ctx, port, "/healthz")
    check(status == 200 and serial == before,
          "a certificate not matching the key: the last good one still served")
    with open(os.path.join(d, "sidecar.log")) as f:
        check("do not load yet" in f.read(), "the sidecar logs why the new files do not load")
    issue_pem(d, "server", "ca", serial=0x1003, ext="server.ext")
    if within(lambda: https_get(ctx, port, "/healthz")[2] == 0x1003, 5,
                "the matching certificate loads afterwards"):
        check(True, "the matching certificate loads afterwards")


def prometheus_scrapes(d, metrics_port):
    prom = shutil.which("prometheus") or "/usr/bin/prometheus"
    if not os.path.exists(prom):
        skips.skip_check("the Prometheus check", "no prometheus binary (apt-get install prometheus)",
                         log)
        return
    port = free_port()
    config = {"global": {"scrape_interval": "1s"},
              "scrape_configs": [{"job_name": "trainscope-tasks", "scheme": "https",
                                  "tls_config": {"ca_file": os.path.join(d, "ca.pem"),
                                                 "cert_file": os.path.join(d, "client.pem"),
                                                 "key_file": os.path.join(d, "client.key"),
                                                 "server_name": "localhost"},
                                  "static_configs": [{"targets": [f"127.0.0.1:{metrics_port}"]}]}]}
    with open(os.path.join(d, "prometheus.yml"), "w") as f:
        json.dump(config, f)  # JSON is YAML.
    procs = ProcGroup(d)
    procs.start("prometheus", [prom, f"--config.file={d}/prometheus.yml",
                               f"--storage.tsdb.path={d}/tsdb",
                               f"--web.listen-address=127.0.0.1:{port}"])
    q = urllib.parse.quote('up{job="trainscope-tasks"}')

    def up():
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/query?query={q}",
                                    timeout=2) as r:
            result = json.load(r)["data"]["result"]
        return result and result[0]["value"][1] == "1"
    try:
        if within(up, 30, "Prometheus scrapes the task's /metrics over mutual TLS (up == 1)"):
            check(True, "Prometheus scrapes the task's /metrics over mutual TLS (up == 1)")
    finally:
        procs.stop()


def start_alertmanager(d, procs):
    """A real Alertmanager serving HTTPS that requires a client certificate of the CA; its
    port, or None when there is no Alertmanager here."""
    am = shutil.which("prometheus-alertmanager") or "/usr/bin/prometheus-alertmanager"
    if not os.path.exists(am):
        skips.skip_check("the Alertmanager check", "no prometheus-alertmanager binary "
                         "(apt-get install prometheus-alertmanager)", log)
        return None
    port = free_port()
    with open(os.path.join(d, "am.yml"), "w") as f:
        json.dump({"route": {"receiver": "none"}, "receivers": [{"name": "none"}]}, f)
    with open(os.path.join(d, "am-web.yml"), "w") as f:
        json.dump({"tls_server_config": {"cert_file": f"{d}/server.pem",
                                         "key_file": f"{d}/server.key",
                                         "client_auth_type": "RequireAndVerifyClientCert",
                                         "client_ca_file": f"{d}/ca.pem"}}, f)
    procs.start("alertmanager", [am, f"--config.file={d}/am.yml", f"--storage.path={d}/am",
                                 f"--web.listen-address=127.0.0.1:{port}",
                                 f"--web.config.file={d}/am-web.yml", "--cluster.listen-address="])
    return port


def alert_reaches_alertmanager(d, am_port, ps_proc):
    """The ps killed: the sidecar's TrainscopeTaskDead reaches Alertmanager over mutual TLS."""
    ps_proc.kill9()
    ctx = pem_context(d)

    def dead():
        status, body, _ = https_get(ctx, am_port, "/api/v2/alerts")
        return status == 200 and "TrainscopeTaskDead" in body
    if within(dead, 30, "the sidecar's TrainscopeTaskDead posted to Alertmanager over HTTPS"):
        check(True, "the sidecar's TrainscopeTaskDead posted to Alertmanager over mutual TLS")


def run(bin_dir, d):
    make_pem_certs(d)
    ps, worker, metrics, http, grpc = (free_port() for _ in range(5))
    spec = {"cluster": {"ps": [f"localhost:{ps}"], "worker": [f"localhost:{worker}"]}}
    with open(os.path.join(d, "spec.json"), "w") as f:
        json.dump(spec, f)
    tls = ["--tls_cert_file", f"{d}/server.pem", "--tls_key_file", f"{d}/server.key",
           "--tls_ca_file", f"{d}/ca.pem"]
    procs = ProcGroup(d)
    try:
        am_port = start_alertmanager(d, procs)
        am_flags = ["--alertmanager_url", f"https://localhost:{am_port}"] if am_port else []
        ps_proc = procs.start("ps", [f"{bin_dir}/linear_regression", "--metrics_port", str(metrics),
                           "--disable_tracing", *tls],
                    env={"TF_CONFIG": tf_config(spec, "ps", 0)})
        procs.start("sidecar", [f"{bin_dir}/trainscope-sidecar", "--cluster_spec",
                                f"{d}/spec.json", "--http_port", str(http), "--grpc_port",
                                str(grpc), "--peer_sidecars", "none", *am_flags, *tls])
        ctx = pem_context(d)
        within(lambda: https_get(ctx, metrics, "/metrics")[0] == 200, 15, "task /metrics up")
        within(lambda: https_get(ctx, http, "/healthz")[0] == 200, 15, "sidecar up")
        for name, port, path, want in (("task /metrics", metrics, "/metrics", "trainscope_"),
                                       ("sidecar page", http, "/", "<html"),
                                       ("sidecar API", http, "/api/v1/tasks", '"tasks"')):
            status, body, _ = https_get(ctx, port, path)
            check(status == 200 and want in body, f"{name} served over HTTPS to a client of the CA")
            check(refused(lambda: https_get(pem_context(d, client=None), port, path)),
                  f"{name} refused to a client without a certificate")
            check(refused(lambda: https_get(pem_context(d, client="rogue"), port, path)),
                  f"{name} refused to a client with another CA's certificate")
            check(refused(lambda: urllib.request.urlopen(f"http://127.0.0.1:{port}{path}",
                                                         timeout=3).read()),
                  f"{name} answers no plain HTTP")
            check(refused(lambda: socket.create_connection(("127.0.0.2", port), 2).close()),
                  f"{name} not listening on 127.0.0.2 (the spec's host is localhost)")
        check_bounds(ctx, http)
        ctl = [f"{bin_dir}/trainscopectl", "status", "--sidecar", f"https://127.0.0.1:{http}",
               "--tls_ca_file", f"{d}/ca.pem"]
        with_cert = subprocess.run(ctl + ["--tls_cert_file", f"{d}/client.pem", "--tls_key_file",
                                          f"{d}/client.key"], capture_output=True, text=True)
        check(with_cert.returncode in (0, 1) and "ps:0" in with_cert.stdout,
              f"trainscopectl status over https with a client certificate "
              f"(exit {with_cert.returncode}: {with_cert.stderr.strip()[:200]})")
        without = subprocess.run(ctl, capture_output=True, text=True)
        check(without.returncode == 2, "trainscopectl status without a client certificate: exit 2")
        prometheus_scrapes(d, metrics)
        took = rotate(d, [http, metrics])
        check(took is not None, "the rotated certificate is served by the sidecar and the task")
        if took is not None:
            log(f"rotation picked up by both listeners {took:.2f} s after the rename")
        half_rotation(d, http)
        if am_port:
            alert_reaches_alertmanager(d, am_port, ps_proc)
    finally:
        procs.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", required=True)
    ap.add_argument("--keep", action="store_true", help="keep the temporary folder")
    a = ap.parse_args()
    return check.run("trainscope-http-tls-", lambda d: run(os.path.abspath(a.bin), d),
                     keep=a.keep, errors=())


if __name__ == "__main__":
    sys.exit(main())
