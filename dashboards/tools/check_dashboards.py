#!/usr/bin/python3
"""Checks the Grafana dashboards' structure and extracts every panel query.

Checks, per dashboards/grafana/dashboards/*.json: valid JSON; the stable uid
(trainscope-<file name>); a current schemaVersion; a `datasource` variable of type datasource
for Prometheus and query variables cluster, role and task (label_values); every panel has an id
unique in its dashboard and a gridPos; every panel with queries uses the data source
`${datasource}` (except the listed non-Prometheus panels); every target has a refId (unique in
its panel) and a non-empty expr, with the same data source. Then every query, with the template
variables replaced, must parse: they are written as recording rules to a temporary file for
`promtool check rules` when promtool is given.

Writes the queries (dashboard, panel, refId, expr, whether it may be empty and why) as JSON to
--queries-out for the fire drill, which runs them against a live Prometheus.

Usage: check_dashboards.py SOURCE_DIR [--promtool PATH] [--queries-out FILE]
Standard library only.
"""

import glob
import json
import os
import re
import subprocess
import sys
import tempfile

DS = {"type": "prometheus", "uid": "${datasource}"}
# Panels that do not query Prometheus, by (uid, title): they read the sidecars' JSON.
NOT_PROMETHEUS = {
    ("trainscope-parameter-servers", "Slowest ps requests (from the sidecar)"):
        "yesoreyeram-infinity-datasource",
    ("trainscope-parameter-servers", "Failed ps requests (from the sidecar)"):
        "yesoreyeram-infinity-datasource",
}
# Panels allowed to return no data, and the condition under which they may.
MAY_BE_EMPTY = {
    ("trainscope-resources", "GPU utilization"): "no-gpu",
    ("trainscope-resources", "GPU memory used / total"): "no-gpu",
}


def substitute(expr, values):
    """Replaces Grafana's variables ($cluster, ${role}, $__rate_interval, ...) by values."""
    def repl(m):
        name = m.group(1) or m.group(2)
        if name not in values:
            raise KeyError(f"no value for ${name} in: {expr}")
        return values[name]
    return re.sub(r"\$\{([a-zA-Z_][a-zA-Z0-9_]*)(?::[a-z]+)?\}|\$([a-zA-Z_][a-zA-Z0-9_]*)",
                  repl, expr)


def all_panels(panels):
    for p in panels:
        yield p
        yield from all_panels(p.get("panels", []))


