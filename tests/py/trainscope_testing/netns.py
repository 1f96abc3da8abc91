#!/usr/bin/python3
"""Network namespaces as the nodes of a cluster, for trainscope's multi-node tests and drills.

A Cluster is N "nodes" (network namespaces) on one Ethernet bridge that lives in a "switch"
namespace of its own; nothing is added to the root namespace's network configuration. Node k
has `eth0` with 10.213.<s>.<k>/24 (the /24 exists only inside these namespaces), loopback up,
and its own host name (`n1`, `n2`, ...; every process started in a node gets a UTS namespace
with that name). Faults are made for real with iproute2:

  - cut(a, b): a route cut, `ip route add blackhole` in both nodes; cut_one_way(a, b): in a only;
    cut(a, b, how="drop"): packets silently dropped by the switch (nftables), a partition the
    nodes' own kernels do not know about; heal(a, b) undoes either;
  - link_down(n) / link_up(n): node n's link down (at="node": its eth0; at="switch": the switch's
    port, a pulled cable as the node sees it);
  - signal(p, sig): kill, stop or continue a process started in a node.

Namespaces are named `ts<pid>-sw`, `ts<pid>-n1`, ... (pid: the process that made them), so
parallel runs never collide, and every Cluster first removes the namespaces of earlier runs whose
maker is gone (stale runs). Teardown always happens: at the end of a `with` block (also on an
exception), at exit, on SIGTERM/SIGHUP (turned into SystemExit) and on Ctrl-C: every process
started is killed by pid, so is every process left in our namespaces (`ip netns pids`), every
namespace is deleted, and it is checked that nothing is left. Processes started from the main
thread also die with it (PR_SET_PDEATHSIG), in case this process is killed with SIGKILL.

Needs root (or CAP_SYS_ADMIN and CAP_NET_ADMIN) and iproute2; `unsupported_reason()` says why not,
and `skip_unless_supported()` exits after one line saying so (skipped, or failed under CI=true:
skips.py). Standard library only.

    with netns.Cluster(3) as c:
        ps = c.spawn(1, ["build/bin/linear_regression", ...], env={"TF_CONFIG": ...})
        c.http_json(3, f"http://{c.address(1)}:9400/api/v1/tasks")
        c.cut(1, 2); ...; c.heal(1, 2)
"""

import atexit
import ctypes
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

from trainscope_testing import nodes, processes, skips, web
from trainscope_testing.waiting import HarnessError

REGISTRY = "/run/trainscope-netns"  # One JSON file per run: who made which namespaces.
NETNS_DIR = "/run/netns"  # Where `ip netns` keeps its namespaces.
NAME_RE = re.compile(r"^ts(\d+)-(sw|n\d+|probe)$")
NODE_DEV = "eth0"  # The node's end of its veth.
BRIDGE = "br0"
NFT_TABLE = "trainscope"
_CLONE_NEWNET = 0x40000000
_PR_SET_PDEATHSIG = 1



def _sh(argv, check=True, timeout=20, input=None):
    """Runs a short command; returns (code, stdout+stderr). check: raise HarnessError on failure."""
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, input=input,
                           stdin=None if input is not None else subprocess.DEVNULL)
    except FileNotFoundError:
        raise HarnessError(f"{argv[0]} not found") from None
    except subprocess.TimeoutExpired:
        raise HarnessError(f"`{' '.join(argv)}` took more than {timeout} s") from None
    out = (r.stdout + r.stderr).strip()
    if check and r.returncode != 0:
        raise HarnessError(f"`{' '.join(argv)}` failed ({r.returncode}): {out}")
    return r.returncode, out


