"""Hostile HTTP clients and a prober, for the load test and the slow-client bench
(tests/integration/http_load_test.py, tests/bench/http_slowloris_bench.py).

- Attacker: many connections that trickle a request (slowloris), send nothing, or stop in the
  middle of a TLS handshake, held from given source addresses (127.0.0.x) in a process of its
  own, each opened again a second after the server closes it.
- Prober: asks endpoints at an interval from an address of its own, keeps latencies and failures.
- percentile, raise_fd_limit, memory: what the reports need.
"""

import errno
import http.client
import multiprocessing
import resource
import selectors
import socket
import ssl
import threading
import time

from trainscope_testing.waiting import HarnessError

TRICKLE_PERIOD_S = 1.0
RECONNECT_AFTER_S = 1.0


class Attacker:
    """Holds `count` connections to each target (host, port), from `sources` in turn, in a
    process of its own (so that the prober's thread does not wait for it): each does `kind`
    (slowloris / idle / tls-stall / tls-trickle); a connection the server closes is opened
    again RECONNECT_AFTER_S later."""

    def __init__(self, targets, count, sources, kinds):
        self.sel = selectors.DefaultSelector()
        self.slots = []  # [target, source, kind, sock, payload, sent, next_at]
        for t in targets:
            for i in range(count):
                self.slots.append([t, sources[i % len(sources)], kinds[i % len(kinds)],
                                   None, b"", 0, 0.0])
        self.stop_event = multiprocessing.Event()
        self.results = multiprocessing.Queue()
        self.opened = self.closed_by_server = self.held = 0
        self.process = multiprocessing.Process(target=self.main, daemon=True)

    def start(self):
        self.process.start()
        return self

    def stop(self):
        """Stops the process; its counts (held at the end, opened, closed by the servers)
        then read here."""
        self.stop_event.set()
        try:
            self.held, self.opened, self.closed_by_server = self.results.get(timeout=30)
        finally:
            self.process.join(10)
            if self.process.is_alive():
                self.process.kill()

    def main(self):
        self.run()
        held = sum(1 for slot in self.slots if slot[3] is not None)
        for slot in self.slots:
            self.drop(slot, by_server=False)
        self.results.put((held, self.opened, self.closed_by_server))

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
            for key, _ in self.sel.select(timeout=0.2):
                slot = key.data
                try:
                    data = slot[3].recv(4096)
                except BlockingIOError:
                    continue
                except OSError:
                    data = b""
                if not data or slot[2].startswith("slow") or slot[2] == "idle":
                    self.drop(slot)  # Closed by the server (or a 503 before closing).


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
    """Asks every (name, port, path) on 127.0.0.1 every `interval` s from `source`, each on a
    new connection with a `timeout` s limit; keeps every latency and every failure."""

    def __init__(self, endpoints, tls_ctx, interval=0.25, source="127.0.0.61", timeout=5.0):
        self.endpoints, self.ctx, self.interval = endpoints, tls_ctx, interval
        self.source, self.timeout = source, timeout
        self.latencies = {name: [] for name, _, _ in endpoints}
        self.asked = {name: 0 for name, _, _ in endpoints}
        self.slowest = {name: 0.0 for name, _, _ in endpoints}
        self.failures = []
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def connection(self, port):
        """An http.client connection to 127.0.0.1:port from the prober's address."""
        if self.ctx:
            return http.client.HTTPSConnection("127.0.0.1", port, timeout=self.timeout,
                                               context=self.ctx, source_address=(self.source, 0))
        return http.client.HTTPConnection("127.0.0.1", port, timeout=self.timeout,
                                          source_address=(self.source, 0))

    def probe(self, port, path):
        """The status of GET path, on a new connection."""
        c = self.connection(port)
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
                self.asked[name] += 1
                self.slowest[name] = max(self.slowest[name], took)
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
