#!/usr/bin/python3
"""The fire drill of network faults: real Prometheus, Alertmanager and a webhook receiver page
right for a partition, a cut-off node and a slow ps on a real multi-node network (issue 9).

Four nodes: ps:0 on n1, worker:0 on n2, worker:1 on n3, a sidecar on each of them; n4 runs the
monitoring (Prometheus, Alertmanager, webhook receiver, all on n4's loopback), which scrapes
every sidecar and task by its node address. The shipped alerts.yml and alertmanager.yml are
used as trainscope_testing.monitoring (tests/py) renders them (1 s scrape and evaluation, 1 s
group_wait and group_interval; TrainscopePsLatencyHigh `for: 1m` -> 30s so that its inhibition
is seen within the run, still after TrainscopePsSlow fires).

  1. partition: n1 and n2 cut apart (the switch drops their packets). The webhook gets
     TrainscopeTaskPartitioned with exactly the contract's labels, naming worker:0 and ps:0,
     with the link's incident: every partition alert (each side's sidecar posts its own) comes
     in ONE notification, grouped by that incident; healed: resolved.
  2. isolated node: n1's link down (it holds ps:0). The webhook gets TrainscopeNodeIsolated
     once, naming n1's node id, and nothing else: n1's TrainscopeSidecarDown fires in
     Prometheus and is inhibited in Alertmanager; TrainscopeTaskOnIsolatedNode of ps:0 (never
     paged) fires, to hold back what ps:0's callers on n2 and n3 raise. Link up: resolved.
  3. slow ps: every parameter call of ps:0 700 ms late. The webhook gets TrainscopePsSlow;
     TrainscopePsLatencyHigh fires in Prometheus and is inhibited. Cleared: resolved.

At the end, nothing else may have reached the webhook. Prints fault-to-webhook and
undo-to-resolved seconds per scenario (figures for docs/alerts.md).

Usage: network_alerts_test.py --bin build/bin [--src .] [--keep_logs]. Exit 0 passed, 1 failed,
77 skipped (no root or no network namespaces; one line says why).
"""

import argparse
import json
import os
import sys
import time
import urllib.parse

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))

from trainscope_testing import monitoring, netns, training
from trainscope_testing.logs import logger
from trainscope_testing.waiting import wait_for

log = logger("network_alerts")

DEADLINE_S = 420
NODES = (1, 2, 3)
MONITOR = 4
PROM, AM, HOOK = "127.0.0.1:9090", "127.0.0.1:9093", "127.0.0.1:9095"
LATENCY_FOR = ("TrainscopePsLatencyHigh", "for: 1m", "for: 30s", "for 1m -> 30s")
CONTRACT = {
    "TrainscopeTaskPartitioned": {"alertname", "cluster", "role", "task", "peer_role",
                                  "peer_task", "severity", "incident"},
    "TrainscopeNodeIsolated": {"alertname", "cluster", "node", "severity"},
    "TrainscopePsSlow": {"alertname", "cluster", "role", "task", "severity"},
}


