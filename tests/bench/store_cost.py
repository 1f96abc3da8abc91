#!/usr/bin/env python3
"""What the sidecar's incident store (--state_dir) costs: CPU, memory and disk, with it on
against off, measured in one run on one cluster.

Two ps and two workers (linear_regression) train on loopback (trainscope_testing's
TrainingCluster on nodes.Loopback); two sidecars watch the same four tasks side by side, each on
ports of its own: one with --state_dir (a temporary folder, SQLite in WAL mode), one without.
The tasks run with --disable_tracing, so that neither sidecar receives spans the other does not
(a task sends its spans to one OTLP endpoint), and save a checkpoint every 2 s (a restarted ps
restores from it); snapshots of stuck tasks stay on in both (when both take one of a task at the
same moment, one may miss its stacks, ptrace allowing one tracer: the incident lines say so).

quiet:    --quiet_s seconds with nothing wrong, sampled every second. Per sidecar: CPU seconds
          (user + system, /proc/PID/stat), RSS (VmRSS: median and peak of the samples; VmHWM),
          and what it wrote (/proc/PID/io: write_bytes, the bytes it sent towards the disk,
          counted once per page it dirtied; wchar, the bytes it passed to write calls), and the
          growth of trainscope-state.db and its -wal. CPU on/off is the window's; the window
          is also cut in --slice_s slices, and the median of their ratios shown (CPU time
          comes in 10 ms ticks: keep slices long). The bytes per hour are the window's,
          extrapolated.
incident: --incidents times, ps:1 killed (kill -9) for --down_s seconds and started again,
          then waited for until both sidecars hold the incident closed (and --settle_s more, so
          that the close is written). The bytes written beyond each sidecar's quiet rate; the
          store's share is store on's extra less store off's (its log); the incident's row size
          in the store.

  scripts/python tests/bench/store_cost.py --bin build/bin [--quiet_s 60] [--incidents 3]

Prints a table of figures measured in this run. Never asserts a timing: exits 0 when it ran,
1 when something failed to run, 77 (one line) when a binary is missing. Standard library only.
"""

import argparse
import os
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time

from trainscope_testing import nodes, skips, training
from trainscope_testing.ports import free_port
from trainscope_testing.waiting import HarnessError, wait_for

STORE_FILE = "trainscope-state.db"
TASKS = [("ps:0", 1), ("ps:1", 1), ("worker:0", 1), ("worker:1", 1)]
KILLED = "ps:1"


def sample(pid):
    """CPU seconds (user + system), VmRSS and VmHWM (bytes), write_bytes and wchar of a process
    and all its threads."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    out = {"cpu": (int(fields[11]) + int(fields[12])) / tick}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(value.split()[0]) * 1024
    with open(f"/proc/{pid}/io") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("write_bytes", "wchar"):
                out[key] = int(value)
    return out


def store_bytes(state_dir):
    """Sizes of the store's files: {"db": .., "wal": ..} (0 for a file not there)."""
    sizes = {}
    for key, suffix in (("db", ""), ("wal", "-wal")):
        try:
            sizes[key] = os.path.getsize(os.path.join(state_dir, STORE_FILE + suffix))
        except OSError:
            sizes[key] = 0
    return sizes


def incident_row_bytes(state_dir):
    """{incident id: bytes of its stored row} read from the store (read-only; {} when it
    cannot be read while the sidecar writes)."""
    try:
        db = sqlite3.connect(f"file:{os.path.join(state_dir, STORE_FILE)}?mode=ro", uri=True,
                             timeout=2)
        try:
            return {i: b for i, b in db.execute("SELECT id, bytes FROM incidents")}
        finally:
            db.close()
    except sqlite3.Error:
        return {}


def with_ports(argv, http_port, grpc_port):
    """argv with --http_port and --grpc_port given these values."""
    out = list(argv)
    for flag, value in (("--http_port", http_port), ("--grpc_port", grpc_port)):
        out[out.index(flag) + 1] = str(value)
    return out


