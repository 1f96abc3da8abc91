#!/usr/bin/python3
"""Checks the deployment examples as far as tools here allow.

examples/kubernetes/*.yaml: every document parses; apiVersion/kind is a pair the real API has;
metadata.name is set; workloads have containers with a name and an image; named ports used by
probes exist; selectors match the pods they select; ConfigMaps, Services and ServiceAccounts that
are referenced exist (or are listed as created by hand); the cluster spec names the pods' DNS names
(<job>-<index>.<subdomain>); the embedded Prometheus configuration passes `promtool check config`.
The generated Operator objects (gen_deploy.py): PodMonitor and PrometheusRule fields against the
CRDs' (operator_schema.py); PodMonitors select pods that have their port and the labels their
relabelings read; the PrometheusRule's groups equal alerts.yml; the dashboard ConfigMaps equal
dashboards/grafana/dashboards/*.json. dashboards/prometheus/scale-out/*.yml pass promtool.
The pods that run trainscope (kustomization.yaml and the security of the sidecar): the sidecar
sees its task's processes (hostPID in a DaemonSet, else shareProcessNamespace), no container is
privileged, the sidecar drops ALL capabilities and adds only SYS_PTRACE, DAC_READ_SEARCH and KILL
on a read-only root, the task runs as non-root with none; every trainscope container names the
image kustomization.yaml's one `images:` entry maps; $(VAR) references are defined (Kubernetes
would pass them on as text); cluster name and TF_CONFIG come from the downward API and the
cluster-spec ConfigMap; the sidecar's CREDENTIALS_DIRECTORY is a mounted Secret (the cluster
key, the token), not readable by every user.
examples/kubernetes/tfjob: a Kubeflow TFJob whose every replica runs the program in `tensorflow`
and the sidecar beside it in one process namespace, reading the operator's TF_CONFIG (it sets
none), with the sidecar's security and credentials and the same image mapping.
examples/systemd/*.service: `systemd-analyze verify` in a scratch root (no warning allowed); the
sidecar's unit has the packaged unit's settings (only its paths differ).
dashboards/grafana/provisioning/**: parses, apiVersion 1, the provider points at the dashboards.

Usage: check_examples.py SOURCE_DIR [--promtool PATH]
Needs python3-yaml.
"""

import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

import yaml

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from operator_schema import SPECS, validate  # noqa: E402

# apiVersion -> kinds, as the Kubernetes API (and the Prometheus Operator's CRDs) define them.
KNOWN = {
    "v1": {"ConfigMap", "Secret", "Service", "ServiceAccount", "Namespace", "Pod",
           "PersistentVolumeClaim"},
    "apps/v1": {"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet"},
    "batch/v1": {"Job", "CronJob"},
    "rbac.authorization.k8s.io/v1": {"Role", "RoleBinding", "ClusterRole",
                                     "ClusterRoleBinding"},
    "monitoring.coreos.com/v1": {"ServiceMonitor", "PodMonitor", "PrometheusRule", "Prometheus",
                                 "Alertmanager", "Probe"},
    "monitoring.coreos.com/v1alpha1": {"ScrapeConfig", "AlertmanagerConfig"},
}
KUSTOMIZATION = "kustomization.yaml"
WORKLOADS = {"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"}
# Objects the examples reference that the user creates by hand (the comments say how).
CREATED_BY_HAND = {("Secret", "trainscope-credentials")}  # kustomization.yaml's command