def _proc_stat(pid):
    """The fields of /proc/<pid>/stat after the command name (state first), or None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2:].split()


def _proc_start_time(pid):
    """The start time of pid (clock ticks since boot), or None when there is no such process."""
    fields = _proc_stat(pid)
    return int(fields[19]) if fields else None


def _proc_state(pid):
    """The state letter of pid ('R', 'S', 'T', 'Z', ...), or None when it is gone."""
    fields = _proc_stat(pid)
    return fields[0] if fields else None


def pid_alive(pid):
    """True when pid exists and is not a zombie."""
    return _proc_state(pid) not in (None, "Z", "X")


def list_namespaces():
    """The names of every network namespace `ip netns` knows."""
    code, out = _sh(["ip", "netns", "list"], check=False)
    return [line.split()[0] for line in out.splitlines() if line.strip()] if code == 0 else []


def namespace_pids(ns):
    """Pids of the processes in network namespace ns (empty when it is gone)."""
    code, out = _sh(["ip", "netns", "pids", ns], check=False)
    return [int(p) for p in out.split() if p.isdigit()] if code == 0 else []


def unsupported_reason():
    """None when this process can build clusters; else why not, in a few words."""
    if os.geteuid() != 0:
        return f"needs root to make network namespaces (running as uid {os.geteuid()})"
    for tool in ("ip", "unshare", "hostname"):
        if not shutil.which(tool) and not os.path.exists(f"/usr/sbin/{tool}"):
            return f"needs `{tool}` (apt-get install iproute2 util-linux hostname)"
    probe = f"ts{os.getpid()}-probe"
    try:
        code, out = _sh(["ip", "netns", "add", probe], check=False)
        if code != 0:
            return f"`ip netns add` fails here: {out}"
        for argv in (["ip", "-n", probe, "link", "add", "tsbr", "type", "bridge"],
                     ["ip", "-n", probe, "link", "add", "tsv0", "type", "veth", "peer", "name",
                      "tsv1"]):
            code, out = _sh(argv, check=False)
            if code != 0:
                return f"`ip {' '.join(argv[3:])}` fails in a network namespace: {out}"
        return None
    except HarnessError as e:
        return str(e)
    finally:
        _sh(["ip", "netns", "del", probe], check=False)


def skip_unless_supported(what="the multi-node tests"):
    """Returns when clusters can be built; else prints one line and exits with
    skips.SKIP_CODE, or with 1 in CI (skips.skip)."""
    why = unsupported_reason()
    if why:
        skips.skip(what, why)


def run_test(what, prefix, deadline_s, body, keep_logs, log, errors=()):
    """A multi-node test's frame: skipped where clusters cannot be built (skip_unless_supported);
    body(logs) run within deadline_s (a hang still tears its cluster down, limit_time) with a
    fresh log folder; a HarnessError, AssertionError or one of `errors` ends it as FAILED with
    where its logs are (exit code 1); else PASSED, its logs removed unless kept (0)."""
    skip_unless_supported(what)
    limit_time(deadline_s)
    logs = tempfile.mkdtemp(prefix=prefix)
    ok = False
    try:
        body(logs)
        ok = True
    except (AssertionError, HarnessError, *errors) as e:
        log(f"FAILED: {e}")
    finally:
        limit_time(0)
    if not ok:
        log(f"logs: {logs}")
        return 1
    if not keep_logs:
        shutil.rmtree(logs, ignore_errors=True)
    log("PASSED")
    return 0


def limit_time(seconds):
    """Raises HarnessError in the main thread after `seconds` (SIGALRM), so that a test that
    hangs still tears its cluster down before ctest's TIMEOUT kills it. 0 cancels."""
    def on_alarm(signum, frame):
        raise HarnessError(f"took more than {seconds} s")
    signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(seconds)


def _kill_and_wait(pids, grace_s, log, reap=lambda: None):
    """SIGCONT + SIGTERM, then SIGKILL after grace_s, to each pid; returns those still alive.
    reap() collects the exit status of those that are our children."""
    pids = [p for p in set(pids) if pid_alive(p)]
    for sig in (signal.SIGCONT, signal.SIGTERM):
        for p in pids:
            try:
                os.kill(p, sig)
            except ProcessLookupError:
                pass
    for wait_s, sig in ((grace_s, signal.SIGKILL), (5.0, None)):
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and any(pid_alive(p) for p in pids):
            reap()
            time.sleep(0.02)
        left = [p for p in pids if pid_alive(p)]
        if sig is None or not left:
            return left
        for p in left:
            log(f"pid {p} still runs {grace_s:.0f} s after SIGTERM: SIGKILL")
            try:
                os.kill(p, sig)
            except ProcessLookupError:
                pass
    return []


def _registry_path(prefix):
    return os.path.join(REGISTRY, prefix + ".json")


def _pid_namespace(pid="self"):
    """The PID namespace of pid ("pid:[4026531836]"), or None when it cannot be read."""
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None


