#!/usr/bin/python3
"""The sidecar's own alerts reach Alertmanagers that require credentials, as hosted and
multi-tenant ones do: a real Alertmanager (Debian's prometheus-alertmanager) whose
--web.config.file demands basic auth, and the same Alertmanager behind a proxy that demands a
bearer token and a tenant header (X-Scope-OrgID) and then forwards with basic auth.

Three sidecars on loopback, each watching its own run's worker:0 (sidecar_fake_task), each
posting to one way in: A with no credential (straight to Alertmanager), B with
--alertmanager_basic_auth_file (straight), C with --alertmanager_bearer_token_file and
--alertmanager_header "X-Scope-OrgID: team-a" (through the proxy). The credential files are
0600, as the sidecar demands. The three workers are killed:

1. TrainscopeTaskDead reaches Alertmanager, from B and from C (the proxy saw C's token and
   tenant, and nothing else got through it);
2. A's posts are refused (HTTP 401) and counted failed, never sent
   (trainscope_sidecar_alerts_sent_total{status}); A says so once in its log.
States and counts are asserted, never timings.

Usage: alertmanager_auth_test.py --bin BUILD/bin. Needs prometheus-alertmanager
(scripts/install-deps); exit 0 when every check passed.
"""

import argparse
import base64
import http.server
import json
import os
import sys
import threading
import urllib.error
import urllib.request
import warnings

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import crypt  # bcrypt through libxcrypt, for Alertmanager's basic_auth_users

from trainscope_testing import monitoring
from trainscope_testing.checks import Checks
from trainscope_testing.logs import logger
from trainscope_testing.ports import free_port
from trainscope_testing.processes import ProcGroup
from trainscope_testing.waiting import HarnessError, wait_for
from trainscope_testing.web import http_text

log = logger()
check = Checks(log)
USER, PASSWORD, TOKEN, TENANT = "trainscope", "am-s3cret-pass", "tok-0123456789abcdef", "team-a"
BASIC = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()


def secret(path, text):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text + "\n")
    return path


def am_get(am_port, path):
    req = urllib.request.Request(f"http://127.0.0.1:{am_port}{path}",
                                 headers={"Authorization": BASIC})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(req, timeout=5) as r:
        return json.loads(r.read())


class Proxy(http.server.ThreadingHTTPServer):
    """Takes POST /api/v2/alerts only with the bearer token and the tenant; forwards it to the
    Alertmanager with basic auth. Records (status, token ok, tenant) of every request."""

    def __init__(self, port, am_port):
        self.am_port, self.seen, self.lock = am_port, [], threading.Lock()
        super().__init__(("127.0.0.1", port), ProxyHandler)


