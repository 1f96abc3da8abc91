#!/usr/bin/python3
"""Prometheus, Alertmanager and a webhook receiver for a running trainscope cluster, on loopback.

Renders the shipped dashboards/prometheus/prometheus.yml, alerts.yml and
dashboards/alertmanager/alertmanager.yml for the given sidecars (short intervals, these ports),
starts the three processes, prints their addresses, and stops them on Ctrl-C or SIGTERM. The fire
drill uses the same rendering; scripts/demo can run this beside its cluster:

    scripts/python -m trainscope_testing.monitoring --src . --sidecar 127.0.0.1:9400 --dir /tmp/ts-monitoring \
        [--prometheus_port 9090] [--alertmanager_port 9093] [--webhook_port 9095] [--interval 1s]

The webhook receiver prints one line per notification (firing/resolved, alert, task, summary).
Also the VictoriaMetrics counterparts (argv_victoria_metrics, argv_vmagent, argv_vmalert,
render_vmalert_rules) for vm_scale_out_test.py. Standard library only.
"""

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request

WEBHOOK_RECEIVER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "drill",
                                "webhook_receiver.py")

# Thresholds of the shipped rules that a drill or a demo cannot wait for; everything else
# (notably the `for:` of dead, hung, deadline-exceeded and sidecar-down) is used as shipped.
RULE_OVERRIDES = [
    # (alert, old text, new text, what changes)
    ("TrainscopeTaskBlocked", "trainscope_task_blocked_seconds > 60",
     "trainscope_task_blocked_seconds > 5", "threshold 60 s -> 5 s"),
    # 30 s, not less: TrainscopePsSlow (about 20 s) must fire first to inhibit it, as the shipped
    # 1 m makes sure of.
    ("TrainscopePsLatencyHigh", "for: 1m", "for: 30s", "for 1m -> 30s"),
    ("TrainscopePsMemoryNearBudget", "for: 5m", "for: 5s", "for 5m -> 5s"),
]


class RenderError(Exception):
    pass


def replace_counted(text, old, new, count, what):
    found = text.count(old)
    if found != count:
        raise RenderError(f"rendering {what}: expected {count}x {old!r}, found {found}: the "
                          "shipped file changed; update tests/py/trainscope_testing/monitoring.py")
    return text.replace(old, new)


def check(promtool, kind, path, extra=()):
    r = subprocess.run([promtool, "check", kind, *extra, path], capture_output=True, text=True)
    if r.returncode != 0:
        raise RenderError(f"rendered {path} does not pass promtool check {kind}:\n"
                          + r.stdout + r.stderr)


def render_rules(src, path, promtool, overrides=RULE_OVERRIDES):
    with open(os.path.join(src, "dashboards/prometheus/alerts.yml")) as f:
        rules = f.read()
    blocks = re.split(r"(?m)^(?=      (?:# .*\n      )*- alert: )", rules)
    for alert, old, new, _ in overrides:
        hits = [i for i, b in enumerate(blocks) if f"- alert: {alert}\n" in b]
        if len(hits) != 1 or blocks[hits[0]].count(old) != 1:
            raise RenderError(f"rendering rules: {alert} with one {old!r} not found")
        blocks[hits[0]] = blocks[hits[0]].replace(old, new)
    with open(path, "w") as f:
        f.write("".join(blocks))
    check(promtool, "rules", path)


def render_prometheus(src, path, promtool, sidecars, rules_path, alertmanager, interval="1s",
                      jobs=None):
    """sidecars: ["host:port", ...]; each also serves the tasks' service discovery. jobs:
    {shipped job name: another name}, as a user's own scrape config would call them."""
    with open(os.path.join(src, "dashboards/prometheus/prometheus.yml")) as f:
        cfg = f.read()
    w = "config"
    for old, new in (jobs or {}).items():
        cfg = replace_counted(cfg, f"job_name: {old}\n", f"job_name: {new}\n", 1, w)
    cfg = replace_counted(cfg, "scrape_interval: 15s", f"scrape_interval: {interval}", 1, w)
    cfg = replace_counted(cfg, "scrape_timeout: 10s", f"scrape_timeout: {interval}", 1, w)
    cfg = replace_counted(cfg, "scrape_interval: 5s", f"scrape_interval: {interval}", 1, w)
    cfg = replace_counted(cfg, "scrape_timeout: 4s", f"scrape_timeout: {interval}", 1, w)
    cfg = replace_counted(cfg, "evaluation_interval: 5s", f"evaluation_interval: {interval}", 1, w)
    cfg = replace_counted(cfg, "  - alerts.yml", f"  - {rules_path}", 1, w)
    cfg = replace_counted(cfg, '["127.0.0.1:9093"]', json.dumps([alertmanager]), 1, w)
    sidecars_file = os.path.join(os.path.dirname(path), "sidecars.yml")
    with open(sidecars_file, "w") as f:
        f.write(f"- targets: {json.dumps(sidecars)}\n")
    cfg = replace_counted(cfg, '["sidecars/*.yml"]', json.dumps([sidecars_file]), 1, w)
    sd = ("      - url: http://127.0.0.1:9400/api/v1/sd\n"
          "        refresh_interval: 5s\n")
    cfg = replace_counted(cfg, sd, "".join(
        f"      - url: http://{s}/api/v1/sd\n        refresh_interval: {interval}\n"
        for s in sidecars), 1, w)
    with open(path, "w") as f:
        f.write(cfg)
    check(promtool, "config", path)