def _in_root_pid_namespace():
    """Whether this process sees every process of the machine: it is in the kernel's first PID
    namespace, whose number is fixed (PROC_PID_INIT_INO). (NSpid cannot tell: under
    `unshare -pf --mount-proc` it shows one pid, the new /proc's.)"""
    return _pid_namespace() in (None, f"pid:[{0xEFFFFFFC}]")


def _owner_gone(prefix, pid, own_prefix=None):
    """True when the run `prefix` (made by pid) has no live maker. A run made in another PID
    namespace (a test run under `unshare -pf`, or a cluster.py cluster seen from such a test) is
    judged by whether a process of that namespace is left, where this process sees them all; a
    process in a PID namespace of its own sees none of them, and clears only the run whose name
    it takes (`own_prefix`: an earlier test's, as pid 1 too)."""
    try:
        with open(_registry_path(prefix)) as f:
            entry = json.load(f)
        owner, started = int(entry.get("owner_pid", pid)), entry.get("owner_start")
        pidns = entry.get("owner_pidns")
    except (OSError, ValueError):
        owner, started, pidns = pid, None, None
    if pidns is not None and pidns != _pid_namespace():
        if not _in_root_pid_namespace():
            return prefix == own_prefix
        return not any(_pid_namespace(p) == pidns for p in os.listdir("/proc") if p.isdigit())
    now = _proc_start_time(owner)
    return now is None or (started is not None and now != started)


def cleanup_stale(log=print, own_prefix=None):
    """Removes the namespaces (and the processes in them) of earlier runs whose maker is gone
    (`own_prefix`: the name of the run about to be made; see _owner_gone).

    Only names of this harness's form (`ts<pid>-sw`, `-n<k>`, `-probe`) are considered; a run whose
    maker lives (another test running in parallel, a cluster.py cluster) is never touched.
    Returns the namespaces removed."""
    stale = {}
    for ns in list_namespaces():
        m = NAME_RE.match(ns)
        if m and _owner_gone(f"ts{m.group(1)}", int(m.group(1)), own_prefix):
            stale.setdefault(f"ts{m.group(1)}", []).append(ns)
    removed = []
    for prefix, names in sorted(stale.items()):
        pids = [p for ns in names for p in namespace_pids(ns)]
        log(f"removing stale run {prefix} (its maker is gone): namespaces {', '.join(names)}"
            + (f"; killing pids {', '.join(map(str, sorted(pids)))}" if pids else ""))
        _kill_and_wait(pids, 1.0, log)
        for ns in sorted(names, key=lambda n: n.endswith("-sw")):  # the switch last
            if _sh(["ip", "netns", "del", ns], check=False)[0] == 0:
                removed.append(ns)
        try:
            os.unlink(_registry_path(prefix))
        except OSError:
            pass
    if os.path.isdir(REGISTRY):
        live = {f"ts{m.group(1)}" for m in map(NAME_RE.match, list_namespaces()) if m}
        for f in os.listdir(REGISTRY):
            m = re.match(r"^ts(\d+)\.json$", f)
            if m and f"ts{m.group(1)}" not in live and _owner_gone(f"ts{m.group(1)}",
                                                                    int(m.group(1))):
                try:
                    os.unlink(os.path.join(REGISTRY, f))
                except OSError:
                    pass
    return removed


_libc_handle = []


def _libc():
    if not _libc_handle:
        _libc_handle.append(ctypes.CDLL(None, use_errno=True))
    return _libc_handle[0]


def _pdeathsig_setter():
    """A function for the child to call before exec: SIGKILL when the thread that started it
    (the main thread) ends. libc is resolved here, in the parent, not after the fork."""
    prctl = _libc().prctl
    return lambda: prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