class ProxyHandler(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        token_ok = self.headers.get("Authorization") == f"Bearer {TOKEN}"
        tenant = self.headers.get("X-Scope-OrgID")
        status = 401 if not token_ok else 403 if tenant != TENANT else 0
        if status == 0:
            req = urllib.request.Request(
                f"http://127.0.0.1:{self.server.am_port}{self.path}", data=body, method="POST",
                headers={"Authorization": BASIC, "Content-Type": "application/json"})
            try:
                opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
                with opener.open(req, timeout=5) as r:
                    status = r.status
            except urllib.error.HTTPError as e:
                status = e.code
        with self.server.lock:
            self.server.seen.append((status, token_ok, tenant))
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def metric(http_port, series):
    for line in http_text(f"http://127.0.0.1:{http_port}/metrics").splitlines():
        if line.startswith(series + " "):
            return float(line.split()[-1])
    return 0.0


def dead_alerts(am_port):
    return [a for a in am_get(am_port, "/api/v2/alerts")
            if a["labels"].get("alertname") == "TrainscopeTaskDead"
            and a["labels"].get("task") == "0"]


def run(args, d):
    am_bin = monitoring.tool("prometheus-alertmanager", "prometheus-alertmanager")
    src = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
    am_port, proxy_port = free_port(), free_port()
    am_cfg, web_cfg = os.path.join(d, "alertmanager.yml"), os.path.join(d, "web.yml")
    monitoring.render_alertmanager(src, am_cfg, f"http://127.0.0.1:{free_port()}/alerts")
    with open(web_cfg, "w") as f:
        f.write(f"basic_auth_users:\n  {USER}: "
                f"{crypt.crypt(PASSWORD, crypt.mksalt(crypt.METHOD_BLOWFISH))}\n")
    basic_file = secret(os.path.join(d, "am.auth"), f"{USER}:{PASSWORD}")
    token_file = secret(os.path.join(d, "am.token"), TOKEN)
    procs = ProcGroup(d)
    proxy = Proxy(proxy_port, am_port)
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    try:
        procs.start("alertmanager", monitoring.argv_alertmanager(
            am_bin, am_cfg, os.path.join(d, "am-data"), am_port) + [f"--web.config.file={web_cfg}"])
        wait_for("Alertmanager ready (with basic auth)",
                 lambda: am_get(am_port, "/api/v2/status") is not None, 30, log=log)
        sidecars, tasks = {}, []
        for name, url, extra in (
                ("A", f"127.0.0.1:{am_port}", []),
                ("B", f"127.0.0.1:{am_port}", ["--alertmanager_basic_auth_file", basic_file]),
                ("C", f"127.0.0.1:{proxy_port}", ["--alertmanager_bearer_token_file", token_file,
                                                  "--alertmanager_header",
                                                  f"X-Scope-OrgID: {TENANT}"])):
            # Each sidecar its own run (its cluster label tells whose alert arrived) and task.
            task_port, http = free_port(), free_port()
            spec = os.path.join(d, f"spec-{name}.json")
            with open(spec, "w") as f:
                json.dump({"cluster": {"worker": [f"127.0.0.1:{task_port}"]}}, f)
            tasks.append(procs.start(f"worker-0-{name}", [
                os.path.join(args.bin, "sidecar_fake_task"), "--host", "127.0.0.1", "--port",
                str(task_port), "--role", "worker", "--index", "0", "--phase", "training",
                "--cluster_name", f"am-auth-{name}"]))
            procs.start(f"sidecar-{name}", [
                os.path.join(args.bin, "trainscope-sidecar"), "--cluster_spec", spec,
                "--cluster_name", f"am-auth-{name}", "--http_address", "127.0.0.1",
                "--http_port", str(http), "--grpc_port", "-1", "--alertmanager_url", url,
                *extra])
            sidecars[name] = http
        for name, http in sidecars.items():
            wait_for(f"sidecar {name} sees worker:0 up", lambda: '"state":"up"' in http_text(
                f"http://127.0.0.1:{http}/api/v1/tasks").replace(" ", ""), 30, log=log)
        for task in tasks:
            task.kill9()
        try:
            alerts = wait_for("TrainscopeTaskDead from B and C in Alertmanager", lambda: (
                lambda a: a if {x["labels"].get("cluster") for x in a} >= {"am-auth-B",
                                                                          "am-auth-C"}
                else None)(dead_alerts(am_port)), 30, log=log)
        except HarnessError as e:
            alerts = dead_alerts(am_port)
            log(str(e))
        clusters = sorted({a["labels"].get("cluster") for a in alerts})
        check("am-auth-B" in clusters, f"B's alert (basic auth) reached Alertmanager: {clusters}")
        check("am-auth-C" in clusters,
              f"C's alert (bearer token and tenant, through the proxy) reached it: {clusters}")
        check("am-auth-A" not in clusters, f"A's (no credential) did not: {clusters}")
        with proxy.lock:
            seen = list(proxy.seen)
        check(seen and all(s == 200 and ok and t == TENANT for s, ok, t in seen),
              f"every post through the proxy carried C's token and tenant: {seen[:3]}")
        try:
            wait_for("A counts its posts failed", lambda: metric(
                sidecars["A"], 'trainscope_sidecar_alerts_sent_total{status="failed"}') > 0,
                15, log=log)
        except HarnessError:
            pass
        failed = metric(sidecars["A"], 'trainscope_sidecar_alerts_sent_total{status="failed"}')
        sent = metric(sidecars["A"], 'trainscope_sidecar_alerts_sent_total{status="ok"}')
        check(failed > 0 and sent == 0, f"A counted {failed:.0f} failed and {sent:.0f} ok")
        with open(os.path.join(d, "sidecar-A.log"), errors="replace") as f:
            lines = [x.strip() for x in f if "cannot post alerts" in x]
        check(len(lines) == 1 and "HTTP 401" in lines[0],
              f"A said once why: {lines[0] if lines else 'nothing'}")
    finally:
        procs.stop()
        proxy.shutdown()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bin", required=True, help="the build's bin folder")
    args = parser.parse_args()
    return check.run("am-auth-", lambda d: run(args, d),
                     errors=(HarnessError, monitoring.RenderError, OSError))


if __name__ == "__main__":
    sys.exit(main())
