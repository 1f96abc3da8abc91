#!/usr/bin/python3
"""Checks that every metric name the alert rules and dashboards use is one the code exports.

Names come from the one names header of both binaries
(telemetry/include/trainscope/telemetry/names.h); a histogram family may be used with
_bucket, _sum or _count; `up` and `ALERTS` belong to Prometheus. No expression may pin a scrape
job (`job="..."`): any job names must work. Names proposed but not yet in a
header are listed in dashboards/prometheus/pending_metrics.txt: they are reported, and fail the
check only with --strict. Also checks that every runbook_url points to a section of
docs/alerts.md that exists.

Usage: check_names.py SOURCE_DIR [--strict]
"""

import glob
import json
import os
import re
import sys

import yaml

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from promql_names import metric_names, pinned_jobs  # noqa: E402

HEADERS = ["telemetry/include/trainscope/telemetry/names.h"]
PROMETHEUS_OWN = {"up", "ALERTS", "ALERTS_FOR_STATE", "scrape_duration_seconds",
                  "scrape_samples_scraped"}
SUFFIXES = ("_bucket", "_sum", "_count")


def header_names(src):
    names = set()
    for h in HEADERS:
        path = os.path.join(src, h)
        if not os.path.exists(path):
            print(f"note: {h} does not exist yet")
            continue
        with open(path) as f:
            text = f.read()
        # `inline constexpr ... kFoo[] = "name";`, possibly broken over two lines.
        for m in re.finditer(r'\bk\w+(\[\])?\s*=\s*"([a-zA-Z_:][a-zA-Z0-9_:]*)"', text):
            names.add(m.group(2))
    return names


def known(name, names):
    if name in names or name in PROMETHEUS_OWN:
        return True
    return any(name.endswith(s) and name[: -len(s)] in names for s in SUFFIXES)


def rule_exprs(src):
    out = []
    for path in sorted(glob.glob(os.path.join(src, "dashboards/prometheus/*.yml"))):
        with open(path) as f:
            doc = yaml.safe_load(f)
        if not isinstance(doc, dict) or "groups" not in doc:
            continue
        for g in doc["groups"]:
            for r in g["rules"]:
                where = f"{os.path.relpath(path, src)}: {r.get('alert') or r.get('record')}"
                out.append((where, r["expr"]))
                for key, text in (r.get("annotations") or {}).items():
                    # Queries inside annotation templates: printf "QUERY" ... | query
                    for q in re.findall(r'printf\s+"((?:\\.|[^"\\])*)"', text):
                        out.append((f"{where} annotation {key}", q.replace('\\"', '"')))
                    if key == "runbook_url":
                        out.append((f"{where} runbook", "RUNBOOK " + text))
    return out


def dashboard_exprs(src):
    out = []
    for path in sorted(glob.glob(os.path.join(src, "dashboards/grafana/dashboards/*.json"))):
        with open(path) as f:
            d = json.load(f)
        rel = os.path.relpath(path, src)

        def panels(ps):
            for p in ps:
                yield p
                yield from panels(p.get("panels", []))

        for p in panels(d.get("panels", [])):
            for t in p.get("targets", []):
                if "expr" in t:
                    out.append((f"{rel}: panel {p.get('id')} '{p.get('title')}'", t["expr"]))
        for v in d.get("templating", {}).get("list", []):
            q = v.get("query")
            if v.get("type") == "query":
                q = q.get("query") if isinstance(q, dict) else q
                out.append((f"{rel}: variable {v.get('name')}", q))
    return out


def main():
    src = sys.argv[1]
    strict = "--strict" in sys.argv
    names = header_names(src)
    pending = {}
    pending_path = os.path.join(src, "dashboards/prometheus/pending_metrics.txt")
    if os.path.exists(pending_path):
        with open(pending_path) as f:
            for line in f:
                line = line.split("#", 1)[0].strip()
                if line:
                    name, _, why = line.partition(" ")
                    pending[name] = why.strip()
    with open(os.path.join(src, "docs/alerts.md")) as f:
        runbook = f.read()
    anchors = {re.sub(r"[^a-z0-9 _-]", "", h.strip().lower()).replace(" ", "-")
               for h in re.findall(r"^#+\s+(.*)$", runbook, re.M)}

    failures, used_pending, checked = [], set(), 0
    for where, expr in rule_exprs(src) + dashboard_exprs(src):
        if expr.startswith("RUNBOOK "):
            anchor = expr.split("#", 1)[-1]
            if not expr.startswith("RUNBOOK https://") or anchor not in anchors:
                failures.append(f"{where}: no section #{anchor} in docs/alerts.md")
            continue
        if pinned_jobs(expr):
            failures.append(f"{where}: pins a scrape job {pinned_jobs(expr)}: select by metric "
                            "names (any job names must work)")
        for n in sorted(metric_names(expr)):
            checked += 1
            if known(n, names):
                continue
            base = next((n[: -len(s)] for s in SUFFIXES if n.endswith(s)), n)
            if n in pending or base in pending:
                used_pending.add(n if n in pending else base)
                continue
            failures.append(f"{where}: unknown metric {n!r} in: {' '.join(expr.split())}")
    for n in sorted(used_pending):
        print(f"PENDING: {n} is used but not yet exported ({pending[n]})")
        if n in names:
            print("  ... it is in a names header now: remove it from pending_metrics.txt")
    for f in failures:
        print("FAIL:", f)
    if strict and used_pending:
        failures.append("pending names used (--strict)")
    print(f"{checked} metric references checked against {len(names)} header names; "
          f"{len(failures)} failures, {len(used_pending)} pending")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