class Proc:
    """A process started in a node: pid (the program's own), node, name, argv, log path. A Proc
    read back from a state file (no popen) is alive only while its pid has the same start time,
    so a reused pid is never taken for it."""

    def __init__(self, node, name, argv, log_path, popen=None, pid=None, start=None):
        self.node, self.name, self.argv, self.log_path = node, name, argv, log_path
        self.popen = popen
        self.pid = popen.pid if popen else pid
        self.start = start if start is not None else _proc_start_time(self.pid)

    def alive(self):
        if self.popen is not None:
            return self.popen.poll() is None and pid_alive(self.pid)
        return pid_alive(self.pid) and _proc_start_time(self.pid) == self.start

    @property
    def returncode(self):
        return self.popen.poll() if self.popen is not None else None

    def wait(self, timeout):
        """Waits until the process exits; returns its exit code (None when not our child)."""
        deadline = time.monotonic() + timeout
        while self.alive():
            if time.monotonic() > deadline:
                raise HarnessError(f"{self.name} (pid {self.pid}) on {self.node} still runs "
                                   f"after {timeout:.0f} s")
            time.sleep(0.05)
        return self.returncode

    def tail(self, n=15):
        """The last n lines of its log."""
        return processes.tail(self.log_path, n)

    def __repr__(self):
        return f"<{self.name} pid {self.pid} on {self.node}>"