class Sidecars:
    """The two sidecars on node n1 of a TrainingCluster: "off" is the harness's own (its
    sidecar:n1), "on" a second one with --state_dir on ports of its own."""

    def __init__(self, t, state_dir):
        self.t, self.state_dir = t, state_dir
        self.http = {"off": t.http_ports["n1"], "on": free_port()}
        argv = with_ports(t.sidecar_argv("n1"), self.http["on"], free_port())
        self.procs = {"off": t.start_sidecar("n1"),
                      "on": t.c.spawn("n1", [*argv, "--state_dir", state_dir],
                                      name="sidecar-store")}

    def url(self, which, path):
        return f"http://127.0.0.1:{self.http[which]}{path}"

    def check_alive(self):
        for which, p in self.procs.items():
            if not p.alive():
                raise HarnessError(f"the sidecar with the store {which} exited ({p.returncode});"
                                   f" its log {p.log_path}:\n{p.tail(6)}")

    def wait_healthy(self):
        for which in self.procs:
            def healthy(which=which):
                self.check_alive()
                return self.t.c.http_get("n1", self.url(which, "/healthz"))[0] == 200
            wait_for(f"the sidecar with the store {which}: /healthz", healthy, 30)

    def incidents(self, which):
        return self.t.c.http_json("n1", self.url(which, "/api/v1/incidents"))["incidents"]

    def incident(self, which, incident_id):
        return self.t.c.http_json("n1", self.url(which, f"/api/v1/incidents/{incident_id}"))

    def sample(self):
        self.check_alive()
        return {which: sample(p.pid) for which, p in self.procs.items()}


def settled(sidecars, count):
    """True when both sidecars hold at least `count` incidents and none is open."""
    for which in ("off", "on"):
        held = sidecars.incidents(which)
        if len(held) < count or any(i.get("open") for i in held):
            return False
    return True


def evidence(incident):
    """"N snapshots, M with stacks" of an incident in full (its evidence): two sidecars
    capturing one task at once would keep one of them from its stacks (ptrace)."""
    snaps = [e.get("snapshot", {}) for e in incident.get("evidence") or []
             if e.get("kind") == "snapshot"]
    with_stacks = sum(1 for s in snaps if s.get("stacks"))
    return f"{len(snaps)} snapshot(s), {with_stacks} with stacks"


def quiet_window(sidecars, quiet_s, slice_s, log):
    """Samples both sidecars every second for quiet_s s; returns the samples [(t, {which:
    sample})] and the store's file sizes at the start and end."""
    files0 = store_bytes(sidecars.state_dir)
    samples = [(time.monotonic(), sidecars.sample())]
    start = samples[0][0]
    next_log = slice_s
    while samples[-1][0] - start < quiet_s:
        time.sleep(max(0.0, start + len(samples) - time.monotonic()))
        samples.append((time.monotonic(), sidecars.sample()))
        if samples[-1][0] - start >= next_log:
            log(f"quiet: {next_log:.0f}/{quiet_s:g} s")
            next_log += slice_s
    return samples, files0, store_bytes(sidecars.state_dir)


