#!/usr/bin/python3
"""Hostile load on the HTTP listeners (docs/security.md, "HTTP listeners"): slow and idle
clients must not blind the sidecar's page, API and /metrics, nor a task's /metrics.

A real linear_regression ps and worker and a real trainscope-sidecar run on loopback. This
test holds --connections connections to the sidecar and as many to the ps's /metrics, first
from one client address (127.0.0.2), then spread over 50 (127.0.0.2..127.0.0.51): half send a
request one header line a second (slowloris), half connect and send nothing. Whatever the
servers close is opened again a second later. Meanwhile a prober on its own address
(127.0.0.61) asks the sidecar's /healthz, /api/v1/tasks and /metrics and the ps's /metrics
every 0.25 s: every probe must be answered (200). Then the same over HTTPS (mutual TLS) with
connections that stop in the middle of the TLS handshake: half send a whole ClientHello and
nothing after it, half trickle it a byte a second. The probes' p50 and p99 are printed, not
asserted (the machine may be shared).

Usage: http_load_test.py --bin BUILD/bin [--connections 1000] [--hold 10] [--keep]; by hand:
`PYTHONPATH=tests/py /usr/bin/python3 tests/integration/http_load_test.py --bin build/bin`.
Exit 0 when every probe was answered. Standard library only.
"""

import argparse
import errno
import http.client
import json
import os
import resource
import selectors
import shutil
import socket
import ssl
import sys
import tempfile
import threading
import time

from trainscope_testing.certs import make_pem_certs, pem_context
from trainscope_testing.cluster_spec import tf_config
from trainscope_testing.logs import logger
from trainscope_testing.ports import free_port
from trainscope_testing.processes import ProcGroup
from trainscope_testing.waiting import HarnessError, wait_for

log = logger("http-load")
PROBE_SOURCE = "127.0.0.61"
TRICKLE_PERIOD_S = 1.0
RECONNECT_AFTER_S = 1.0


class Attacker:
    """Holds `count` connections to each target (host, port), from `sources` in turn, in one
    thread: each does `kind` (slowloris / idle / tls-stall / tls-trickle); a connection the
    server closes is opened again RECONNECT_AFTER_S later."""

    def __init__(self, targets, count, sources, kinds):
        self.sel = selectors.DefaultSelector()
        self.slots = []  # [target, source, kind, sock, payload, sent, next_at]
        for t in targets:
            for i in range(count):
                self.slots.append([t, sources[i % len(sources)], kinds[i % len(kinds)],
                                   None, b"", 0, 0.0])
        self.stop_event = threading.Event()
        self.opened = self.closed_by_server = 0
        self.held = 0
        self.thread = threading.Thread(target=self.run, daemon=True)

    def start(self):
        self.thread.start()
        return self

    def stop(self):
        self.stop_event.set()
        self.thread.join(10)
        for slot in self.slots:
            self.drop(slot, by_server=False)
        self.sel.close()

    def drop(self, slot, by_server=True):
        if slot[3] is None:
            return
        try:
            self.sel.unregister(slot[3])
        except (KeyError, ValueError):
            pass
        slot[3].close()
        slot[3] = None
        slot[6] = time.monotonic() + RECONNECT_AFTER_S
        if by_server:
            self.closed_by_server += 1

    def open(self, slot, now):
        (host, port), source, kind = slot[0], slot[1], slot[2]
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        try:
            s.bind((source, 0))
            s.connect_ex((host, port))
        except OSError:
            s.close()
            slot[6] = now + RECONNECT_AFTER_S
            return
        slot[3], slot[5], slot[6] = s, 0, now + 0.05
        slot[4] = payload_of(kind, host)
        self.sel.register(s, selectors.EVENT_READ, slot)
        self.opened += 1

    def tick(self, slot, now):
        """Sends the slot's next piece when it is due."""
        kind, s, payload = slot[2], slot[3], slot[4]
        if kind in ("idle",) or now < slot[6]:
            return
        if kind == "tls-stall":
            piece = payload[slot[5]:] if slot[5] == 0 else b""
        elif kind == "slowloris" and slot[5] == 0:
            piece = b"GET / HTTP/1.1\r\nHost: x\r\n"
        elif kind == "slowloris":
            piece = b"X-Slow-%d: y\r\n" % slot[5]
        else:  # tls-trickle: one byte of the ClientHello
            piece = payload[slot[5]:slot[5] + 1]
        slot[6] = now + TRICKLE_PERIOD_S
        if not piece:
            return
        try:
            s.send(piece)
            slot[5] += len(piece) if kind != "slowloris" else 1
        except BlockingIOError:
            pass
        except OSError as e:
            if e.errno not in (errno.ENOTCONN,):  # Still connecting: next time.
                self.drop(slot)

    def run(self):
        while not self.stop_event.is_set():
            now = time.monotonic()
            for slot in self.slots:
                if slot[3] is None:
                    if now >= slot[6]:
                        self.open(slot, now)
                else:
                    self.tick(slot, now)
            for key, _ in self.sel.select(timeout=0.05):
                slot = key.data
                try:
                    data = slot[3].recv(4096)
                except BlockingIOError:
                    continue
                except OSError:
                    data = b""
                if not data or slot[2].startswith("slow") or slot[2] == "idle":
                    self.drop(slot)  # Closed by the server (or a 503 before closing).
            self.held = sum(1 for slot in self.slots if slot[3] is not None)