def render_agent(src, path, promtool, sidecars, store, interval="1s"):
    """The shipped scale-out/agent.yml for one group of nodes: its sidecars (["host:port", ...],
    each also listing the tasks of its node), written to the store at host:port."""
    with open(os.path.join(src, "dashboards/prometheus/scale-out/agent.yml")) as f:
        cfg = f.read()
    w = "agent config"
    for old in ("scrape_interval: 15s", "scrape_timeout: 10s", "scrape_interval: 5s",
                "scrape_timeout: 4s"):
        cfg = replace_counted(cfg, old, old.split(":")[0] + f": {interval}", 1, w)
    sidecars_file = os.path.join(os.path.dirname(path), os.path.basename(path) + ".sidecars.yml")
    with open(sidecars_file, "w") as f:
        f.write(f"- targets: {json.dumps(sidecars)}\n")
    cfg = replace_counted(cfg, "- sidecars/*.yml", f"- {sidecars_file}", 1, w)
    sd = "  - url: http://127.0.0.1:9400/api/v1/sd?local=1\n    refresh_interval: 5s\n"
    cfg = replace_counted(cfg, sd, "".join(
        f"  - url: http://{s}/api/v1/sd?local=1\n    refresh_interval: {interval}\n"
        for s in sidecars), 1, w)
    cfg = replace_counted(cfg, "http://127.0.0.1:9090/api/v1/write",
                          f"http://{store}/api/v1/write", 1, w)
    with open(path, "w") as f:
        f.write(cfg)
    check(promtool, "config", path, ["--agent"])


def render_store(src, path, promtool, rules_path, alertmanager, interval="1s"):
    """The shipped scale-out/store.yml with these rules and Alertmanager (host:port)."""
    with open(os.path.join(src, "dashboards/prometheus/scale-out/store.yml")) as f:
        cfg = f.read()
    w = "store config"
    cfg = replace_counted(cfg, "evaluation_interval: 5s", f"evaluation_interval: {interval}", 1, w)
    cfg = replace_counted(cfg, "- ../alerts.yml", f"- {rules_path}", 1, w)
    cfg = replace_counted(cfg, "- 127.0.0.1:9093", f"- {alertmanager}", 1, w)
    with open(path, "w") as f:
        f.write(cfg)
    check(promtool, "config", path)


# Fields of the shipped files that Debian's VictoriaMetrics (1.79) does not read, and why it
# may do without them. vmagent: intervals of the service discovery and the remote write are
# flags there (-promscrape.fileSDCheckInterval, -promscrape.httpSDCheckInterval,
# -remoteWrite.url). vmalert: keep_firing_for came to vmalert after 1.79, which refuses it.
VMAGENT_SKIPPED_FIELDS = {
    "refresh_interval not found in type promscrape.FileSDConfig",
    "refresh_interval not found in type http.SDConfig",
    "remote_write not found in type promscrape.Config",
}
VMALERT_DROPPED = "        keep_firing_for: 1m\n"
VMALERT_DROPPED_COUNT = 2  # TrainscopePsSlow, TrainscopeTaskOnIsolatedNode


def check_vmagent_config(vmagent, path):
    """vmagent reads path (a Prometheus agent config) with -promscrape.config.strictParse=false;
    raises RenderError when a field it would skip is not one of VMAGENT_SKIPPED_FIELDS."""
    r = subprocess.run([vmagent, f"-promscrape.config={path}", "-promscrape.config.dryRun",
                        "-loggerLevel=ERROR"], capture_output=True, text=True)
    skipped = set(re.findall(r"field (.+?)(?:;|$)", r.stdout + r.stderr, re.M))
    if r.returncode == 0 or not skipped or skipped - VMAGENT_SKIPPED_FIELDS:
        raise RenderError(f"vmagent would skip more of {path} than VMAGENT_SKIPPED_FIELDS (or "
                          "reads it all: update that list):\n" + r.stdout + r.stderr)


