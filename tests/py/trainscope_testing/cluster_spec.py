"""TF_CONFIG, the cluster spec and task a linear_regression process reads from its environment."""

import json


def tf_config(cluster, role, index):
    """The TF_CONFIG string of task role:index of `cluster` ({"ps": [addr, ...], ...}, or a
    spec {"cluster": {...}} as the tests keep it)."""
    cluster = cluster.get("cluster", cluster)
    return json.dumps({"cluster": cluster, "task": {"type": role, "index": int(index)}})