_HELLO = {}


def payload_of(kind, host):
    """What a tls-* connection sends: a real ClientHello (one per host, reused)."""
    if not kind.startswith("tls"):
        return b""
    if host not in _HELLO:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        obj = ctx.wrap_bio(ssl.MemoryBIO(), out := ssl.MemoryBIO(), server_hostname="localhost")
        try:
            obj.do_handshake()
        except ssl.SSLWantReadError:
            pass
        _HELLO[host] = out.read()
    return _HELLO[host]


class Prober:
    """Asks every (name, port, path) every `interval` s from PROBE_SOURCE, each on a new
    connection with a 5 s limit; keeps every latency and every failure."""

    def __init__(self, endpoints, tls_ctx, interval=0.25):
        self.endpoints, self.ctx, self.interval = endpoints, tls_ctx, interval
        self.latencies = {name: [] for name, _, _ in endpoints}
        self.failures = []
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def probe(self, port, path):
        if self.ctx:
            c = http.client.HTTPSConnection("127.0.0.1", port, timeout=5, context=self.ctx,
                                            source_address=(PROBE_SOURCE, 0))
        else:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=5,
                                           source_address=(PROBE_SOURCE, 0))
        try:
            c.request("GET", path)
            r = c.getresponse()
            r.read()
            return r.status
        finally:
            c.close()

    def run(self):
        while not self.stop_event.is_set():
            for name, port, path in self.endpoints:
                start = time.monotonic()
                try:
                    status = self.probe(port, path)
                    error = None if status == 200 else f"status {status}"
                except (OSError, http.client.HTTPException) as e:
                    error = f"{type(e).__name__}: {e}"
                took = time.monotonic() - start
                if error:
                    self.failures.append(f"{name} at {time.strftime('%H:%M:%S')}: {error}")
                else:
                    self.latencies[name].append(took)
            self.stop_event.wait(self.interval)

    def start(self):
        self.thread.start()
        return self

    def stop(self):
        self.stop_event.set()
        self.thread.join(30)


def percentile(values, p):
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * p / 100))]


def raise_fd_limit(need):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = max(soft, need)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, max(hard, want)))
    except (ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(want, hard), hard))
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < need:
        raise HarnessError(f"needs {need} file descriptors, the limit is {soft} (ulimit -n)")