class Cluster(nodes.Nodes):
    """N nodes as network namespaces on one bridge; see the module's comment. The nodes.Nodes
    a training.TrainingCluster runs on in the multi-node tests (each node its own network).

    Not thread-safe: one thread drives it (other threads may call http_get, http_json and
    reachable, which touch no state). Nodes are named n1..nN and may be given as 1..N."""

    own_networks = True

    def __init__(self, nodes=3, log_dir=None, subnet=None, grace_s=3.0, log=None,
                 host_sys=False, _attach=None):
        # host_sys: the nodes' processes see this machine's /sys, its cgroups included, as a
        # real node's sidecar sees its own; `ip netns exec` mounts a /sys of the namespace's own,
        # without /sys/fs/cgroup. Off by default: the suites written before it keep their nodes.
        self.host_sys = host_sys
        self.log = log or (lambda msg: print(f"[netns {time.strftime('%H:%M:%S')}] {msg}",
                                             file=sys.stderr, flush=True))
        self.grace_s = grace_s
        self.procs = []
        self.cuts = set()  # (from, to, how): from's packets to `to` are cut.
        self.links_down = {}  # node -> "node" | "switch"
        self.stopped = set()  # pids we SIGSTOPped
        self._destroyed = False
        self._prev_handlers = {}
        if _attach is not None:
            self._load(_attach)
            self.owner, self._own_log_dir = False, False
            return
        if nodes < 1 or nodes > 250:
            raise HarnessError(f"nodes must be 1..250, not {nodes}")
        self.owner = True
        self.prefix = f"ts{os.getpid()}"
        self.subnet = subnet or f"10.213.{os.getpid() % 250 + 1}"
        self.nodes = [f"n{k}" for k in range(1, nodes + 1)]
        self.switch_ns = f"{self.prefix}-sw"
        # A folder made here goes when the `with` block ends without an error; one given stays.
        self._own_log_dir = log_dir is None
        self.log_dir = log_dir or tempfile.mkdtemp(prefix=f"{self.prefix}-logs-")
        os.makedirs(self.log_dir, exist_ok=True)
        self.namespaces = []  # Made so far, in order.
        self._install_teardown()
        try:
            self._create()
        except BaseException:
            self.destroy(check=False)
            raise

    # ------------------------------------------------------------ building

    def _create(self):
        if os.geteuid() != 0:
            raise HarnessError(f"cannot make network namespaces: not root (uid {os.geteuid()})")
        cleanup_stale(self.log, self.prefix)
        self._register()
        self._add_ns(self.switch_ns)
        self._ip(self.switch_ns, "link", "add", BRIDGE, "type", "bridge")
        self._ip(self.switch_ns, "link", "set", BRIDGE, "up")
        for k, node in enumerate(self.nodes, start=1):
            ns = self.namespace(node)
            self._add_ns(ns)
            self._ip(self.switch_ns, "link", "add", self._port(node), "type", "veth", "peer",
                     "name", NODE_DEV, "netns", ns)
            self._ip(self.switch_ns, "link", "set", self._port(node), "master", BRIDGE, "up")
            self._ip(ns, "addr", "add", f"{self.subnet}.{k}/24", "dev", NODE_DEV)
            self._ip(ns, "link", "set", NODE_DEV, "up")
            self._ip(ns, "link", "set", "lo", "up")
        self.log(f"{len(self.nodes)} nodes on {self.subnet}.0/24: " + ", ".join(
            f"{n} {self.address(n)} ({self.namespace(n)})" for n in self.nodes)
            + f"; logs in {self.log_dir}")

    def _add_ns(self, ns):
        _sh(["ip", "netns", "add", ns])
        self.namespaces.append(ns)
        self._register()

    def _register(self):
        os.makedirs(REGISTRY, exist_ok=True)
        entry = {"prefix": self.prefix, "owner_pid": os.getpid(),
                 "owner_start": _proc_start_time(os.getpid()),
                 "owner_pidns": _pid_namespace(), "namespaces": self.namespaces,
                 "created": time.time(), "cmdline": " ".join(sys.argv)}
        tmp = _registry_path(self.prefix) + ".tmp"
        with open(tmp, "w") as f:
            json.dump(entry, f)
        os.replace(tmp, _registry_path(self.prefix))

    def _install_teardown(self):
        atexit.register(self._at_exit)
        if threading.current_thread() is not threading.main_thread():
            return

        def on_signal(signum, frame):
            raise SystemExit(128 + signum)
        for sig in (signal.SIGTERM, signal.SIGHUP):
            if signal.getsignal(sig) in (signal.SIG_DFL, None):
                self._prev_handlers[sig] = signal.signal(sig, on_signal)

    def _at_exit(self):
        if not self._destroyed and self.owner:
            self.destroy(check=False)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        # A failed check at teardown fails the test, unless it already failed for another reason.
        self.destroy(check=exc_type is None)
        if self._own_log_dir and exc_type is None:
            shutil.rmtree(self.log_dir, ignore_errors=True)
        elif exc_type is not None:
            self.log(f"logs of every process kept in {self.log_dir}")
        return False

    # ------------------------------------------------------------ state (cluster.py)

    def to_state(self):
        """What another process needs to act on this cluster (see attach)."""
        return {"prefix": self.prefix, "subnet": self.subnet, "nodes": self.nodes,
                "switch_ns": self.switch_ns, "namespaces": self.namespaces,
                "log_dir": self.log_dir,
                "addresses": {n: self.address(n) for n in self.nodes},
                "cuts": sorted(list(c) for c in self.cuts), "links_down": self.links_down,
                "stopped": sorted(p for p in self.stopped if pid_alive(p)),
                "procs": [{"node": p.node, "name": p.name, "pid": p.pid, "start": p.start,
                           "argv": p.argv, "log": p.log_path} for p in self.procs]}

    def _load(self, st):
        self.prefix, self.subnet, self.nodes = st["prefix"], st["subnet"], st["nodes"]
        self.switch_ns, self.namespaces = st["switch_ns"], st["namespaces"]
        self.log_dir = st["log_dir"]
        self.cuts = {tuple(c) for c in st.get("cuts", [])}
        self.links_down = dict(st.get("links_down", {}))
        self.stopped = set(st.get("stopped", []))
        self.procs = [Proc(p["node"], p["name"], p["argv"], p["log"], pid=p["pid"],
                           start=p.get("start")) for p in st.get("procs", [])]

    @classmethod
    def attach(cls, state, log=None):
        """A Cluster made by another process, from its to_state(). It does not tear down at
        exit; destroy() still removes everything when called."""
        return cls(log=log, _attach=state)

    # ------------------------------------------------------------ naming

    def namespace(self, node):
        """The network namespace of the node, e.g. ts1234-n1."""
        return f"{self.prefix}-{self.node(node)}"

    def address(self, node):
        """The node's address, e.g. 10.213.7.1."""
        return f"{self.subnet}.{self.index(node)}"

    def hostname(self, node):
        """The host name processes started in the node see."""
        return self.node(node)

    def _port(self, node):
        return f"p{self.index(node)}"  # the switch's end of the node's veth

    def _ip(self, ns, *args, check=True):
        return _sh(["ip", "-n", ns, *args], check=check)

    # ------------------------------------------------------------ processes

    def exec_argv(self, node, argv):
        """argv wrapped to run in the node: its network namespace and host name. The wrappers
        exec, so the process keeps the wrapper's pid."""
        enter = (["nsenter", f"--net=/run/netns/{self.namespace(node)}"] if self.host_sys
                 else ["ip", "netns", "exec", self.namespace(node)])
        return [*enter, "unshare", "--uts", "--",
                "sh", "-c", 'hostname "$0" && exec "$@"', self.hostname(node), *map(str, argv)]

    def spawn(self, node, argv, env=None, log=None, name=None):
        """Starts argv in the node, stdout and stderr appended to log (default: a file in
        log_dir named after the process); returns its Proc. env is added to this process's
        environment. The process dies with this one's main thread when started from it."""
        node = self.node(node)
        name = name or os.path.basename(str(argv[0]))
        log = log or os.path.join(self.log_dir, f"{node}-{name.replace(':', '-')}.log")
        full_env = dict(os.environ)
        full_env.update({k: str(v) for k, v in (env or {}).items()})
        with open(log, "ab") as f:
            f.write(f"\n=== {time.strftime('%H:%M:%S')} on {node} ({self.address(node)}): "
                    f"{' '.join(map(str, argv))}\n".encode())
            f.flush()
            main = threading.current_thread() is threading.main_thread() and self.owner
            popen = subprocess.Popen(self.exec_argv(node, argv), stdout=f,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     env=full_env, start_new_session=True,
                                     preexec_fn=_pdeathsig_setter() if main else None)
        p = Proc(node, name, list(map(str, argv)), log, popen)
        self.procs.append(p)
        return p

    def _ours(self, pid):
        # A child not yet reaped keeps its pid; anything else must be in our namespaces now.
        return any(p.popen is not None and p.popen.poll() is None and p.pid == pid
                   for p in self.procs) or pid in self.pids()

    def signal(self, proc, sig):
        """Sends sig to a process of this cluster (a Proc or a pid); HarnessError for any other
        pid. SIGSTOPped processes get SIGCONT before teardown."""
        pid = proc.pid if isinstance(proc, Proc) else int(proc)
        gone = [p for p in self.procs if p.pid == pid and not p.alive()]
        if gone:
            raise HarnessError(f"{gone[0].name} (pid {pid}) on {gone[0].node} has exited")
        if not self._ours(pid):
            raise HarnessError(f"pid {pid} is not a process of this cluster ({self.prefix})")
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            raise HarnessError(f"pid {pid} is gone") from None
        if sig == signal.SIGSTOP:
            self.stopped.add(pid)
        elif sig in (signal.SIGCONT, signal.SIGKILL):
            self.stopped.discard(pid)

    def pids(self):
        """Every process now in one of our namespaces."""
        return sorted({p for ns in self.namespaces for p in namespace_pids(ns)})

    # ------------------------------------------------------------ talking from inside a node

    def in_node(self, node, fn, timeout=10):
        """Calls fn() on a thread whose network namespace is the node's (sockets it makes are
        the node's) and returns its result or raises its exception."""
        path = os.path.join(NETNS_DIR, self.namespace(node))
        out = {}

        def body():
            try:
                fd = os.open(path, os.O_RDONLY)
                try:
                    if _libc().setns(fd, _CLONE_NEWNET) != 0:
                        e = ctypes.get_errno()
                        raise OSError(e, f"setns({path}): {os.strerror(e)}")
                finally:
                    os.close(fd)
                out["value"] = fn()
            except BaseException as e:  # noqa: BLE001 (handed to the caller)
                out["error"] = e
        t = threading.Thread(target=body, name=f"in-{self.node(node)}", daemon=True)
        t.start()
        t.join(timeout)
        if t.is_alive():
            raise HarnessError(f"call in {self.node(node)} did not finish in {timeout} s")
        if "error" in out:
            raise out["error"]
        return out["value"]

    def http_get(self, node, url, timeout=2.0, context=None):
        """GET url from inside the node (no proxy); returns (status, body bytes). HTTP errors
        return their status; network errors raise OSError (urllib.error.URLError). context:
        an ssl.SSLContext for https:// URLs (CA, client certificate)."""
        return self.in_node(node, lambda: web.get(url, timeout, context), timeout + 5)

    def reachable(self, src, dst, port, timeout=1.0):
        """True when a TCP connection from node src to node dst's port succeeds within timeout."""
        addr = (self.address(dst), port)

        def connect():
            try:
                with socket.create_connection(addr, timeout=timeout):
                    return True
            except OSError:
                return False
        return self.in_node(src, connect, timeout + 5)

    def delivers(self, src, dst, timeout=1.0):
        """True when a UDP datagram sent from node src reaches node dst within timeout: one
        direction only, so it shows an asymmetric cut (TCP needs both directions)."""
        ready, out = threading.Event(), {}

        def receive():
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                s.bind((self.address(dst), 0))
                s.settimeout(timeout)
                out["port"] = s.getsockname()[1]
                ready.set()
                try:
                    return s.recv(64) == b"trainscope-probe"
                except OSError:
                    return False

        def send():
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                try:
                    s.sendto(b"trainscope-probe", (self.address(dst), out["port"]))
                except OSError:
                    pass  # e.g. EINVAL through a blackhole route: the receiver says no

        receiver = {}
        t = threading.Thread(target=lambda: receiver.update(
            ok=self.in_node(dst, receive, timeout + 5)), daemon=True)
        t.start()
        if not ready.wait(timeout + 5):
            raise HarnessError(f"could not listen for UDP in {self.node(dst)}")
        self.in_node(src, send, 5)
        t.join(timeout + 6)
        return bool(receiver.get("ok"))

    # ------------------------------------------------------------ faults

    def cut(self, a, b, how="route"):
        """Cuts a and b apart, both directions. how="route": `ip route add blackhole` in each
        (the nodes' kernels refuse to send: new connections fail at once with EINVAL, open ones
        go silent); how="drop": the switch drops their packets (nftables; both kernels send,
        nothing arrives, as in a real partition)."""
        self._cut(a, b, how)
        self._cut(b, a, how)

    def cut_one_way(self, a, b, how="route"):
        """Cuts a's packets to b only (an asymmetric cut); b's packets still reach a."""
        self._cut(a, b, how)

    def heal(self, a, b):
        """Undoes every cut between a and b, either direction and either way."""
        a, b = self.node(a), self.node(b)
        for c in sorted(self.cuts):
            if {c[0], c[1]} == {a, b}:
                if c[2] == "route":
                    self._ip(self.namespace(c[0]), "route", "del", "blackhole",
                             f"{self.address(c[1])}/32", check=False)
                self.cuts.discard(c)
                if c[2] == "drop":
                    self._apply_drops()
        self.log(f"healed {a} <-> {b}")

    def _cut(self, a, b, how):
        a, b = self.node(a), self.node(b)
        if a == b:
            raise HarnessError(f"cannot cut {a} from itself")
        if how not in ("route", "drop"):
            raise HarnessError(f"unknown cut {how!r}: route or drop")
        if (a, b, how) in self.cuts:
            return
        if how == "route":
            self._ip(self.namespace(a), "route", "add", "blackhole", f"{self.address(b)}/32")
            self.cuts.add((a, b, how))
        else:
            self.cuts.add((a, b, how))
            try:
                self._apply_drops()
            except HarnessError:
                self.cuts.discard((a, b, how))
                raise
        self.log(f"cut {a} ({self.address(a)}) -> {b} ({self.address(b)}) [{how}]")

    def _apply_drops(self):
        if not shutil.which("nft") and not os.path.exists("/usr/sbin/nft"):
            raise HarnessError("cut(how=\"drop\") needs nft (apt-get install nftables)")
        rules = "".join(f"    ip saddr {self.address(a)} ip daddr {self.address(b)} drop\n"
                        for a, b, how in sorted(self.cuts) if how == "drop")
        script = (f"table bridge {NFT_TABLE}\ndelete table bridge {NFT_TABLE}\n"
                  f"table bridge {NFT_TABLE} {{\n  chain forward {{\n"
                  f"    type filter hook forward priority 0; policy accept;\n{rules}  }}\n}}\n")
        _sh(["ip", "netns", "exec", self.switch_ns, "nft", "-f", "-"], input=script)

    def link_down(self, node, at="node"):
        """Takes the node's link down: at="node" its eth0 (`ip link set eth0 down`), at="switch"
        the switch's port (the node sees its carrier go, as when a cable is pulled)."""
        node = self.node(node)
        if at == "node":
            self._ip(self.namespace(node), "link", "set", NODE_DEV, "down")
        elif at == "switch":
            self._ip(self.switch_ns, "link", "set", self._port(node), "down")
        else:
            raise HarnessError(f"link_down at {at!r}: node or switch")
        self.links_down[node] = at
        self.log(f"link of {node} ({self.address(node)}) down at the {at}")

    def link_up(self, node):
        """Brings the node's link back up (both ends)."""
        node = self.node(node)
        self._ip(self.switch_ns, "link", "set", self._port(node), "up")
        self._ip(self.namespace(node), "link", "set", NODE_DEV, "up")
        self.links_down.pop(node, None)
        self.log(f"link of {node} ({self.address(node)}) up")

    # ------------------------------------------------------------ teardown

    def destroy(self, check=True):
        """Kills every process started and every process in our namespaces, by pid, deletes
        every namespace, and checks that none is left (HarnessError when check and something
        is). Safe to call twice; SIGINT/SIGTERM wait until it is done."""
        if self._destroyed:
            return
        self._destroyed = True
        main = threading.current_thread() is threading.main_thread()
        if main:
            old_mask = signal.pthread_sigmask(
                signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM, signal.SIGHUP})
        try:
            left = self._teardown()
        finally:
            if main:
                signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
                for sig, prev in self._prev_handlers.items():
                    signal.signal(sig, prev)
        if left and check:
            raise HarnessError("teardown left: " + "; ".join(left))

    def _reap(self):
        for p in self.procs:
            if p.popen is not None:
                p.popen.poll()

    def _teardown(self):
        ours = [p.pid for p in self.procs if p.alive()] + self.pids()
        if ours:
            self.log(f"stopping pids {', '.join(map(str, sorted(set(ours))))}")
        alive = _kill_and_wait(ours, self.grace_s, self.log, self._reap)
        for _ in range(3):  # anything started meanwhile in our namespaces
            more = self.pids()
            if not more:
                break
            alive += _kill_and_wait(more, 0.5, self.log, self._reap)
        for p in self.procs:
            if p.popen is not None:
                try:
                    p.popen.wait(1)
                except subprocess.TimeoutExpired:
                    pass
        failed = []
        for ns in sorted(self.namespaces, key=lambda n: n == self.switch_ns):
            code, out = _sh(["ip", "netns", "del", ns], check=False)
            if code != 0 and os.path.exists(os.path.join(NETNS_DIR, ns)):
                failed.append(f"{ns} ({out})")
        left = []
        names = set(list_namespaces())
        still = [ns for ns in self.namespaces if ns in names]
        if still or failed:
            left.append(f"namespaces {', '.join(still) or ', '.join(failed)}")
        pids = sorted({p for p in alive + [p.pid for p in self.procs] if pid_alive(p)})
        if pids:
            left.append(f"processes {', '.join(map(str, pids))}")
        if not left:
            try:
                os.unlink(_registry_path(self.prefix))
            except OSError:
                pass
            self.log(f"removed {len(self.namespaces)} namespaces of {self.prefix}; "
                     "no process left")
        else:
            self.log("teardown left " + "; ".join(left))
        return left