def mib(b):
    return b / (1 << 20)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default="build/bin")
    ap.add_argument("--quiet_s", type=float, default=60, help="the quiet window, seconds")
    ap.add_argument("--slice_s", type=float, default=20,
                    help="the quiet window's slices for the CPU ratio, seconds")
    ap.add_argument("--warmup_s", type=float, default=15,
                    help="after the workers train, before the quiet window")
    ap.add_argument("--incidents", type=int, default=3)
    ap.add_argument("--down_s", type=float, default=5, help="how long ps:1 stays dead")
    ap.add_argument("--settle_s", type=float, default=5,
                    help="after both sidecars hold an incident closed")
    ap.add_argument("--keep", action="store_true", help="keep the logs and the store")
    args = ap.parse_args()

    for b in ("linear_regression", "trainscope-sidecar", "trainscopectl"):
        if not os.access(os.path.join(args.bin, b), os.X_OK):
            skips.skip("store_cost", f"{os.path.join(args.bin, b)} is missing: build it first")
    if not os.path.exists("/proc/self/io"):
        skips.skip("store_cost", "/proc/PID/io is missing (a kernel without task I/O accounting)")

    def log(msg):
        print(f"[store_cost {time.strftime('%H:%M:%S')}] {msg}", flush=True)

    work = tempfile.mkdtemp(prefix="store_cost.")
    state_dir = os.path.join(work, "state")
    ok = False
    try:
        with nodes.Loopback(1, os.path.join(work, "logs"), log=log) as n:
            t = training.TrainingCluster(n, args.bin, training.Layout(TASKS),
                                         cluster_name="storecost",
                                         task_args=["--disable_tracing", "--checkpoint_dir",
                                                    os.path.join(work, "checkpoints"),
                                                    "--checkpoint_every_s", "2"])
            t.prepare()
            sidecars = Sidecars(t, state_dir)
            sidecars.wait_healthy()
            for task in sorted(t.task_node, key=lambda x: not x.startswith("ps:")):
                t.start_task(task)
            t.wait_training(timeout=60)
            log(f"training; warming up {args.warmup_s:g} s")
            time.sleep(args.warmup_s)
            wait_for("no open incident on either sidecar", lambda: settled(sidecars, 0), 60)

            samples, files0, files1 = quiet_window(sidecars, args.quiet_s, args.slice_s, log)
            (t0, first), (t1, last) = samples[0], samples[-1]
            window = t1 - t0
            quiet = {}
            for w in ("off", "on"):
                rss = [s[w]["VmRSS"] for _, s in samples]
                quiet[w] = {
                    "cpu": last[w]["cpu"] - first[w]["cpu"],
                    "rss_median": statistics.median(rss), "rss_peak": max(rss),
                    "hwm": last[w]["VmHWM"],
                    "write_bytes": last[w]["write_bytes"] - first[w]["write_bytes"],
                    "wchar": last[w]["wchar"] - first[w]["wchar"]}
            # Slices of slice_s seconds: each slice's CPU on / off.
            per_slice = max(1, int(round(args.slice_s)))
            cpu_ratios = []
            for i in range(0, len(samples) - per_slice, per_slice):
                a, b = samples[i][1], samples[i + per_slice][1]
                off = b["off"]["cpu"] - a["off"]["cpu"]
                if off > 0:
                    cpu_ratios.append((b["on"]["cpu"] - a["on"]["cpu"]) / off)
            rss_ratios = [s["on"]["VmRSS"] / s["off"]["VmRSS"] for _, s in samples]

            per_incident = []
            for k in range(1, args.incidents + 1):
                before, m0 = sidecars.sample(), time.monotonic()
                t.kill(KILLED)
                log(f"incident {k}: {KILLED} killed (kill -9) for {args.down_s:g} s")
                time.sleep(args.down_s)
                t.start_task(KILLED)
                wait_for(f"incident {k} closed on both sidecars",
                         lambda k=k: settled(sidecars, k), 120)
                time.sleep(args.settle_s)
                after, m1 = sidecars.sample(), time.monotonic()
                row = {"seconds": m1 - m0}
                for w in ("off", "on"):
                    for key in ("write_bytes", "wchar"):
                        rate = quiet[w][key] / window
                        row[(w, key)] = after[w][key] - before[w][key] - rate * (m1 - m0)
                    row[(w, "cpu")] = (after[w]["cpu"] - before[w]["cpu"]
                                       - quiet[w]["cpu"] / window * (m1 - m0))
                newest = sidecars.incidents("on")[0]
                row["summary"] = newest.get("summary", "")
                row["row_bytes"] = incident_row_bytes(state_dir).get(newest["id"])
                row["evidence"] = {w: evidence(sidecars.incident(w, newest["id"]))
                                   for w in ("off", "on")}
                per_incident.append(row)
                log(f"incident {k}: {row['summary']!r}; {row['seconds']:.1f} s; "
                    f"store row {row['row_bytes']} bytes; evidence off: {row['evidence']['off']}"
                    f", on: {row['evidence']['on']}")
            files_end = store_bytes(state_dir)
            n.destroy()
        ok = True
    except HarnessError as e:
        print(f"store_cost: {e}", file=sys.stderr)
        return 1
    finally:
        if args.keep or not ok:
            print(f"logs and store kept in {work}", flush=True)
        else:
            shutil.rmtree(work, ignore_errors=True)

    hour = 3600 / window
    on, off = quiet["on"], quiet["off"]
    print(f"\nquiet cluster, {window:.0f} s (2 ps, 2 workers on loopback; both sidecars watch "
          f"them at once; {len(cpu_ratios)} slices of {per_slice} s):")
    print(f"  {'':34s} {'store off':>12s} {'store on':>12s} {'on/off':>8s}")

    def line(what, a, b, fmt, ratio=None):
        r = f"{ratio if ratio is not None else (b / a if a else float('nan')):8.3f}"
        print(f"  {what:34s} {fmt(a):>12s} {fmt(b):>12s} {r}")

    line("CPU s in the window", off["cpu"], on["cpu"], lambda v: f"{v:.2f}")
    line("  (% of one core)", 100 * off["cpu"] / window, 100 * on["cpu"] / window,
         lambda v: f"{v:.2f}")
    line("RSS median, MiB", off["rss_median"], on["rss_median"], lambda v: f"{mib(v):.1f}",
         statistics.median(rss_ratios))
    line("RSS peak of samples, MiB", off["rss_peak"], on["rss_peak"], lambda v: f"{mib(v):.1f}")
    line("VmHWM at the end, MiB", off["hwm"], on["hwm"], lambda v: f"{mib(v):.1f}")
    line("write_bytes per hour, MiB", off["write_bytes"] * hour, on["write_bytes"] * hour,
         lambda v: f"{mib(v):.2f}")
    line("wchar per hour, MiB", off["wchar"] * hour, on["wchar"] * hour,
         lambda v: f"{mib(v):.2f}")
    if cpu_ratios:
        print(f"  CPU on/off by slice: median {statistics.median(cpu_ratios):.3f} "
              f"({min(cpu_ratios):.3f}-{max(cpu_ratios):.3f}); RSS median on/off: median of "
              "the samples' ratios")
    store_hour = (on["write_bytes"] - off["write_bytes"]) * hour
    print(f"  the store's disk writes, on less off (its log): {mib(store_hour):.2f} MiB/hour "
          f"({store_hour / 3600 / 1024:.1f} KiB/s), extrapolated from the {window:.0f} s window")
    print(f"  store files: db {files0['db']} -> {files1['db']} bytes, wal {files0['wal']} -> "
          f"{files1['wal']} bytes over the window")

    if per_incident:
        print(f"\nper incident ({KILLED} killed with kill -9 for {args.down_s:g} s, restarted, "
              f"until closed + {args.settle_s:g} s); bytes beyond each sidecar's quiet rate:")
        print(f"  {'#':>2s} {'seconds':>8s} {'wb off':>10s} {'wb on':>10s} {'store wb':>10s} "
              f"{'wchar store':>12s} {'row bytes':>10s} {'CPU s on-off':>13s}")
        store_wb, store_wchar, cpu_extra = [], [], []
        for k, r in enumerate(per_incident, 1):
            wb = r[("on", "write_bytes")] - r[("off", "write_bytes")]
            wc = r[("on", "wchar")] - r[("off", "wchar")]
            cpu = r[("on", "cpu")] - r[("off", "cpu")]
            store_wb.append(wb)
            store_wchar.append(wc)
            cpu_extra.append(cpu)
            print(f"  {k:2d} {r['seconds']:8.1f} {r[('off', 'write_bytes')]:10.0f} "
                  f"{r[('on', 'write_bytes')]:10.0f} {wb:10.0f} {wc:12.0f} "
                  f"{r['row_bytes'] if r['row_bytes'] is not None else '-':>10} {cpu:13.3f}")
        print(f"  median: the store writes {statistics.median(store_wb) / 1024:.1f} KiB "
              f"(write_bytes; {statistics.median(store_wchar) / 1024:.1f} KiB passed to write "
              f"calls) per incident beyond its quiet rate")
        print(f"  store files at the end: db {files_end['db']} bytes, wal {files_end['wal']} "
              "bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
