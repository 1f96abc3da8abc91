#!/usr/bin/python3
"""What HTTPS costs a scrape of a task's /metrics: N scrapes, each on a new connection (as a
scraper without keep-alive does), of one linear_regression ps served plainly and one served
over mutual TLS, one after the other; prints the median and 90th percentile of each. Then
one scrape while --idle connections that never send a byte are held open.

Usage: scripts/python tests/bench/http_tls_bench.py --bin BUILD/bin [--scrapes 300]
Standard library and openssl; certificates made in a temporary folder.
"""

import argparse
import shutil
import socket
import statistics
import sys
import tempfile
import time

sys.dont_write_bytecode = True

from trainscope_testing.certs import make_pem_certs, pem_context
from trainscope_testing.cluster_spec import tf_config
from trainscope_testing.ports import free_port
from trainscope_testing.processes import ProcGroup


def get(port, ctx=None, timeout=5):
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as raw:
        s = ctx.wrap_socket(raw, server_hostname="localhost") if ctx else raw
        s.sendall(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n")
        while s.recv(65536):
            pass


def measure(fn, n):
    fn()  # warm
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    times.sort()
    return statistics.median(times), times[int(0.9 * len(times))]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", required=True)
    ap.add_argument("--scrapes", type=int, default=300)
    ap.add_argument("--idle", type=int, default=20, help="idle connections for the last figure")
    a = ap.parse_args()
    d = tempfile.mkdtemp(prefix="trainscope-http-tls-bench-")
    procs = ProcGroup(d)
    try:
        make_pem_certs(d)
        tls = ["--tls_cert_file", f"{d}/server.pem", "--tls_key_file", f"{d}/server.key",
               "--tls_ca_file", f"{d}/ca.pem"]
        ports = {}
        for name, flags in (("plain", []), ("tls", tls)):
            ps, worker, metrics = free_port(), free_port(), free_port()
            spec = {"ps": [f"localhost:{ps}"], "worker": [f"localhost:{worker}"]}
            procs.start(name, [f"{a.bin}/linear_regression", "--metrics_port", str(metrics),
                               "--disable_tracing", *flags],
                        env={"TF_CONFIG": tf_config(spec, "ps", 0)})
            ports[name] = metrics
        time.sleep(2)
        ctx = pem_context(d)
        plain = measure(lambda: get(ports["plain"]), a.scrapes)
        tls_ms = measure(lambda: get(ports["tls"], ctx), a.scrapes)
        print(f"{a.scrapes} scrapes of /metrics, each on a new connection:")
        print(f"  http                     median {plain[0]:.2f} ms, p90 {plain[1]:.2f} ms")
        print(f"  https (mutual TLS 1.3)   median {tls_ms[0]:.2f} ms, p90 {tls_ms[1]:.2f} ms")
        # Clients that connect and say nothing hold the 4 threads of /metrics until its 3 s
        # timeout: a scrape then waits, and is served, not lost.
        idle = [socket.create_connection(("127.0.0.1", ports["tls"])) for _ in range(a.idle)]
        t0 = time.perf_counter()
        get(ports["tls"], ctx, timeout=60)
        print(f"  https with {a.idle} idle connections held: one scrape took "
              f"{time.perf_counter() - t0:.2f} s")
        for s in idle:
            s.close()
    finally:
        procs.stop()
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
