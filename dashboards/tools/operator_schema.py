"""The Prometheus Operator's CRD fields that our manifests use, and a check against them.

No CRD schema is packaged for Debian, so this holds, by hand, the part of the
monitoring.coreos.com/v1 PodMonitor and PrometheusRule schemas (prometheus-operator 0.93's CRDs)
that examples/kubernetes/ uses: field names, types, required fields, the duration pattern and
the relabel actions. A field outside it is an error: the API server prunes unknown fields of a
structural schema silently, so a misspelt one would simply vanish. Add fields here, from the
real CRD, when a manifest needs them. Standard library only.
"""

import re

DURATION = {"type": "string", "pattern": r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?"
                                         r"(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"}
STR, INT, BOOL = {"type": "string"}, {"type": "integer"}, {"type": "boolean"}
STR_MAP = {"type": "object", "additionalProperties": STR}
STRINGS = {"type": "array", "items": STR}
ACTIONS = ["replace", "keep", "drop", "hashmod", "labelmap", "labeldrop", "labelkeep",
           "lowercase", "uppercase", "keepequal", "dropequal"]
RELABEL = {"type": "object", "properties": {
    "action": {"type": "string", "enum": ACTIONS + [
        "Replace", "Keep", "Drop", "HashMod", "LabelMap", "LabelDrop", "LabelKeep", "Lowercase",
        "Uppercase", "KeepEqual", "DropEqual"]},
    "modulus": INT, "regex": STR, "replacement": STR, "separator": STR,
    "sourceLabels": STRINGS, "targetLabel": STR}}
LABEL_SELECTOR = {"type": "object", "properties": {
    "matchLabels": STR_MAP,
    "matchExpressions": {"type": "array", "items": {
        "type": "object", "required": ["key", "operator"],
        "properties": {"key": STR, "operator": STR, "values": STRINGS}}}}}
POD_MONITOR = {"type": "object", "required": ["selector"], "properties": {
    "selector": LABEL_SELECTOR,
    "namespaceSelector": {"type": "object", "properties": {"any": BOOL, "matchNames": STRINGS}},
    "jobLabel": STR, "podTargetLabels": STRINGS, "sampleLimit": INT,
    "podMetricsEndpoints": {"type": "array", "items": {"type": "object", "properties": {
        "port": STR, "portNumber": INT, "path": STR, "interval": DURATION,
        "scrapeTimeout": DURATION, "honorLabels": BOOL, "honorTimestamps": BOOL,
        "scheme": {"type": "string", "enum": ["http", "https", "HTTP", "HTTPS"]},
        "params": {"type": "object"}, "relabelings": {"type": "array", "items": RELABEL},
        "metricRelabelings": {"type": "array", "items": RELABEL}}}}}}
PROMETHEUS_RULE = {"type": "object", "properties": {"groups": {"type": "array", "items": {
    "type": "object", "required": ["name"], "properties": {
        "name": {"type": "string", "minLength": 1}, "interval": DURATION, "limit": INT,
        "labels": STR_MAP, "query_offset": DURATION,
        "rules": {"type": "array", "items": {
            "type": "object", "required": ["expr"], "properties": {
                "alert": STR, "record": STR, "expr": {"type": "int-or-string"},
                "for": DURATION, "keep_firing_for": DURATION, "labels": STR_MAP,
                "annotations": STR_MAP}}}}}}}}
SPECS = {("monitoring.coreos.com/v1", "PodMonitor"): POD_MONITOR,
         ("monitoring.coreos.com/v1", "PrometheusRule"): PROMETHEUS_RULE}
_TYPES = {"string": str, "integer": int, "boolean": bool, "object": dict, "array": list}


def validate(value, schema, where):
    """Problems of value against schema (a small subset of OpenAPI v3), each naming its path."""
    t = schema.get("type")
    if t == "int-or-string":
        ok = isinstance(value, (int, str)) and not isinstance(value, bool)
    else:
        ok = isinstance(value, _TYPES[t]) and not (t == "integer" and isinstance(value, bool))
    if not ok:
        return [f"{where}: {type(value).__name__}, the CRD wants {t}"]
    errors = []
    if t == "string":
        if "enum" in schema and value not in schema["enum"]:
            errors.append(f"{where}: {value!r} is not one of {schema['enum']}")
        if "pattern" in schema and not re.match(schema["pattern"], value):
            errors.append(f"{where}: {value!r} does not match {schema['pattern']}")
        if len(value) < schema.get("minLength", 0):
            errors.append(f"{where}: empty")
    elif t == "array":
        for i, item in enumerate(value):
            errors += validate(item, schema["items"], f"{where}[{i}]")
    elif t == "object":
        for key in schema.get("required", []):
            if key not in value:
                errors.append(f"{where}: required field {key} missing")
        props = schema.get("properties")
        for key, item in value.items():
            if props is not None and key in props:
                errors += validate(item, props[key], f"{where}.{key}")
            elif "additionalProperties" in schema:
                errors += validate(item, schema["additionalProperties"], f"{where}.{key}")
            elif props is not None:
                errors.append(f"{where}: field {key} is not in the CRD")
    return errors
