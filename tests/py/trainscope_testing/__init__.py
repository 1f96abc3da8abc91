"""trainscope's Python test helpers, in one package; standard library only.

Imported as `trainscope_testing.<module>` with tests/py on PYTHONPATH: ctest sets it through
each test's ENVIRONMENT; by hand, `PYTHONPATH=tests/py /usr/bin/python3 tests/...`.

- logs: `logger(tag)`, the `[tag HH:MM:SS] msg` lines every test prints.
- ports: `free_port()`, never the same port twice in one run.
- waiting: `wait_for()` and `HarnessError`, what a helper raises when the world is not as asked.
- skips: `skip()` and `skip_check()`, a suite or check this host cannot run: skipped, saying
  why; a failure in CI (CI=true).
- processes: `Proc`, one program started as its own pid and stopped by that pid only.
- web: `http_get`, `http_json`, `http_text`.
- cluster_spec: the TF_CONFIG of one task of a cluster.
- certs: CAs and leaf certificates made with openssl.
- nodes, netns: the nodes a cluster runs on: `nodes.Loopback` (all on 127.0.0.1) or
  `netns.Cluster` (a network namespace per node, root), both `nodes.Nodes`.
- training: `TrainingCluster`, tasks and sidecars on such nodes (tests/multinode, the drills).
- diagnosis: what the multi-node tests check in a sidecar's view.
- monitoring: Prometheus, Alertmanager and the webhook receiver of the drills.
- hostile: slow, idle and half-handshaken HTTP clients, and a prober (the HTTP load test).
- tensorflow_jobs: real TensorFlow jobs (tests/tensorflow's TF1 and TF2 programs) with the
  python of scripts/install-tensorflow, a TF_CONFIG per task, behind an optional exec prefix.
"""
