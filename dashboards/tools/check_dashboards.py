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
import urllib.error
import urllib.parse
import urllib.request

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from promql_names import pinned_jobs  # noqa: E402

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


def shipped_jobs(src):
    """The job names of the shipped scrape config (dashboards/prometheus/prometheus.yml)."""
    with open(os.path.join(src, "dashboards/prometheus/prometheus.yml")) as f:
        return set(re.findall(r"^\s*-\s*job_name:\s*(\S+)", f.read(), re.M))


def check(src, json_sources=None, variables_by_uid=None, folder=None):
    """Returns (problems, Prometheus queries); appends the panels that read JSON over HTTP
    (the sidecars' trace lists) to json_sources when given, and fills variables_by_uid
    (dashboard uid -> its templating list) when given. folder: the dashboards to check
    (default: the shipped ones)."""
    errors, queries = [], []
    json_sources = [] if json_sources is None else json_sources
    variables_by_uid = {} if variables_by_uid is None else variables_by_uid
    jobs = shipped_jobs(src)
    folder = folder or os.path.join(src, "dashboards/grafana/dashboards")
    files = sorted(glob.glob(os.path.join(folder, "*.json")))
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
        variables_by_uid[uid] = d.get("templating", {}).get("list", [])
        # The scrape jobs are variables found by metric name, defaulting to the shipped jobs.
        for name in ("job", "sidecar_job"):
            v = variables.get(name) or {}
            default = (v.get("current") or {}).get("value") or [None]
            if not str(v.get("definition", "")).startswith("label_values(") or \
                    not str(v.get("definition", "")).endswith(", job)"):
                errors.append(f"{rel}: variable {name} missing or not label_values(..., job)")
            elif default[0] not in jobs:
                errors.append(f"{rel}: variable {name} defaults to {default[0]!r}, not a job of "
                              f"the shipped scrape config {sorted(jobs)}")
        for v in variables.values():
            q = v.get("query")
            q = q.get("query") if isinstance(q, dict) else q
            if v.get("type") == "query" and pinned_jobs(str(q)):
                errors.append(f"{rel}: variable {v.get('name')} pins a job: {pinned_jobs(q)}")
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
                if pinned_jobs(expr):
                    errors.append(f"{where} {ref}: pins a scrape job {pinned_jobs(expr)}: use "
                                  "the selectors of gen_dashboards.py")
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
    "job": "trainscope-tasks", "sidecar_job": "trainscope-sidecars",
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



# ------------------------------------------------------------ against a live Prometheus
# Used by the fire drill and the integration tests (tests/drill/): the dashboards' variables
# resolved as Grafana would, then every panel query over a time range.

def _prom_get(prom, path, params, timeout=30):
    url = f"{prom}{path}?" + urllib.parse.urlencode(params, doseq=True)
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as e:
        try:
            return json.loads(e.read() or b"{}")
        except ValueError:
            return {"status": "error", "error": f"HTTP {e.code}"}
    except (OSError, ValueError) as e:
        return {"status": "error", "error": str(e)}


def _regex_escape(value):
    """Grafana's escaping of one value of a multi-value variable for a PromQL regex."""
    return re.sub(r"([\\^$*+?.()|\[\]{}])", r"\\\\\1", value)


def resolve_variables(prom, templating, fixed, start, end):
    """The values Grafana gives a dashboard's variables on this Prometheus, as it interpolates
    them into PromQL: each query variable's options come from its label_values(...) query over
    [start, end]; its saved value is kept when among them, otherwise "All" (or the first option).
    Multi-value variables become a regex of their values. `fixed` (name -> text) wins.
    Returns (values, options per variable)."""
    values, options = dict(fixed), {}
    for v in templating:
        name = v.get("name")
        if name in fixed or v.get("type") != "query":
            if v.get("type") == "textbox" and name not in values:
                values[name] = (v.get("current") or {}).get("value", "")
            continue
        q = v.get("query")
        q = substitute(q.get("query") if isinstance(q, dict) else q, values)
        m = re.match(r"\s*label_values\((?:(.*),)?\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\)\s*$", q, re.S)
        if not m:
            raise ValueError(f"variable {name}: not a label_values query: {q}")
        params = {"start": f"{start:.0f}", "end": f"{end:.0f}"}
        if m.group(1):
            params["match[]"] = m.group(1).strip()
        body = _prom_get(prom, f"/api/v1/label/{m.group(2)}/values", params)
        found = sorted(body.get("data") or []) if body.get("status") == "success" else []
        options[name] = found
        current = (v.get("current") or {}).get("value")
        current = [current] if isinstance(current, str) else (current or [])
        chosen = [c for c in current if c in found]
        if not chosen or "$__all" in current:
            if v.get("includeAll"):
                if v.get("allValue"):
                    values[name] = v["allValue"]
                    continue
                chosen = found
            else:
                chosen = found[:1]
        if not v.get("multi") and not v.get("includeAll"):
            values[name] = chosen[0] if chosen else ""
        elif len(chosen) == 1:
            values[name] = _regex_escape(chosen[0])
        else:
            values[name] = "(" + "|".join(_regex_escape(c) for c in chosen) + ")"
    return values, options


def run_queries(prom, src, start, end, fixed, step=2, has_gpu=False, folder=None):
    """Runs every panel query of the dashboards (in folder, default the shipped ones) over
    [start, end] with each dashboard's variables resolved (resolve_variables). Returns
    (entries, problems, variables per dashboard): an entry per query with its result "data",
    "empty (allowed: ...)", "no data" or "error: ..."; problems lists the structure errors and
    every query that failed or returned nothing where data was due."""
    templating = {}
    problems, queries = check(src, variables_by_uid=templating, folder=folder)
    resolved, entries = {}, []
    for uid, tmpl in templating.items():
        try:
            resolved[uid] = resolve_variables(prom, tmpl, fixed, start, end)
        except ValueError as e:
            problems.append(f"{uid}: {e}")
            resolved[uid] = (dict(fixed), {})
    for q in queries:
        values = dict(DEFAULT_VALUES, **resolved[q["dashboard"]][0])
        expr = substitute(q["expr"], values)
        entry = {"dashboard": q["dashboard"], "panel": q["title"], "ref_id": q["ref_id"],
                 "expr": expr}
        body = _prom_get(prom, "/api/v1/query_range", {
            "query": expr, "start": f"{start:.0f}", "end": f"{end:.0f}", "step": str(step)})
        if body.get("status") != "success":
            entry["result"] = f"error: {body.get('error')}"
        else:
            series = [r for r in body["data"]["result"]
                      if any(v[1] not in ("NaN", "+Inf", "-Inf") for v in r["values"])]
            entry["series"] = len(series)
            if series:
                entry["result"] = "data"
            elif q["may_be_empty"] == "no-gpu" and not has_gpu:
                entry["result"] = "empty (allowed: no GPU on this machine)"
            else:
                entry["result"] = "no data"
        if entry["result"].startswith(("error", "no data")):
            problems.append(f"panel query {q['dashboard']} / {q['title']} {q['ref_id']}: "
                            f"{entry['result']}: {expr}")
        entries.append(entry)
    return entries, problems, {uid: r[0] for uid, r in resolved.items()}

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