def main(argv):
    """python3 -m trainscope_testing.netns check | list | cleanup: for people and scripts/test."""
    cmd = argv[1] if len(argv) > 1 else ""
    if cmd == "check":
        why = unsupported_reason()
        fate = "will FAIL (CI=true)" if skips.in_ci() else "will be SKIPPED"
        print("multi-node tests: " + (f"{fate}: {why}" if why else
                                      "can run (root, network namespaces, veth, bridge)"))
        return 0
    if cmd == "list":
        runs = {}
        for ns in list_namespaces():
            m = NAME_RE.match(ns)
            if m:
                runs.setdefault(f"ts{m.group(1)}", []).append(ns)
        for prefix, names in sorted(runs.items()):
            try:
                with open(_registry_path(prefix)) as f:
                    entry = json.load(f)
            except (OSError, ValueError):
                entry = {"owner_pid": int(prefix[2:])}
            gone = _owner_gone(prefix, int(prefix[2:]))
            print(f"{prefix}: owner pid {entry.get('owner_pid')} "
                  f"{'GONE (stale)' if gone else 'alive'}; {', '.join(sorted(names))}; "
                  f"{sum(len(namespace_pids(n)) for n in names)} processes"
                  + (f"; {entry['cmdline']}" if entry.get("cmdline") else ""))
        if not runs:
            print("no namespaces of this harness")
        return 0
    if cmd == "cleanup":
        removed = cleanup_stale()
        print(f"removed {len(removed)} stale namespaces" if removed else "nothing stale")
        return 0
    print("usage: python3 -m trainscope_testing.netns check | list | cleanup", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