def check_kubernetes(src, promtool, errors):
    docs = []
    files = sorted(p for p in glob.glob(os.path.join(src, "examples/kubernetes/*.yaml"))
                   if os.path.basename(p) != KUSTOMIZATION)  # not an API object: see below
    if not files:
        errors.append("no examples/kubernetes/*.yaml")
    for path in files:
        rel = os.path.relpath(path, src)
        try:
            with open(path) as f:
                for d in yaml.safe_load_all(f):
                    if d is not None:
                        docs.append((rel, d))
        except yaml.YAMLError as e:
            errors.append(f"{rel}: does not parse: {e}")
    objects = {(d.get("kind"), (d.get("metadata") or {}).get("name")) for _, d in docs}
    pod_templates = []
    for rel, d in docs:
        api, kind = d.get("apiVersion"), d.get("kind")
        name = (d.get("metadata") or {}).get("name")
        where = f"{rel}: {kind} {name}"
        if kind not in KNOWN.get(api, set()):
            errors.append(f"{where}: apiVersion {api!r} has no kind {kind!r}")
        if not name:
            errors.append(f"{rel}: {kind} without metadata.name")
        if kind in WORKLOADS:
            spec = d.get("spec") or {}
            tmpl = spec.get("template") or {}
            labels = (tmpl.get("metadata") or {}).get("labels") or {}
            pod = tmpl.get("spec") or {}
            pod_templates.append((where, d, labels, pod))
            sel = (spec.get("selector") or {}).get("matchLabels")
            if kind != "Job" and (not sel or any(labels.get(k) != v for k, v in sel.items())):
                errors.append(f"{where}: selector {sel} does not match template labels {labels}")
            if kind == "Job":
                if pod.get("restartPolicy") not in ("OnFailure", "Never"):
                    errors.append(f"{where}: a Job's pods need restartPolicy OnFailure or Never")
                if spec.get("completionMode") not in (None, "NonIndexed", "Indexed"):
                    errors.append(f"{where}: completionMode {spec.get('completionMode')}")
            containers = pod.get("containers") or []
            if not containers:
                errors.append(f"{where}: no containers")
            for c in containers + (pod.get("initContainers") or []):
                cwhere = f"{where} container {c.get('name')}"
                if not c.get("name") or not c.get("image"):
                    errors.append(f"{cwhere}: needs name and image")
                if c in containers and "restartPolicy" in c:
                    errors.append(f"{cwhere}: restartPolicy only on initContainers (sidecars)")
                if c.get("restartPolicy") not in (None, "Always"):
                    errors.append(f"{cwhere}: container restartPolicy must be Always")
                port_names = set()
                for p in c.get("ports") or []:
                    if not isinstance(p.get("containerPort"), int) or \
                            not 0 < p["containerPort"] < 65536:
                        errors.append(f"{cwhere}: bad containerPort {p.get('containerPort')}")
                    if p.get("name"):
                        if len(p["name"]) > 15:
                            errors.append(f"{cwhere}: port name {p['name']} over 15 chars")
                        port_names.add(p["name"])
                for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
                    port = ((c.get(probe) or {}).get("httpGet") or {}).get("port")
                    if isinstance(port, str) and port not in port_names:
                        errors.append(f"{cwhere}: {probe} uses unknown port {port}")
                for vm in c.get("volumeMounts") or []:
                    if vm.get("name") not in {v.get("name") for v in pod.get("volumes") or []}:
                        errors.append(f"{cwhere}: mounts unknown volume {vm.get('name')}")
            for v in pod.get("volumes") or []:
                cm = (v.get("configMap") or {}).get("name")
                if cm and ("ConfigMap", cm) not in objects | CREATED_BY_HAND:
                    errors.append(f"{where}: volume uses ConfigMap {cm}, not defined")
                secret = (v.get("secret") or {}).get("secretName")
                if secret and ("Secret", secret) not in objects | CREATED_BY_HAND:
                    errors.append(f"{where}: volume uses Secret {secret}, not defined")
                mode = (v.get("secret") or {}).get("defaultMode", 0o644)
                if secret and mode & 0o007:
                    errors.append(f"{where}: Secret {secret} mounted readable by every user "
                                  f"(defaultMode {mode:o}): the sidecar refuses it")
            sa = pod.get("serviceAccountName")
            if sa and ("ServiceAccount", sa) not in objects:
                errors.append(f"{where}: serviceAccountName {sa} not defined")
            sub = pod.get("subdomain")
            if sub and ("Service", sub) not in objects:
                errors.append(f"{where}: subdomain {sub} has no headless Service")
    for rel, d in docs:
        kind, name = d.get("kind"), (d.get("metadata") or {}).get("name")
        if kind == "Service":
            sel = (d.get("spec") or {}).get("selector") or {}
            if sel and not any(all(l.get(k) == v for k, v in sel.items())
                               for _, _, l, _ in pod_templates):
                errors.append(f"{rel}: Service {name} selects no pod of the examples: {sel}")
        if kind in ("RoleBinding", "ClusterRoleBinding"):
            ref = d.get("roleRef") or {}
            if (ref.get("kind"), ref.get("name")) not in objects:
                errors.append(f"{rel}: {kind} {name} refers to missing {ref}")
        if kind == "PodMonitor":
            for ep in (d.get("spec") or {}).get("podMetricsEndpoints") or []:
                if not ep.get("port"):
                    errors.append(f"{rel}: PodMonitor {name} endpoint without port")
        if kind == "ScrapeConfig":
            for sd in (d.get("spec") or {}).get("httpSDConfigs") or []:
                if not str(sd.get("url", "")).startswith("http"):
                    errors.append(f"{rel}: ScrapeConfig {name} httpSDConfigs without url")
        if kind == "ConfigMap":
            data = d.get("data") or {}
            for key, text in data.items():
                if key.endswith(".json"):
                    try:
                        json.loads(text)
                    except ValueError as e:
                        errors.append(f"{rel}: ConfigMap {name} {key} is not JSON: {e}")
                if key == "prometheus.yml" and promtool:
                    check_prometheus_config(src, rel, name, text, promtool, errors)
            if "cluster.json" in data:
                check_cluster_spec(rel, json.loads(data["cluster.json"]), pod_templates, errors)
    return docs, pod_templates


