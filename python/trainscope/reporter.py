"""The reporter: one daemon thread that sends the task's heartbeat to its node's sidecar
(trainscope.v1.TaskReports/Report) twice a second. step() and set_phase() only set numbers."""

import json
import logging
import os
import socket
import threading
import time

from . import wire

VERSION = "trainscope-python-hook 0.1.0"
REPORT = "/trainscope.v1.TaskReports/Report"
log = logging.getLogger("trainscope")


def endpoint_from_environment():
    """host:port of the sidecar's gRPC port: $TRAINSCOPE_REPORT_ENDPOINT, else the OTLP endpoint
    the program's spans go to (the node's sidecar takes both), else 127.0.0.1:4317."""
    explicit = os.environ.get("TRAINSCOPE_REPORT_ENDPOINT")
    if explicit:
        return explicit
    otlp = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "")
    if otlp.startswith("http://"):
        return otlp[len("http://"):].rstrip("/")
    return "127.0.0.1:4317"


class Reporter:
    def __init__(self, target=None, interval_s=0.5, tf_config=None):
        raw = tf_config if tf_config is not None else os.environ.get("TF_CONFIG", "")
        cfg = json.loads(raw) if raw else {}
        task = cfg.get("task") or {}
        self.role = task.get("type", "")
        self.index = int(task.get("index", 0))
        addresses = (cfg.get("cluster") or {}).get(self.role) or []
        self.listen_address = addresses[self.index] if self.index < len(addresses) else ""
        self.target = target or endpoint_from_environment()
        self.interval_s = interval_s
        self.phase = "starting"
        self.steps = 0
        self.last_step_seconds = 0.0
        self.waiting = None
        self._last_step_at = None
        self._stop = threading.Event()
        self._thread = None
        self._warned = False

    # What the program tells: cheap, no lock (each is one assignment under the GIL).
    def step(self, n=1):
        now = time.monotonic()
        if self._last_step_at is not None:
            self.last_step_seconds = (now - self._last_step_at) / max(n, 1)
        self._last_step_at = now
        self.steps += n
        if self.phase != "training":
            self.phase = "training"
        self.waiting = None

    def set_phase(self, phase):
        self.phase = phase

    def wait_on(self, what, peers):
        """Whom the program waits on: peers as ["ps:1", ...] (None or [] when it no longer
        waits)."""
        if not peers:
            self.waiting = None
            return
        parsed = []
        for p in peers:
            r, _, i = str(p).partition(":")
            parsed.append((r, int(i or 0), ""))
        self.waiting = (what, time.time(), parsed)

    def start(self):
        if self._thread is None and self.role:
            self._thread = threading.Thread(target=self._loop, name="trainscope-reporter",
                                            daemon=True)
            self._thread.start()
        return self

    def stop(self):
        self._stop.set()

    def message(self):
        return wire.heartbeat(self.role, self.index, os.getpid(), socket.gethostname(),
                              self.listen_address, VERSION, self.phase, self.steps, time.time(),
                              self.last_step_seconds, self.phase == "training", self.waiting)

    def _loop(self):
        try:
            import grpc
        except ImportError:
            log.warning("trainscope: grpcio is not installed: the hook reports nothing")
            return
        channel = grpc.insecure_channel(self.target)
        call = channel.unary_unary(REPORT, request_serializer=lambda b: b,
                                   response_deserializer=lambda b: b)
        while not self._stop.is_set():
            try:
                call(self.message(), timeout=2)
                self._warned = False
            except grpc.RpcError as e:
                if not self._warned:
                    log.warning("trainscope: the sidecar at %s did not take the report: %s %s",
                                self.target, e.code().name, e.details())
                    self._warned = True
            except Exception:  # never in the training loop's way
                pass
            self._stop.wait(self.interval_s)
        try:
            call(self.message(), timeout=1)  # the last word (done)
        except Exception:
            pass


_reporter = None
_lock = threading.Lock()


def reporter():
    """The process's reporter, started on first use."""
    global _reporter
    r = _reporter
    if r is not None:
        return r
    with _lock:
        if _reporter is None:
            _reporter = Reporter().start()
        return _reporter


def step(n=1):
    reporter().step(n)


def set_phase(phase):
    reporter().set_phase(phase)


def wait_on(what, peers):
    reporter().wait_on(what, peers)