def start_cluster(bin_dir, d, procs, tls):
    ps, worker, metrics, http_port, worker_metrics = (free_port() for _ in range(5))
    spec = {"cluster": {"ps": [f"127.0.0.1:{ps}"], "worker": [f"127.0.0.1:{worker}"]}}
    suffix = "-tls" if tls else ""
    with open(os.path.join(d, f"spec{suffix}.json"), "w") as f:
        json.dump(spec, f)
    flags = (["--tls_cert_file", f"{d}/server.pem", "--tls_key_file", f"{d}/server.key",
              "--tls_ca_file", f"{d}/ca.pem"] if tls else [])
    ps_proc = procs.start(f"ps{suffix}", [f"{bin_dir}/linear_regression", "--metrics_port", str(metrics),
                                "--disable_tracing", *flags],
                env={"TF_CONFIG": tf_config(spec, "ps", 0)})
    procs.start(f"worker{suffix}", [f"{bin_dir}/linear_regression", "--metrics_port",
                                    str(worker_metrics), "--disable_tracing", "--steps",
                                    "1000000", "--step_delay_ms", "20", *flags],
                env={"TF_CONFIG": tf_config(spec, "worker", 0)})
    sidecar_proc = procs.start(f"sidecar{suffix}", [f"{bin_dir}/trainscope-sidecar", "--cluster_spec",
                                     f"{d}/spec{suffix}.json", "--http_port", str(http_port),
                                     "--grpc_port", "-1", "--peer_sidecars", "none", *flags])
    endpoints = [("sidecar /healthz", http_port, "/healthz"),
                 ("sidecar /api/v1/tasks", http_port, "/api/v1/tasks"),
                 ("sidecar /metrics", http_port, "/metrics"),
                 ("ps /metrics", metrics, "/metrics")]
    ctx = pem_context(d) if tls else None
    probe = Prober(endpoints, ctx)
    for name, port, path in endpoints:
        wait_for(f"{name} answers", lambda: probe.probe(port, path) == 200, 30,
                 errors=(OSError, http.client.HTTPException))
    return (endpoints, ctx, [("127.0.0.1", http_port), ("127.0.0.1", metrics)],
            [("sidecar", sidecar_proc), ("ps", ps_proc)])


def memory(pid):
    """'VmRSS / VmHWM' of pid, as /proc says."""
    fields = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                key, _, value = line.partition(":")
                fields[key] = value.strip()
    except OSError:
        return "gone"
    return f"{fields.get('VmRSS', '?')} resident (peak {fields.get('VmHWM', '?')})"


def phase(what, endpoints, ctx, targets, count, sources, kinds, hold, watched):
    """One load: returns the failed probes (strings)."""
    attack = Attacker(targets, count, sources, kinds).start()
    time.sleep(2)  # Let the connections pile up before probing.
    probe = Prober(endpoints, ctx).start()
    time.sleep(hold)
    probe.stop()
    held = attack.held
    rss = ", ".join(f"{name} {memory(p.pid)}" for name, p in watched)
    attack.stop()
    log(f"{what}: {held} of {count * len(targets)} connections open at the end; "
        f"{attack.opened} opened, {attack.closed_by_server} closed by the servers; {rss}")
    for name, values in probe.latencies.items():
        log(f"  {name}: {len(values)} answered, p50 {percentile(values, 50) * 1000:.1f} ms, "
            f"p99 {percentile(values, 99) * 1000:.1f} ms")
    for f in probe.failures[:20]:
        log(f"  FAIL {f}")
    if not any(probe.latencies.values()):
        return [f"{what}: no probe answered"]
    return [f"{what}: {f}" for f in probe.failures]


def run(bin_dir, d, count, hold):
    raise_fd_limit(2 * count + 512)
    make_pem_certs(d)
    one = ["127.0.0.2"]
    fifty = [f"127.0.0.{i}" for i in range(2, 52)]
    failures = []
    for tls in (False, True):
        procs = ProcGroup(d)
        try:
            endpoints, ctx, targets, watched = start_cluster(bin_dir, d, procs, tls)
            kinds = ["tls-stall", "tls-trickle"] if tls else ["slowloris", "idle"]
            scheme = "HTTPS, stopped TLS handshakes" if tls else "HTTP, slowloris and idle"
            for sources in (one, fifty):
                what = f"{scheme}, {count} per server from {len(sources)} address(es)"
                failures += phase(what, endpoints, ctx, targets, count, sources, kinds, hold,
                                  watched)
            for p in procs.procs:
                if not p.alive():
                    failures.append(f"{p.name} exited under load:\n{p.tail()}")
        finally:
            procs.stop()
    return failures


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", required=True)
    ap.add_argument("--connections", type=int, default=1000, help="per server")
    ap.add_argument("--hold", type=float, default=10, help="seconds of probing per load")
    ap.add_argument("--keep", action="store_true", help="keep the temporary folder")
    a = ap.parse_args()
    d = tempfile.mkdtemp(prefix="trainscope-http-load-")
    failures = ["not run"]
    try:
        failures = run(os.path.abspath(a.bin), d, a.connections, a.hold)
    finally:
        if a.keep or failures:
            log(f"files and logs in {d}")
        else:
            shutil.rmtree(d, ignore_errors=True)
    for f in failures:
        log(f"FAIL {f}")
    log(f"{len(failures)} failure(s)" if failures else "every probe was answered")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
