#!/usr/bin/python3
"""Pages from an HA pair of Alertmanagers: the sidecars post every first-hand alert to both,
the pair deduplicates, and one of them dying loses no page (issue 20, item 5).

Five nodes: ps:0 on n1, worker:0 on n2, worker:1 on n3, a sidecar on each of them, started
with --alertmanager_url naming both Alertmanagers (as Prometheus posts to every Alertmanager it
is given). n4 runs Alertmanager "a" and the webhook receiver, n5 Alertmanager "b"; a and b
gossip with each other (--cluster.listen-address / --cluster.peer, both ways), with the
shipped alertmanager.yml as trainscope_testing.monitoring (tests/py) renders it (group_wait
1 s, group_interval 3 s: it must exceed the peer timeout, see docs/alerts.md) and shorter
cluster intervals (monitoring.argv_alertmanager: peer timeout 1 s, gossip 100 ms, push-pull
5 s). No Prometheus: only the sidecars' first-hand alerts.

  0. both up: n1 and n2 cut apart (ps:0 | worker:0). Each side's sidecar posts its own
     TrainscopeTaskPartitioned, with the link's incident as a label: the webhook gets them in
     ONE notification (grouped by incident), and nothing more for QUIET_S; healed: resolved.
  1. both up: kill -9 worker:1. TrainscopeTaskDead of worker:1 reaches the webhook exactly
     once (nothing more for QUIET_S after it: several peer timeouts and group intervals, and a
     re-post by the sidecars); worker:1 started again: resolved, also exactly once.
  2. the Alertmanager that sent that page killed (kill -9, by pid); then kill -9 worker:0.
     Its TrainscopeTaskDead still reaches the webhook, exactly once, from the other one.

Prints fault-to-webhook seconds for both (figures for docs/alerts.md). Each notification names
its sender (externalURL).

Usage: alertmanager_ha_test.py --bin build/bin [--src .] [--keep_logs]. Exit 0 passed, 1
failed, 77 skipped (no root or no network namespaces; one line says why).
"""

import argparse
import os
import signal
import sys
import time

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))

from trainscope_testing import monitoring, netns, training
from trainscope_testing.logs import logger
from trainscope_testing.waiting import wait_for

log = logger("alertmanager_ha")

DEADLINE_S = 200
NODES = (1, 2, 3)
AMS = {"a": 4, "b": 5}  # name -> node
HOOK_NODE = 4
AM_PORT, CLUSTER_PORT, HOOK_PORT = 9093, 9094, 9095
# Longer than the peer timeout (1 s): with a group_interval shorter than it, the second
# Alertmanager sends a stale "firing" after the first one's "resolved" (a flush of the alert
# still firing, checked against the notification log only after its wait).
GROUP_INTERVAL = "3s"
# After a first delivery, how long nothing more may come: the peer timeout many times over,
# four group intervals, and one re-post by the sidecars (every 10 s).
QUIET_S = 12