def check_cluster_spec(rel, cluster, pod_templates, errors):
    """Every host of the spec is the DNS name of an Indexed Job pod: <job>-<i>.<subdomain>."""
    names = set()
    for _, d, labels, pod in pod_templates:
        spec = d.get("spec") or {}
        if d.get("kind") == "Job" and spec.get("completionMode") == "Indexed":
            for i in range(spec.get("completions", 0)):
                names.add(f"{d['metadata']['name']}-{i}.{pod.get('subdomain')}")
    for role, addrs in cluster.items():
        for a in addrs:
            host = a.rsplit(":", 1)[0]
            if host not in names:
                errors.append(f"{rel}: cluster spec {role} address {a}: no pod is named {host}")


def check_prometheus_config(src, rel, name, text, promtool, errors):
    tmp = tempfile.mkdtemp()
    try:
        cfg = yaml.safe_load(text)
        cfg["rule_files"] = [os.path.join(src, "dashboards/prometheus/alerts.yml")]
        path = os.path.join(tmp, "prometheus.yml")
        with open(path, "w") as f:
            yaml.safe_dump(cfg, f)
        r = subprocess.run([promtool, "check", "config", path], capture_output=True, text=True)
        if r.returncode != 0 and "field kubernetes_sd_configs not found" in r.stdout + r.stderr:
            # Debian's Prometheus is built without Kubernetes discovery: check the rest of the
            # configuration with the discovery replaced by a static target.
            print(f"note: {promtool} has no kubernetes_sd_configs (Debian builds it without); "
                  "checking the rest of the configuration")
            for job in cfg.get("scrape_configs", []):
                if job.pop("kubernetes_sd_configs", None) is not None:
                    job["static_configs"] = [{"targets": ["pod.example:9400"]}]
            with open(path, "w") as f:
                yaml.safe_dump(cfg, f)
            r = subprocess.run([promtool, "check", "config", path], capture_output=True,
                               text=True)
        if r.returncode != 0:
            errors.append(f"{rel}: ConfigMap {name} prometheus.yml fails promtool: "
                          f"{r.stdout}{r.stderr}")
    finally:
        shutil.rmtree(tmp)