def check(src, json_sources=None):
    """Returns (problems, Prometheus queries); appends the panels that read JSON over HTTP
    (the sidecars' trace lists) to json_sources when given."""
    errors, queries = [], []
    json_sources = [] if json_sources is None else json_sources
    files = sorted(glob.glob(os.path.join(src, "dashboards/grafana/dashboards/*.json")))
    if not files:
        errors.append("no dashboards in dashboards/grafana/dashboards")
    uids = set()
    for path in files:
        rel = os.path.relpath(path, src)
        try:
            with open(path) as f:
                d = json.load(f)
        except ValueError as e:
            errors.append(f"{rel}: not JSON: {e}")
            continue
        stem = os.path.splitext(os.path.basename(path))[0]
        uid = d.get("uid")
        if uid != f"trainscope-{stem}":
            errors.append(f"{rel}: uid {uid!r}, want 'trainscope-{stem}' (stable: links use it)")
        if uid in uids:
            errors.append(f"{rel}: uid {uid} used twice")
        uids.add(uid)
        if not isinstance(d.get("schemaVersion"), int) or d["schemaVersion"] < 36:
            errors.append(f"{rel}: schemaVersion {d.get('schemaVersion')} (want >= 36)")
        if not d.get("title"):
            errors.append(f"{rel}: no title")
        variables = {v.get("name"): v for v in d.get("templating", {}).get("list", [])}
        ds = variables.get("datasource")
        if not ds or ds.get("type") != "datasource" or ds.get("query") != "prometheus":
            errors.append(f"{rel}: no `datasource` variable of type datasource for prometheus")
        for name in ("cluster", "role", "task"):
            v = variables.get(name)
            q = v and v.get("query")
            q = q.get("query") if isinstance(q, dict) else q
            if not v or v.get("type") != "query" or not q or not q.startswith("label_values("):
                errors.append(f"{rel}: variable {name} missing or not a label_values query")
            elif v.get("datasource") != DS:
                errors.append(f"{rel}: variable {name} does not use ${{datasource}}")
        ids = set()
        for p in all_panels(d.get("panels", [])):
            title = p.get("title")
            where = f"{rel}: panel {p.get('id')} {title!r}"
            if not isinstance(p.get("id"), int):
                errors.append(f"{where}: no integer id")
            elif p["id"] in ids:
                errors.append(f"{where}: id used twice")
            ids.add(p.get("id"))
            if "gridPos" not in p:
                errors.append(f"{where}: no gridPos")
            if p.get("type") in ("row", "text"):
                continue
            targets = p.get("targets") or []
            if not targets:
                errors.append(f"{where}: no targets")
            other = NOT_PROMETHEUS.get((uid, title))
            if other:
                if p.get("datasource", {}).get("type") != other:
                    errors.append(f"{where}: expected data source type {other}")
                for t in targets:
                    if not t.get("url"):
                        errors.append(f"{where}: target without url")
                    else:
                        json_sources.append({"dashboard": uid, "title": title,
                                             "url": t["url"],
                                             "root_selector": t.get("root_selector", ""),
                                             "columns": [c.get("selector")
                                                         for c in t.get("columns", [])]})
                continue
            if p.get("datasource") != DS:
                errors.append(f"{where}: datasource {p.get('datasource')}, want {DS}")
            refs = set()
            for t in targets:
                ref = t.get("refId")
                if not ref or ref in refs:
                    errors.append(f"{where}: target refId {ref!r} missing or repeated")
                refs.add(ref)
                if t.get("datasource", DS) != DS:
                    errors.append(f"{where} {ref}: target datasource {t.get('datasource')}")
                expr = (t.get("expr") or "").strip()
                if not expr:
                    errors.append(f"{where} {ref}: empty expr")
                    continue
                queries.append({
                    "dashboard": uid, "file": rel, "panel_id": p.get("id"), "title": title,
                    "ref_id": ref, "expr": expr, "instant": bool(t.get("instant")),
                    "may_be_empty": MAY_BE_EMPTY.get((uid, title))})
        for key in MAY_BE_EMPTY:
            if key[0] == uid and not any(q["title"] == key[1] for q in queries):
                errors.append(f"{rel}: MAY_BE_EMPTY names a panel that does not exist: {key[1]}")
    return errors, queries


# Values for the parse check (and defaults for the drill).
DEFAULT_VALUES = {
    "cluster": "c", "role": ".*", "task": ".*", "sidecar": "127.0.0.1:9400",
    "__rate_interval": "1m", "__interval": "15s", "__range": "30m", "datasource": "p",
    "trace_url": "http://localhost:16686/trace/",
}


def promtool_parse(promtool, queries):
    """Every query as a recording rule: promtool check rules parses them all."""
    errors = []
    lines = ["groups:", "  - name: dashboard-queries", "    rules:"]
    for i, q in enumerate(queries):
        expr = substitute(q["expr"], DEFAULT_VALUES)
        lines.append(f"      - record: dashboard_query_{i}")
        lines.append(f"        expr: {json.dumps(expr)}")
    with tempfile.NamedTemporaryFile("w", suffix=".yml", delete=False) as f:
        f.write("\n".join(lines) + "\n")
        path = f.name
    try:
        r = subprocess.run([promtool, "check", "rules", path], capture_output=True, text=True)
        if r.returncode != 0:
            out = r.stdout + r.stderr
            for m in re.finditer(r"dashboard_query_(\d+)", out):
                q = queries[int(m.group(1))]
                errors.append(f"{q['file']}: panel {q['panel_id']} {q['title']!r} "
                              f"{q['ref_id']}: does not parse: {q['expr']}")
            errors.append("promtool check rules on the panel queries failed:\n" + out[-3000:])
    finally:
        os.unlink(path)
    return errors


def main():
    args = sys.argv[1:]
    src = args[0]
    promtool = args[args.index("--promtool") + 1] if "--promtool" in args else None
    out = args[args.index("--queries-out") + 1] if "--queries-out" in args else None
    errors, queries = check(src)
    if promtool and queries:
        errors += promtool_parse(promtool, queries)
    if out:
        os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
        with open(out, "w") as f:
            json.dump(queries, f, indent=1)
    for e in errors:
        print("FAIL:", e)
    print(f"{len(queries)} panel queries in {len({q['dashboard'] for q in queries})} dashboards; "
          f"{len(errors)} problems")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