class Pair:
    def __init__(self, c, src, mon_dir):
        self.c, self.src, self.dir = c, src, mon_dir
        self.hook_file = os.path.join(mon_dir, "webhook.jsonl")
        self.procs = {}  # name -> Proc

    def url(self, name):
        return f"http://{self.c.address(AMS[name])}:{AM_PORT}"

    def start(self):
        hook = f"{self.c.address(HOOK_NODE)}:{HOOK_PORT}"
        cfg = os.path.join(self.dir, "alertmanager.yml")
        monitoring.render_alertmanager(self.src, cfg, f"http://{hook}/alerts",
                                       group_interval=GROUP_INTERVAL)
        self.c.spawn(HOOK_NODE, [sys.executable, os.path.join(HERE, "..", "drill",
                                                              "webhook_receiver.py"),
                                 "--address", self.c.address(HOOK_NODE), "--port", HOOK_PORT,
                                 "--out", self.hook_file], name="webhook")
        binary = monitoring.tool("prometheus-alertmanager", "prometheus-alertmanager")
        for name, node in AMS.items():
            peers = [f"{self.c.address(n)}:{CLUSTER_PORT}" for m, n in AMS.items() if m != name]
            self.procs[name] = self.c.spawn(node, monitoring.argv_alertmanager(
                binary, cfg, os.path.join(self.dir, f"am-{name}-data"), AM_PORT,
                address=self.c.address(node), cluster_port=CLUSTER_PORT, peers=peers),
                name=f"alertmanager-{name}")
        for name, node in AMS.items():
            wait_for(f"Alertmanager {name} in a settled cluster of two",
                     lambda: self.cluster_status(name) == ("ready", 2), 30)
        log("ok: both Alertmanagers up, each sees the other")

    def cluster_status(self, name):
        st = self.c.http_json(AMS[name], f"{self.url(name)}/api/v2/status", 2.0)["cluster"]
        return st.get("status"), len(st.get("peers") or [])

    def kill(self, name):
        self.c.signal(self.procs[name], signal.SIGKILL)
        wait_for(f"Alertmanager {name} gone", lambda: not self.procs[name].alive(), 10)

    def name_of(self, external_url):
        return next((n for n in AMS if self.url(n) == external_url.rstrip("/")), external_url)

    def notifications(self, since=0.0):
        """[(received, status, labels, sender)] of every alert in every notification."""
        out = []
        for at, p in monitoring.webhook_records(self.hook_file, since):
            out.extend((at, a["status"], a["labels"], self.name_of(p.get("externalURL", "?")))
                       for a in p.get("alerts", []))
        return out

    def one_notification_per_incident(self, alertname, since, timeout=30):
        """Waits for a firing notification of `alertname`, then QUIET_S more; asserts that its
        alerts came in one notification (one POST), all with the same incident. Returns
        (seconds after since, incident, the tasks paged for)."""
        def posts():
            return [(at, p) for at, p in monitoring.webhook_records(self.hook_file, since)
                    if any(a["labels"].get("alertname") == alertname and a["status"] == "firing"
                           for a in p.get("alerts", []))]
        first = wait_for(f"{alertname} at the webhook", posts, timeout, interval=0.1)[0]
        time.sleep(max(0.0, first[0] + QUIET_S - time.time()))
        got = posts()
        alerts = [a for _, p in got for a in p["alerts"]
                  if a["labels"].get("alertname") == alertname]
        incidents = {a["labels"].get("incident") for a in alerts}
        assert len(incidents) == 1 and None not in incidents, f"incidents {incidents}"
        assert len(got) == 1, (f"{alertname}: {len(got)} notifications for one incident, at "
                               f"{[round(at - since, 1) for at, _ in got]} s: "
                               f"{[[a['labels'] for a in p['alerts']] for _, p in got]}")
        tasks = sorted({f"{a['labels']['role']}:{a['labels']['task']}" for a in alerts})
        log(f"ok: {alertname}: one notification, {first[0] - since:.1f} s after, incident "
            f"{incidents.pop()}, paging for {tasks}; nothing more in {QUIET_S} s")
        return first[0] - since, tasks

    def exactly_once(self, what, task, status, since, timeout=30):
        """Waits for the notification of `task`'s TrainscopeTaskDead with `status`, then
        QUIET_S more; asserts it came once. Returns (seconds after since, sender)."""
        def hits():
            return [n for n in self.notifications(since) if n[1] == status
                    and n[2].get("alertname") == "TrainscopeTaskDead"
                    and f"{n[2].get('role')}:{n[2].get('task')}" == task]
        first = wait_for(what, hits, timeout, interval=0.1)[0]
        time.sleep(max(0.0, first[0] + QUIET_S - time.time()))
        got = hits()
        assert len(got) == 1, (f"{what}: {len(got)} notifications, from "
                               f"{[n[3] for n in got]}, at "
                               f"{[round(n[0] - since, 1) for n in got]} s")
        log(f"ok: {what}: once, from Alertmanager {first[3]}, {first[0] - since:.1f} s after; "
            f"nothing more in {QUIET_S} s")
        return first[0] - since, first[3]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", required=True)
    ap.add_argument("--src", default=os.path.abspath(os.path.join(HERE, "..", "..")))
    ap.add_argument("--keep_logs", action="store_true")
    args = ap.parse_args()

    def body(logs):
        with netns.Cluster(5, log_dir=logs) as c:
            mon_dir = os.path.join(logs, "monitoring")
            os.makedirs(mon_dir)
            pair = Pair(c, args.src, mon_dir)
            pair.start()
            t = training.TrainingCluster(
                c, args.bin, training.Layout.default(3), sidecar_nodes=list(NODES),
                sidecar_args=["--alertmanager_url", ",".join(pair.url(n) for n in AMS)])
            t.start()
            t.wait_training(60, log=log)

            log("--- both Alertmanagers up: n1 (ps:0) and n2 (worker:0) cut apart")
            tp = time.time()
            c.cut(1, 2)
            parted, sides = pair.one_notification_per_incident("TrainscopeTaskPartitioned", tp)
            c.heal(1, 2)
            wait_for("the partition resolved at the webhook", lambda: [
                n for n in pair.notifications(tp) if n[1] == "resolved"
                and n[2].get("alertname") == "TrainscopeTaskPartitioned"], 30)
            t.wait_training(60, log=log)

            log("--- both Alertmanagers up: kill -9 worker:1")
            t0 = time.time()
            t.kill("worker:1")
            both, sender = pair.exactly_once("worker:1 dead at the webhook", "worker:1",
                                             "firing", t0)
            t1 = time.time()
            t.start_task("worker:1")
            resolved, _ = pair.exactly_once("worker:1 resolved at the webhook", "worker:1",
                                            "resolved", t1)

            other = next(n for n in AMS if n != sender)
            log(f"--- Alertmanager {sender} (the one that sent) killed: kill -9 worker:0")
            pair.kill(sender)
            t2 = time.time()
            t.kill("worker:0")
            alone, sender2 = pair.exactly_once("worker:0 dead at the webhook", "worker:0",
                                               "firing", t2)
            assert sender2 == other, f"sent by {sender2}, which was killed"
            pages = [n for n in pair.notifications() if n[1] == "firing"
                     and n[2].get("alertname") == "TrainscopeTaskDead"]
            assert len(pages) == 2, f"two dead pages in all; got {[n[2] for n in pages]}"
            log("ok: two dead pages in all")
            log("fault -> webhook (seconds):")
            log(f"  partition, one page     {parted:5.1f}  (for {', '.join(sides)})")
            log(f"  both Alertmanagers up   {both:5.1f}  (resolved {resolved:.1f} s after "
                "the restart)")
            log(f"  one of them killed      {alone:5.1f}")
    return netns.run_test("the HA Alertmanager pair test", "multinode-am-ha-", DEADLINE_S,
                          body, args.keep_logs, log, errors=(monitoring.RenderError,))


if __name__ == "__main__":
    sys.exit(main())
