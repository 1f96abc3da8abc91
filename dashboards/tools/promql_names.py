"""Metric names used by PromQL expressions: a small tokenizer, enough for our rules and panels.

Shared by check_names.py and the dashboard checks. Standard library only.
"""

import re

# PromQL words that look like identifiers but are not metric names.
KEYWORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or",
    "unless", "offset", "inf", "nan", "atan2", "start", "end",
}
_IDENT = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")


def _strip(expr):
    """Removes string literals, label matchers, ranges, groupings and $variables."""
    expr = re.sub(r'"(\\.|[^"\\])*"', '""', expr)
    expr = re.sub(r"'(\\.|[^'\\])*'", "''", expr)
    expr = re.sub(r"`[^`]*`", "``", expr)
    expr = re.sub(r"\{[^}]*\}", "", expr)
    expr = re.sub(r"\[[^\]]*\]", "", expr)
    expr = _GROUPING.sub(" ", expr)
    expr = re.sub(r"\$\{?[a-zA-Z_][a-zA-Z0-9_:]*\}?", " ", expr)
    return expr


def metric_names(expr):
    """The metric names an expression selects (identifiers that are not functions or words)."""
    # Grafana's template-variable query functions name a metric as their first argument.
    m = re.match(r"\s*(label_values|metrics|query_result)\s*\((.*)\)\s*$", expr, re.S)
    if m and m.group(1) == "label_values":
        args = m.group(2)
        first = args.rsplit(",", 1)[0].strip() if "," in args else ""  # the label is last
        return metric_names(first) if first else set()
    if m and m.group(1) == "query_result":
        return metric_names(m.group(2))
    stripped = _strip(expr)
    names = set()
    for t in _IDENT.finditer(stripped):
        word = t.group(0)
        rest = stripped[t.end():].lstrip()
        if rest.startswith("("):
            continue  # a function or an aggregation
        if word.lower() in KEYWORDS:
            continue
        # A number such as 1e3 or a duration never starts with a letter here; an identifier
        # right after a digit is part of a number (1e3) or a duration (5m).
        if t.start() > 0 and stripped[t.start() - 1].isdigit():
            continue
        names.add(word)
    return names


def pinned_jobs(expr):
    """The `job` matchers of an expression that name a scrape job instead of a variable: rules
    and dashboards select by metric names, so that any scrape config works."""
    return [m.group(0) for m in re.finditer(r'\bjob\s*(=~|!~|=|!=)\s*"([^"]*)"', expr)
            if "$" not in m.group(2)]