def prom_label(name):
    """A Kubernetes label or annotation name as Prometheus' discovery spells it."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", name)


def check_pod_monitor(rel, d, pod_templates, errors):
    """The pods it selects exist, have the port, and the labels its relabelings read."""
    name = d["metadata"]["name"]
    sel = ((d.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
    pods = [(w, t, pod) for w, t, labels, pod in pod_templates
            if sel and all(labels.get(k) == v for k, v in sel.items())]
    if not pods:
        errors.append(f"{rel}: PodMonitor {name} selects no pod of the examples: {sel}")
    for ep in d["spec"].get("podMetricsEndpoints") or []:
        for where, t, pod in pods:
            containers = (pod.get("containers") or []) + (pod.get("initContainers") or [])
            ports = {p.get("name") for c in containers for p in c.get("ports") or []}
            if ep.get("port") not in ports:
                errors.append(f"{rel}: PodMonitor {name}: {where} has no port {ep.get('port')}")
            labels = {prom_label(k) for k in
                      ((t.get("spec") or {}).get("template") or {}).get("metadata", {})
                      .get("labels", {})}
            indexed = (t.get("spec") or {}).get("completionMode") == "Indexed"
            for r in ep.get("relabelings") or []:
                for src_label in r.get("sourceLabels") or []:
                    m = re.match(r"__meta_kubernetes_pod_(label|annotation)_(.+)$", src_label)
                    if not m:
                        continue
                    if m.group(1) == "label" and m.group(2) not in labels:
                        errors.append(f"{rel}: PodMonitor {name} reads {src_label}: {where} "
                                      "has no such label")
                    if m.group(1) == "annotation" and (
                            m.group(2) != prom_label("batch.kubernetes.io/job-completion-index")
                            or not indexed):
                        errors.append(f"{rel}: PodMonitor {name} reads {src_label}: only the "
                                      "completion index of an Indexed Job is known")


def check_operator(src, docs, pod_templates, promtool, errors):
    """The generated Prometheus Operator and Grafana objects (dashboards/tools/gen_deploy.py):
    fields against the CRDs (operator_schema.py), PodMonitors against the pods, the
    PrometheusRule's rules equal alerts.yml, the dashboard ConfigMaps equal the JSON files; and
    the scale-out configurations pass promtool (the agent's in agent mode)."""
    with open(os.path.join(src, "dashboards/prometheus/alerts.yml")) as f:
        rules_text = f.read()
    rules = yaml.safe_load(rules_text)
    dashboards = {os.path.basename(p): json.load(open(p)) for p in
                  glob.glob(os.path.join(src, "dashboards/grafana/dashboards/*.json"))}
    seen = {"PodMonitor": 0, "PrometheusRule": 0}
    for rel, d in docs:
        api, kind = d.get("apiVersion"), d.get("kind")
        name = (d.get("metadata") or {}).get("name")
        if (api, kind) in SPECS:
            seen[kind] += 1
            errors.extend(f"{rel}: {e}" for e in validate(d.get("spec"), SPECS[(api, kind)],
                                                          f"{kind} {name} spec"))
        if kind == "PodMonitor":
            check_pod_monitor(rel, d, pod_templates, errors)
        if kind == "PrometheusRule" and (d.get("spec") or {}).get("groups") != rules["groups"]:
            errors.append(f"{rel}: PrometheusRule {name}: its groups differ from "
                          "dashboards/prometheus/alerts.yml (run dashboards/tools/gen_deploy.py)")
        labels = (d.get("metadata") or {}).get("labels") or {}
        if kind == "ConfigMap" and labels.get("grafana_dashboard") == "1":
            for key, text in (d.get("data") or {}).items():
                if dashboards.pop(key, None) != json.loads(text):
                    errors.append(f"{rel}: ConfigMap {name}: {key} is not the dashboard of "
                                  "that name in dashboards/grafana/dashboards")
        if kind == "ConfigMap" and name == "trainscope-alerts" and \
                (d.get("data") or {}).get("alerts.yml") != rules_text:
            errors.append(f"{rel}: ConfigMap {name}: alerts.yml differs from the shipped one")
    for kind, n in seen.items():
        if not n:
            errors.append(f"examples/kubernetes: no {kind}")
    for key in sorted(dashboards):
        errors.append(f"examples/kubernetes: dashboard {key} has no ConfigMap for Grafana")
    scale_out = os.path.join(src, "dashboards/prometheus/scale-out")
    for name, extra in (("agent.yml", ["--agent"]), ("store.yml", [])):
        if not promtool:
            break
        r = subprocess.run([promtool, "check", "config"] + extra + [name], cwd=scale_out,
                           capture_output=True, text=True)
        if r.returncode != 0:
            errors.append(f"scale-out/{name} fails promtool check config {' '.join(extra)}: "
                          f"{r.stdout}{r.stderr}")

SIDECAR = "trainscope-sidecar"  # the sidecar's container name in the examples
SIDECAR_CAPS = {"SYS_PTRACE", "DAC_READ_SEARCH", "KILL"}  # docs/sidecar.md, "Kubernetes"
VAR_REF = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


def check_kustomization(src, errors):
    """kustomization.yaml: its resources exist; one `images:` entry, the name every trainscope
    container uses, mapped to a registry's image tagged with the project's version. Returns
    that name (None when missing)."""
    rel = f"examples/kubernetes/{KUSTOMIZATION}"
    path = os.path.join(src, rel)
    if not os.path.exists(path):
        errors.append(f"{rel}: missing (the one place the image is set)")
        return None
    k = yaml.safe_load(open(path))
    if (k.get("apiVersion"), k.get("kind")) != ("kustomize.config.k8s.io/v1beta1",
                                                 "Kustomization"):
        errors.append(f"{rel}: not a kustomize.config.k8s.io/v1beta1 Kustomization")
    for r in k.get("resources") or []:
        if not os.path.exists(os.path.join(src, "examples/kubernetes", r)):
            errors.append(f"{rel}: resource {r} does not exist")
    images = k.get("images") or []
    if len(images) != 1 or not images[0].get("name") or not images[0].get("newName"):
        errors.append(f"{rel}: needs exactly one images: entry with name and newName: {images}")
        return None
    m = re.search(r"project\(trainscope VERSION ([0-9.]+)",
                  open(os.path.join(src, "CMakeLists.txt")).read())
    if m and str(images[0].get("newTag")) != m.group(1):
        errors.append(f"{rel}: newTag {images[0].get('newTag')!r} is not the project's version "
                      f"{m.group(1)} (the tag packaging/oci/build-image.sh gives the image)")
    return images[0]["name"]


def check_pod_security(src, docs, pod_templates, errors):
    """The pods that run trainscope: what the sidecar may do, and only that (issue 36)."""
    image = check_kustomization(src, errors)
    config_maps = {(d.get("metadata") or {}).get("name"): d.get("data") or {}
                   for _, d in docs if d.get("kind") == "ConfigMap"}
    sidecars = 0
    for where, d, labels, pod in pod_templates:
        containers = (pod.get("containers") or []) + (pod.get("initContainers") or [])
        ours = [c for c in containers if c.get("name") == SIDECAR or
                "trainscope" in str(c.get("image"))]
        for c in containers:
            cwhere = f"{where} container {c.get('name')}"
            sc = c.get("securityContext") or {}
            if sc.get("privileged"):
                errors.append(f"{cwhere}: privileged (no container of the examples may be)")
            check_var_refs(cwhere, c, errors)
            for e in c.get("env") or []:
                ref = (e.get("valueFrom") or {}).get("configMapKeyRef")
                if ref and ref.get("key") not in config_maps.get(ref.get("name"), {}):
                    errors.append(f"{cwhere}: env {e.get('name')} reads ConfigMap "
                                  f"{ref.get('name')} key {ref.get('key')}, not defined")
        if not ours:
            continue
        for c in ours:
            cwhere = f"{where} container {c.get('name')}"
            if image and c.get("image") != image:
                errors.append(f"{cwhere}: image {c.get('image')!r}, not {image!r} (the name "
                              f"{KUSTOMIZATION} maps to the user's image)")
            sc = c.get("securityContext") or {}
            caps = sc.get("capabilities") or {}
            if caps.get("drop") != ["ALL"]:
                errors.append(f"{cwhere}: capabilities.drop {caps.get('drop')}, not [ALL]")
            if sc.get("allowPrivilegeEscalation") is not False:
                errors.append(f"{cwhere}: allowPrivilegeEscalation must be false")
            if sc.get("readOnlyRootFilesystem") is not True:
                errors.append(f"{cwhere}: readOnlyRootFilesystem must be true")
            if c.get("name") == SIDECAR:
                sidecars += 1
                if set(caps.get("add") or []) != SIDECAR_CAPS or \
                        len(caps.get("add") or []) != len(SIDECAR_CAPS):
                    errors.append(f"{cwhere}: capabilities.add {caps.get('add')}, not exactly "
                                  f"{sorted(SIDECAR_CAPS)}")
                sees = pod.get("hostPID") if d.get("kind") == "DaemonSet" else \
                    pod.get("shareProcessNamespace")
                if sees is not True:
                    errors.append(f"{where}: the sidecar cannot see the task's processes: "
                                  + ("hostPID" if d.get("kind") == "DaemonSet"
                                     else "shareProcessNamespace") + " must be true")
                env = {e.get("name"): e for e in c.get("env") or []}
                check_downward_api(cwhere, env, errors)
                check_sidecar_credentials(cwhere, c, pod, env, errors)
            else:
                if caps.get("add"):
                    errors.append(f"{cwhere}: a task needs no capability: add {caps['add']}")
                if sc.get("runAsNonRoot") is not True:
                    errors.append(f"{cwhere}: a task runs as non-root (runAsNonRoot: true)")
                env = {e.get("name"): e for e in c.get("env") or []}
                check_downward_api(cwhere, env, errors)
    if not sidecars:
        errors.append(f"examples/kubernetes: no container named {SIDECAR}")


def check_tfjob(src, errors):
    """examples/kubernetes/tfjob: a Kubeflow TFJob whose every replica runs the program in a
    `tensorflow` container and trainscope's sidecar beside it, in one process namespace (the
    sidecar reads the operator's TF_CONFIG from the program's process, so it sets none), with
    the sidecar's capabilities, security and credentials of the Indexed Job example, and the same
    image mapping."""
    folder = os.path.join(src, "examples/kubernetes/tfjob")
    rel_k = "examples/kubernetes/tfjob/kustomization.yaml"
    try:
        k = yaml.safe_load(open(os.path.join(folder, KUSTOMIZATION)))
        main_k = yaml.safe_load(open(os.path.join(src, "examples/kubernetes", KUSTOMIZATION)))
    except (OSError, yaml.YAMLError) as e:
        errors.append(f"{rel_k}: {e}")
        return
    if (k.get("images") or []) != (main_k.get("images") or []):
        errors.append(f"{rel_k}: images {k.get('images')} differ from ../{KUSTOMIZATION}'s")
    jobs = 0
    for r in k.get("resources") or []:
        rel = f"examples/kubernetes/tfjob/{r}"
        try:
            docs = [d for d in yaml.safe_load_all(open(os.path.join(folder, r))) if d]
        except (OSError, yaml.YAMLError) as e:
            errors.append(f"{rel}: {e}")
            continue
        for d in docs:
            if (d.get("apiVersion"), d.get("kind")) != ("kubeflow.org/v1", "TFJob"):
                errors.append(f"{rel}: {d.get('apiVersion')} {d.get('kind')}, not a TFJob")
                continue
            jobs += 1
            replicas = (d.get("spec") or {}).get("tfReplicaSpecs") or {}
            if not {"PS", "Worker"} <= set(replicas):
                errors.append(f"{rel}: a parameter-server TFJob has PS and Worker replicas")
            for rtype, spec in replicas.items():
                check_tfjob_pod(f"{rel}: {rtype}", ((spec.get("template") or {}).get("spec")
                                                     or {}), errors)
    if not jobs:
        errors.append(f"{rel_k}: no TFJob")


def check_tfjob_pod(where, pod, errors):
    if pod.get("shareProcessNamespace") is not True:
        errors.append(f"{where}: shareProcessNamespace must be true (the sidecar reads the "
                      "program's TF_CONFIG and sees its processes)")
    containers = pod.get("containers") or []
    if not any(c.get("name") == "tensorflow" for c in containers):
        errors.append(f"{where}: no container named tensorflow (the operator's name)")
    sidecars = [c for c in pod.get("initContainers") or [] if c.get("name") == SIDECAR]
    if len(sidecars) != 1:
        errors.append(f"{where}: needs one initContainer {SIDECAR} (a native sidecar)")
        return
    c = sidecars[0]
    cwhere = f"{where} container {SIDECAR}"
    if c.get("restartPolicy") != "Always" or c.get("image") != "trainscope":
        errors.append(f"{cwhere}: restartPolicy Always and image trainscope (kustomization's)")
    sc = c.get("securityContext") or {}
    caps = sc.get("capabilities") or {}
    if caps.get("drop") != ["ALL"] or sorted(caps.get("add") or []) != sorted(SIDECAR_CAPS):
        errors.append(f"{cwhere}: capabilities drop [ALL], add exactly {sorted(SIDECAR_CAPS)}")
    if sc.get("privileged") or sc.get("allowPrivilegeEscalation") is not False or \
            sc.get("readOnlyRootFilesystem") is not True:
        errors.append(f"{cwhere}: not privileged, no privilege escalation, read-only root")
    env = {e.get("name"): e for e in c.get("env") or []}
    if "TF_CONFIG" in env:
        errors.append(f"{cwhere}: sets TF_CONFIG; it takes the operator's from the program")
    field = ((env.get("TRAINSCOPE_CLUSTER") or {}).get("valueFrom") or {}).get("fieldRef") or {}
    if field.get("fieldPath") != "metadata.labels['training.kubeflow.org/job-name']":
        errors.append(f"{cwhere}: TRAINSCOPE_CLUSTER must be the TFJob's name (its pod label)")
    check_sidecar_credentials(cwhere, c, pod, env, errors)
    volumes = {v.get("name"): v for v in pod.get("volumes") or []}
    for cont in containers + [c]:
        for vm in cont.get("volumeMounts") or []:
            if vm.get("name") not in volumes:
                errors.append(f"{where} container {cont.get('name')}: mounts unknown volume "
                              f"{vm.get('name')}")
        if cont is not c and ((cont.get("securityContext") or {}).get("capabilities")
                              or {}).get("add"):
            errors.append(f"{where} container {cont.get('name')}: the program needs no "
                          "capability")
    for v in volumes.values():
        mode = (v.get("secret") or {}).get("defaultMode", 0o644)
        if v.get("secret") and mode & 0o007:
            errors.append(f"{where}: Secret volume {v.get('name')} readable by every user")


def check_sidecar_credentials(cwhere, c, pod, env, errors):
    """Secure by default: the sidecar's CREDENTIALS_DIRECTORY is a mounted Secret (its cluster
    key and token), else it would open no exchange with the other pods' sidecars."""
    where = (env.get("CREDENTIALS_DIRECTORY") or {}).get("value")
    secret_volumes = {v.get("name") for v in pod.get("volumes") or [] if v.get("secret")}
    mounted = {vm.get("mountPath"): vm.get("name") for vm in c.get("volumeMounts") or []}
    if not where or mounted.get(where) not in secret_volumes:
        errors.append(f"{cwhere}: CREDENTIALS_DIRECTORY must be a mounted Secret (the cluster "
                      f"key and the API token): {where!r}")


def check_downward_api(cwhere, env, errors):
    """The cluster name from the pod's label, TF_CONFIG from the ConfigMap and the pod's role
    and index (downward API): no task identity is written into a container by hand."""
    field = ((env.get("TRAINSCOPE_CLUSTER") or {}).get("valueFrom") or {}).get("fieldRef") or {}
    if field.get("fieldPath") != "metadata.labels['trainscope.io/cluster']":
        errors.append(f"{cwhere}: TRAINSCOPE_CLUSTER must come from the pod's label "
                      "trainscope.io/cluster (downward API)")
    tf = (env.get("TF_CONFIG") or {}).get("value") or ""
    for var in ("TRAINSCOPE_CLUSTER_SPEC", "TRAINSCOPE_ROLE", "TRAINSCOPE_TASK_INDEX"):
        if f"$({var})" not in tf:
            errors.append(f"{cwhere}: TF_CONFIG is not built from $({var})")
    for var in ("TRAINSCOPE_ROLE", "TRAINSCOPE_TASK_INDEX"):
        if not ((env.get(var) or {}).get("valueFrom") or {}).get("fieldRef"):
            errors.append(f"{cwhere}: {var} must come from the downward API (fieldRef)")


def check_var_refs(cwhere, c, errors):
    """Every $(VAR) in command, args and env values names a variable defined before it (an
    undefined one reaches the program as the text "$(VAR)")."""
    defined = set()
    for e in c.get("env") or []:
        for var in VAR_REF.findall(str(e.get("value", ""))):
            if var not in defined:
                errors.append(f"{cwhere}: env {e.get('name')} uses $({var}) before it is defined")
        defined.add(e.get("name"))
    for part in ("command", "args"):
        for arg in c.get(part) or []:
            for var in VAR_REF.findall(str(arg)):
                if var not in defined:
                    errors.append(f"{cwhere}: {part} {arg!r} uses $({var}), not in its env")


# What may differ between the example's sidecar unit and the packaged one: where things are.
UNIT_LOCAL_KEYS = ("Documentation", "EnvironmentFile", "ExecStart", "ConditionPathExists")


def unit_settings(path):
    """[(section, key=value)] of a unit file, comments and keys of UNIT_LOCAL_KEYS left out."""
    out, section = [], None
    for line in open(path):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("["):
            section = line
            continue
        if line.split("=", 1)[0] not in UNIT_LOCAL_KEYS:
            out.append((section, line))
    return out


def check_same_sandbox(src, errors):
    """examples/systemd/trainscope-sidecar.service runs the sidecar as the package does: the same
    capabilities, sandbox, state directory and credentials (only paths differ)."""
    example = os.path.join(src, "examples/systemd/trainscope-sidecar.service")
    packaged = os.path.join(src, "packaging/debian/trainscope-sidecar.service")
    a, b = unit_settings(example), unit_settings(packaged)
    if a != b:
        missing = [x for x in b if x not in a]
        extra = [x for x in a if x not in b]
        errors.append(f"examples/systemd/trainscope-sidecar.service differs from the packaged "
                      f"unit: missing {missing}, extra {extra}")


def check_systemd(src, errors):
    units = sorted(glob.glob(os.path.join(src, "examples/systemd/*.service")))
    if not units:
        errors.append("no examples/systemd/*.service")
    check_same_sandbox(src, errors)
    analyze = shutil.which("systemd-analyze")
    for u in units:
        text = open(u).read()
        for section, key in (("[Unit]", "Description="), ("[Service]", "ExecStart="),
                             ("[Install]", "WantedBy=")):
            if section not in text or key not in text:
                errors.append(f"{os.path.relpath(u, src)}: needs {section} {key}")
    if not analyze or not os.path.isdir("/usr/lib/systemd/system"):
        print("note: systemd-analyze (package systemd) not found; unit files checked for their "
              "keys only")
        return
    root = tempfile.mkdtemp()
    try:
        os.makedirs(os.path.join(root, "usr/local/bin"))
        os.makedirs(os.path.join(root, "etc/systemd/system"))
        shutil.copytree("/usr/lib/systemd/system", os.path.join(root, "usr/lib/systemd/system"),
                        symlinks=True)
        for exe in ("trainscope-sidecar", "linear_regression", "trainscopectl"):
            p = os.path.join(root, "usr/local/bin", exe)
            with open(p, "w") as f:
                f.write("#!/bin/sh\n")
            os.chmod(p, 0o755)
        names = []
        for u in units:
            shutil.copy(u, os.path.join(root, "etc/systemd/system"))
            base = os.path.basename(u)
            names.append(base.replace("@.service", "@ps-0.service"))
        r = subprocess.run([analyze, "verify", "--man=no", f"--root={root}"] + names,
                           capture_output=True, text=True)
        out = (r.stdout + r.stderr).strip()
        if r.returncode != 0 or out:
            errors.append(f"systemd-analyze verify: {out or r.returncode}")
    finally:
        shutil.rmtree(root)


def check_provisioning(src, errors):
    base = os.path.join(src, "dashboards/grafana/provisioning")
    ds = yaml.safe_load(open(os.path.join(base, "datasources/trainscope.yml")))
    if ds.get("apiVersion") != 1 or not any(d.get("type") == "prometheus"
                                            for d in ds.get("datasources", [])):
        errors.append("provisioning/datasources: needs apiVersion 1 and a prometheus source")
    uids = {d.get("uid") for d in ds.get("datasources", [])}
    if "trainscope-sidecars" not in uids:
        errors.append("provisioning/datasources: the sidecars' JSON source (uid "
                      "trainscope-sidecars) the Parameter servers dashboard uses is missing")
    prov = yaml.safe_load(open(os.path.join(base, "dashboards/trainscope.yml")))
    ps = prov.get("providers", [])
    if prov.get("apiVersion") != 1 or not ps or ps[0].get("type") != "file" or \
            "path" not in (ps[0].get("options") or {}):
        errors.append("provisioning/dashboards: needs apiVersion 1 and a file provider with a path")


def main():
    src = os.path.abspath(sys.argv[1])
    promtool = sys.argv[sys.argv.index("--promtool") + 1] if "--promtool" in sys.argv else None
    errors = []
    docs, pod_templates = check_kubernetes(src, promtool, errors)
    check_operator(src, docs, pod_templates, promtool, errors)
    check_pod_security(src, docs, pod_templates, errors)
    check_tfjob(src, errors)
    check_systemd(src, errors)
    check_provisioning(src, errors)
    for e in errors:
        print("FAIL:", e)
    print(f"{len(errors)} problems")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