def render_vmalert_rules(src, path, promtool, vmalert):
    """render_rules without keep_firing_for (see VMALERT_DROPPED), checked by vmalert -dryRun."""
    render_rules(src, path, promtool)
    with open(path) as f:
        rules = f.read()
    rules = replace_counted(rules, VMALERT_DROPPED, "", VMALERT_DROPPED_COUNT, "vmalert rules")
    with open(path, "w") as f:
        f.write(rules)
    r = subprocess.run([vmalert, f"-rule={path}", "-dryRun", "-loggerLevel=ERROR"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise RenderError(f"vmalert -dryRun refuses {path}:\n" + r.stdout + r.stderr)


def render_alertmanager(src, path, webhook_url, group_wait="1s", group_interval="1s"):
    with open(os.path.join(src, "dashboards/alertmanager/alertmanager.yml")) as f:
        am = f.read()
    w = "alertmanager"
    am = replace_counted(am, "http://127.0.0.1:9095/alerts", webhook_url, 1, w)
    am = replace_counted(am, "group_wait: 10s", f"group_wait: {group_wait}", 1, w)
    am = replace_counted(am, "group_wait: 30s", f"group_wait: {group_wait}", 1, w)
    am = replace_counted(am, "group_interval: 1m", f"group_interval: {group_interval}", 1, w)
    with open(path, "w") as f:
        f.write(am)


def webhook_records(path, since=0.0):
    """[(received, payload)] from the webhook receiver's file (tests/drill/webhook_receiver.py:
    one JSON line per POST), those received at or after `since` (unix seconds); [] before the
    first POST."""
    if not os.path.exists(path):
        return []
    with open(path) as f:
        records = [json.loads(line) for line in f]
    return [(r["received"], r["payload"]) for r in records if r["received"] >= since]


def tool(name, package):
    path = shutil.which(name) or f"/usr/bin/{name}"
    if not os.access(path, os.X_OK):
        raise RenderError(f"MISSING: {name} (apt-get install {package})")
    return path


def argv_prometheus(binary, config, data, port):
    return [binary, f"--config.file={config}", f"--storage.tsdb.path={data}",
            f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn",
            "--storage.tsdb.retention.time=1d"]


def argv_prometheus_agent(binary, config, data, port):
    return [binary, "--enable-feature=agent", f"--config.file={config}",
            f"--storage.agent.path={data}", f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn"]


def argv_alertmanager(binary, config, data, port, address="127.0.0.1", cluster_port=None,
                      peers=(), peer_timeout="1s", gossip_interval="100ms",
                      pushpull_interval="5s"):
    """Alertmanager alone (cluster_port None), or one of an HA cluster: gossiping on
    address:cluster_port with peers (["host:port", ...], the others' cluster addresses).
    Shorter intervals than Alertmanager's defaults (15 s, 200 ms, 1 m), so that a pair settles
    and deduplicates within seconds: the one second in the peers' order sends peer_timeout
    after the first, unless the first's notification log (gossiped) says it was sent. Render
    the config with a group_interval above peer_timeout (docs/alerts.md, "An HA pair of
    Alertmanagers"). The external URL (in every notification) names the instance:
    http://address:port."""
    argv = [binary, f"--config.file={config}", f"--storage.path={data}",
            f"--web.listen-address={address}:{port}", "--log.level=warn"]
    if cluster_port is None:
        return argv + ["--cluster.listen-address="]
    return argv + [f"--web.external-url=http://{address}:{port}",
                   f"--cluster.listen-address={address}:{cluster_port}",
                   *[f"--cluster.peer={p}" for p in peers],
                   f"--cluster.peer-timeout={peer_timeout}",
                   f"--cluster.gossip-interval={gossip_interval}",
                   f"--cluster.pushpull-interval={pushpull_interval}"]


def argv_victoria_metrics(binary, data, port):
    """A single-node VictoriaMetrics store: remote_write at /api/v1/write, Prometheus' query
    API. Fresh samples are queryable after 1 s (-search.latencyOffset, default 30 s)."""
    return [binary, f"-storageDataPath={data}", f"-httpListenAddr=127.0.0.1:{port}",
            "-retentionPeriod=1d", "-search.latencyOffset=1s", "-loggerLevel=WARN"]


def argv_vmagent(binary, config, data, port, store, interval="1s"):
    """vmagent with a Prometheus agent config (check_vmagent_config) writing to the store
    (host:port); its discovery re-read every `interval`. With keep-alive, as a deployment runs
    it: the tasks' and the sidecars' HTTP servers keep connections open between scrapes
    (common/include/trainscope/common/http_server.h)."""
    return [binary, f"-promscrape.config={config}", "-promscrape.config.strictParse=false",
            f"-promscrape.fileSDCheckInterval={interval}",
            f"-promscrape.httpSDCheckInterval={interval}",
            f"-remoteWrite.url=http://{store}/api/v1/write", f"-remoteWrite.tmpDataPath={data}",
            "-remoteWrite.flushInterval=1s", f"-httpListenAddr=127.0.0.1:{port}",
            "-loggerLevel=WARN"]


def argv_vmalert(binary, rules, port, store, notifier, interval="1s"):
    """vmalert evaluating rules on the store (host:port) every `interval`, writing ALERTS back
    to it, notifying the Alertmanager API at notifier (http://host:port). No `alertgroup`
    label: an alert's labels are the rule's alone, as the sidecars' own alerts expect
    (docs/alerts.md, "One alert, two senders")."""
    return [binary, f"-rule={rules}", "-disableAlertgroupLabel",
            f"-datasource.url=http://{store}", f"-remoteWrite.url=http://{store}",
            "-remoteWrite.flushInterval=1s", f"-notifier.url={notifier}",
            f"-evaluationInterval={interval}", f"-httpListenAddr=127.0.0.1:{port}",
            "-loggerLevel=WARN"]


def wait_ready(url, timeout):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=1) as r:
                if r.status == 200:
                    return True
        except OSError:
            pass
        time.sleep(0.2)
    return False


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--src", required=True, help="the source tree")
    ap.add_argument("--sidecar", action="append", required=True, help="HOST:PORT (repeatable)")
    ap.add_argument("--dir", required=True, help="folder for configs, data and logs")
    ap.add_argument("--prometheus_port", type=int, default=9090)
    ap.add_argument("--alertmanager_port", type=int, default=9093)
    ap.add_argument("--webhook_port", type=int, default=9095)
    ap.add_argument("--interval", default="1s", help="scrape and evaluation interval")
    ap.add_argument("--shipped_thresholds", action="store_true",
                    help="use alerts.yml as shipped (no shortened thresholds)")
    args = ap.parse_args()
    src, d = os.path.abspath(args.src), os.path.abspath(args.dir)
    os.makedirs(d, exist_ok=True)
    try:
        promtool = tool("promtool", "prometheus")
        prometheus = tool("prometheus", "prometheus")
        alertmanager = tool("prometheus-alertmanager", "prometheus-alertmanager")
        rules = os.path.join(d, "alerts.yml")
        render_rules(src, rules, promtool, [] if args.shipped_thresholds else RULE_OVERRIDES)
        render_prometheus(src, os.path.join(d, "prometheus.yml"), promtool, args.sidecar, rules,
                          f"127.0.0.1:{args.alertmanager_port}", args.interval)
        render_alertmanager(src, os.path.join(d, "alertmanager.yml"),
                            f"http://127.0.0.1:{args.webhook_port}/alerts")
    except RenderError as e:
        print(f"monitoring: {e}", file=sys.stderr)
        return 1
    procs = []
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    try:
        procs.append(subprocess.Popen([sys.executable, WEBHOOK_RECEIVER,
                                       "--port", str(args.webhook_port), "--print", "--out",
                                       os.path.join(d, "webhook.jsonl")]))
        log = open(os.path.join(d, "alertmanager.log"), "ab")
        procs.append(subprocess.Popen(argv_alertmanager(
            alertmanager, os.path.join(d, "alertmanager.yml"), os.path.join(d, "am-data"),
            args.alertmanager_port), stdout=log, stderr=subprocess.STDOUT))
        log = open(os.path.join(d, "prometheus.log"), "ab")
        procs.append(subprocess.Popen(argv_prometheus(
            prometheus, os.path.join(d, "prometheus.yml"), os.path.join(d, "prom-data"),
            args.prometheus_port), stdout=log, stderr=subprocess.STDOUT))
        ok = (wait_ready(f"http://127.0.0.1:{args.prometheus_port}/-/ready", 30)
              and wait_ready(f"http://127.0.0.1:{args.alertmanager_port}/-/ready", 30))
        if not ok:
            print(f"monitoring: Prometheus or Alertmanager did not start; logs in {d}",
                  file=sys.stderr)
            return 1
        print(f"Prometheus    http://127.0.0.1:{args.prometheus_port}/alerts", flush=True)
        print(f"Alertmanager  http://127.0.0.1:{args.alertmanager_port}/", flush=True)
        print(f"webhook       http://127.0.0.1:{args.webhook_port}/alerts "
              f"(notifications below and in {d}/webhook.jsonl)", flush=True)
        while not stop and all(p.poll() is None for p in procs):
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
    return 0


if __name__ == "__main__":
    sys.exit(main())