class Drill:
    def __init__(self, c, t, src, mon_dir):
        self.c, self.t, self.src, self.dir = c, t, src, mon_dir
        self.hook_file = os.path.join(mon_dir, "webhook.jsonl")
        self.figures = []
        self.expected = []  # (alertname, labels) that may reach the webhook

    # ------------------------------------------------------------ monitoring on n4

    def start_monitoring(self):
        promtool = monitoring.tool("promtool", "prometheus")
        rules = os.path.join(self.dir, "alerts.yml")
        monitoring.render_rules(self.src, rules, promtool, [LATENCY_FOR])
        sidecars = [f"{self.c.address(n)}:{self.t.http_port}" for n in NODES]
        prom_cfg = os.path.join(self.dir, "prometheus.yml")
        monitoring.render_prometheus(self.src, prom_cfg, promtool, sidecars, rules, AM)
        am_cfg = os.path.join(self.dir, "alertmanager.yml")
        monitoring.render_alertmanager(self.src, am_cfg, f"http://{HOOK}/alerts")
        self.c.spawn(MONITOR, [sys.executable, os.path.join(HERE, "..", "drill",
                                                            "webhook_receiver.py"),
                               "--port", self.port(HOOK), "--out", self.hook_file],
                     name="webhook")
        self.c.spawn(MONITOR, monitoring.argv_alertmanager(
            monitoring.tool("prometheus-alertmanager", "prometheus-alertmanager"), am_cfg,
            os.path.join(self.dir, "am-data"), self.port(AM)), name="alertmanager")
        self.c.spawn(MONITOR, monitoring.argv_prometheus(
            monitoring.tool("prometheus", "prometheus"), prom_cfg,
            os.path.join(self.dir, "prom-data"), self.port(PROM)), name="prometheus")
        wait_for("Prometheus scrapes the three sidecars", lambda: len([
            r for r in self.query('up{job="trainscope-sidecars"} == 1')]) == 3, 60)
        wait_for("Alertmanager ready", lambda: self.get(f"http://{AM}/-/ready") is not None,
                       30)

    @staticmethod
    def port(address):
        return address.rsplit(":", 1)[1]

    def get(self, url):
        status, body = self.c.http_get(MONITOR, url, 3.0)
        return body if status == 200 else None

    def query(self, expr):
        return self.c.http_json(
            MONITOR, f"http://{PROM}/api/v1/query?query={urllib.parse.quote(expr)}",
            3.0)["data"]["result"]

    def firing_in_prometheus(self, alertname):
        return [a["labels"] for a in self.c.http_json(
            MONITOR, f"http://{PROM}/api/v1/alerts", 3.0)["data"]["alerts"]
            if a["labels"].get("alertname") == alertname and a["state"] == "firing"]

    def inhibited_in_alertmanager(self, alertname, **labels):
        alerts = self.c.http_json(MONITOR, f"http://{AM}/api/v2/alerts", 3.0)
        return [a for a in alerts if a["labels"].get("alertname") == alertname
                and all(a["labels"].get(k) == v for k, v in labels.items())
                and a["status"]["state"] == "suppressed" and a["status"]["inhibitedBy"]]

    def notifications(self, since=0.0):
        """[(received, status, labels, annotations)] from the webhook's file."""
        return [(at, a["status"], a["labels"], a["annotations"])
                for at, p in monitoring.webhook_records(self.hook_file, since)
                for a in p.get("alerts", [])]

    def wait_notification(self, what, status, match, since, timeout):
        def hit():
            return [n for n in self.notifications(since) if n[1] == status and match(n[2])]
        return wait_for(what, hit, timeout, interval=0.2)

    # ------------------------------------------------------------ scenarios

    def scenario(self, name, alertname, match, fault, undo, during=None, timeout=60):
        log(f"--- {name}")
        self.expected.append((alertname, match))
        t0 = time.time()
        fault()
        hits = self.wait_notification(f"{name}: firing {alertname} at the webhook", "firing",
                                      lambda lab: lab.get("alertname") == alertname
                                      and match(lab), t0, timeout)
        fired = hits[0][0] - t0
        for _, _, lab, ann in hits:
            extra = set(lab) ^ CONTRACT[alertname]
            assert not extra, f"{alertname}: labels {sorted(lab)} differ from the contract"
        log(f"ok: {alertname} at the webhook {fired:.1f} s after the fault: "
            f"{hits[0][3].get('summary')}")
        if during:
            during(hits, t0)
        t1 = time.time()
        undo()
        self.wait_notification(f"{name}: resolved {alertname} at the webhook", "resolved",
                               lambda lab: lab.get("alertname") == alertname and match(lab),
                               t1, 120)
        resolved = max(n[0] for n in self.notifications(t1)
                       if n[1] == "resolved" and n[2].get("alertname") == alertname) - t1
        log(f"ok: resolved {resolved:.1f} s after the fault was undone")
        self.figures.append((name, alertname, fired, resolved))

    def partition(self):
        def during(hits, t0):
            for _, _, lab, ann in hits:
                sides = {f"{lab['role']}:{lab['task']}", f"{lab['peer_role']}:{lab['peer_task']}"}
                assert sides == {"worker:0", "ps:0"}, f"partition names {sides}"
                assert all(s in ann["summary"] and s in ann["description"] for s in sides), ann
            time.sleep(6)  # group_wait (1 s) and a few group_intervals (1 s here): any more
            posts = [p for _, p in monitoring.webhook_records(self.hook_file, t0) if any(
                a["labels"].get("alertname") == "TrainscopeTaskPartitioned"
                and a["status"] == "firing" for a in p.get("alerts", []))]
            alerts = [a for p in posts for a in p["alerts"]
                      if a["labels"].get("alertname") == "TrainscopeTaskPartitioned"]
            incidents = {a["labels"].get("incident") for a in alerts}
            assert len(incidents) == 1 and None not in incidents, f"incidents {incidents}"
            assert len(posts) == 1, (f"one notification for the partition's incident; got "
                                     f"{len(posts)}: {[p.get('groupKey') for p in posts]}")
            sides = sorted({f"{a['labels']['role']}:{a['labels']['task']}" for a in alerts})
            log(f"ok: one notification, incident {incidents.pop()}, paging for {sides}")
        self.scenario("partition n1|n2", "TrainscopeTaskPartitioned",
                      lambda lab: {lab.get("task"), lab.get("peer_task")} == {"0"},
                      lambda: self.c.cut(1, 2, how="drop"), lambda: self.c.heal(1, 2),
                      during)

    def isolated(self):
        """n1 holds ps:0: its callers on n2 and n3 are still scraped and time out calling it."""
        node = f"{self.c.address(1)}:{self.t.grpc_port}"

        def consequence_inhibited(alertname, **labels):
            wait_for(f"{alertname} {labels} fires in Prometheus", lambda: [
                a for a in self.firing_in_prometheus(alertname)
                if all(a.get(k) == v for k, v in labels.items())], 60)
            wait_for("and is inhibited in Alertmanager",
                           lambda: self.inhibited_in_alertmanager(alertname, **labels), 20)
            log(f"ok: {alertname} {labels} fires in Prometheus, inhibited in Alertmanager")

        def during(hits, t0):
            consequence_inhibited("TrainscopeSidecarDown", node=node)
            # What ps:0's callers may raise about it (their calls fail on the network: latency,
            # deadline errors) is held back by this never-paged alert; here their calls fail
            # fast (UNAVAILABLE), so those alerts seldom fire, but none may reach the webhook.
            wait_for("TrainscopeTaskOnIsolatedNode of ps:0 fires in Prometheus", lambda: [
                a for a in self.firing_in_prometheus("TrainscopeTaskOnIsolatedNode")
                if (a.get("role"), a.get("task"), a.get("node")) == ("ps", "0", node)], 20)
            log("ok: TrainscopeTaskOnIsolatedNode of ps:0 fires in Prometheus")
            time.sleep(3)  # a few group_intervals: nothing else may come out
            pages = [n for n in self.notifications(t0) if n[1] == "firing"]
            assert len(pages) == 1, f"one page, for the node; got {[n[2] for n in pages]}"
            log("ok: one page in all")
        self.scenario("n1 (ps:0) link down", "TrainscopeNodeIsolated",
                      lambda lab: lab.get("node") == node,
                      lambda: self.c.link_down(1), lambda: self.c.link_up(1), during)

    def slow_ps(self):
        def during(hits, t0):
            wait_for("TrainscopePsLatencyHigh of ps:0 fires in Prometheus", lambda: [
                a for a in self.firing_in_prometheus("TrainscopePsLatencyHigh")
                if a.get("role") == "ps" and a.get("task") == "0"], 90)
            wait_for("and is inhibited in Alertmanager",
                           lambda: self.inhibited_in_alertmanager("TrainscopePsLatencyHigh",
                                                                  role="ps", task="0"), 20)
            log("ok: the ps's latency alert is firing in Prometheus and inhibited by PsSlow")
        self.scenario("ps:0 700 ms slow", "TrainscopePsSlow",
                      lambda lab: lab.get("role") == "ps" and lab.get("task") == "0",
                      lambda: self.t.fault("ps:0", parameter_delay_ms=700),
                      lambda: self.t.fault("ps:0", parameter_delay_ms=0), during, timeout=90)

    def quiet(self):
        """Between scenarios: nothing firing in Prometheus (kept-firing alerts included)."""
        wait_for("no alert firing in Prometheus", lambda: not [
            a for a in self.c.http_json(MONITOR, f"http://{PROM}/api/v1/alerts", 3.0)["data"][
                "alerts"] if a["state"] == "firing"], 90)

    def check_nothing_else(self):
        unexpected = sorted({json.dumps(lab, sort_keys=True) for _, status, lab, _ in
                             self.notifications() if status == "firing" and not any(
                                 lab.get("alertname") == name and match(lab)
                                 for name, match in self.expected)})
        assert not unexpected, "alerts nobody should have been paged for:\n" + "\n".join(
            unexpected)
        log("ok: nothing else reached the webhook")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", required=True)
    ap.add_argument("--src", default=os.path.abspath(os.path.join(HERE, "..", "..")))
    ap.add_argument("--keep_logs", action="store_true")
    args = ap.parse_args()

    def body(logs):
        with netns.Cluster(4, log_dir=logs) as c:
            t = training.TrainingCluster(c, args.bin, training.Layout.default(3),
                                         sidecar_nodes=list(NODES))
            t.start()
            mon_dir = os.path.join(logs, "monitoring")
            os.makedirs(mon_dir)
            drill = Drill(c, t, args.src, mon_dir)
            drill.start_monitoring()
            t.wait_training(60, log=log)
            drill.quiet()
            for scenario in (drill.partition, drill.isolated, drill.slow_ps):
                scenario()
                drill.quiet()
            drill.check_nothing_else()
            log("fault -> webhook, undo -> resolved (seconds):")
            for name, alert, fired, resolved in drill.figures:
                log(f"  {name:20} {alert:28} {fired:6.1f} {resolved:6.1f}")
    return netns.run_test("the network alerts drill", "multinode-alerts-", DEADLINE_S, body,
                          args.keep_logs, log, errors=(monitoring.RenderError,))


if __name__ == "__main__":
    sys.exit(main())
