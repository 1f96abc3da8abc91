#!/usr/bin/env python3
"""TF2 parameter-server training on real TensorFlow: ParameterServerStrategy with a
ClusterCoordinator on the chief, as TensorFlow's parameter-server tutorial runs it. One program
for every task, its role from TF_CONFIG: ps and worker tasks run a tf.distribute.Server and join
(forever); the chief (the coordinator) holds a linear regression's variables on the ps tasks
and schedules a tf.function step after step on the workers (a custom training loop, no Keras).

Run with scripts/install-tensorflow's python:
    TF_CONFIG='{"cluster": {...}, "task": {"type": "chief", "index": 0}}' \
        "$(scripts/install-tensorflow --print-python)" tests/tensorflow/tf2_ps.py --steps 500
The chief prints `variables: NAME@DEVICE ...` once, then `step N loss L rate R/s` every
--log_every steps (N: steps done by all workers together), and exits 0 after --steps steps.
An `evaluator` task (TensorFlow's side-car evaluator reads the coordinator's checkpoints; this
program writes none) says so once and idles until it is stopped, touching nothing and serving
nothing; the chief leaves it out of the cluster it connects to.
GRPC_FAIL_FAST=use_caller unless the environment sets it, as the tutorial recommends.
"""

import argparse
import os
import sys
import time

os.environ.setdefault("GRPC_FAIL_FAST", "use_caller")

import numpy as np  # noqa: E402  (after GRPC_FAIL_FAST, which TensorFlow reads at import)
import tensorflow as tf  # noqa: E402

FEATURES = 8
# The model the data comes from, the same in every task (a fixed seed), and what training finds.
_rng = np.random.default_rng(7)
TRUE_WEIGHTS = _rng.normal(size=(FEATURES, 1)).astype(np.float32)
TRUE_BIAS = np.float32(0.5)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=10**12,
                   help="steps the chief schedules, then exits 0 (default: effectively forever)")
    p.add_argument("--log_every", type=int, default=100, help="a progress line every K steps")
    p.add_argument("--threads", type=int, default=1,
                   help="intra-op and inter-op parallelism threads (default 1; a worker's "
                        "inter-op threads at least 2, else its steps hang)")
    p.add_argument("--hook", action="store_true",
                   help="report steps through trainscope's hook (python/trainscope: "
                        "trainscope.step(n) after each batch the coordinator joins)")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--learning_rate", type=float, default=0.001,
                   help="small, so that the loss falls over some thousand steps, not a hundred")
    return p.parse_args()


def serve(resolver, args):
    """A ps or worker task: a server that does what the coordinator asks, until stopped."""
    # A worker runs each step as a function with parts on the ps tasks; one inter-op thread
    # blocks on those parts and the step never ends (seen with 2.21: every step hung, no CPU).
    inter_op = args.threads if resolver.task_type == "ps" else max(args.threads, 2)
    config = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=args.threads,
                                      inter_op_parallelism_threads=inter_op)
    server = tf.distribute.Server(resolver.cluster_spec(), job_name=resolver.task_type,
                                  task_index=resolver.task_id,
                                  protocol=resolver.rpc_layer or "grpc", config=config,
                                  start=True)
    print(f"{resolver.task_type}:{resolver.task_id} serving at {server.target}", flush=True)
    server.join()


def idle_evaluator(task_id):
    print(f"evaluator:{task_id}: this program writes no checkpoints, so there is nothing to "
          "evaluate; idling until stopped", flush=True)
    while True:
        time.sleep(3600)


def train(resolver, args):
    """The coordinator: variables on the ps tasks, steps scheduled on the workers."""
    # The evaluator stays out of the cluster the coordinator connects to, as TensorFlow's own
    # distribute coordinator split it off: ParameterServerStrategy would wait, silently and
    # forever, for a server at its address (seen with 2.21).
    cluster = resolver.cluster_spec().as_dict()
    cluster.pop("evaluator", None)
    resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
        tf.train.ClusterSpec(cluster), task_type=resolver.task_type, task_id=resolver.task_id,
        rpc_layer=resolver.rpc_layer or "grpc")
    strategy = tf.distribute.experimental.ParameterServerStrategy(resolver)
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    with strategy.scope():
        # Round robin over the ps tasks: weights on ps:0, bias on ps:1.
        weights = tf.Variable(tf.zeros([FEATURES, 1]), name="weights")
        bias = tf.Variable(tf.zeros([1]), name="bias")
    print("variables: " + " ".join(f"{v.name.split(':')[0]}@{v.device}"
                                   for v in (weights, bias)), flush=True)

    @tf.function
    def train_step():
        def replica_fn():
            x = tf.random.normal([args.batch, FEATURES])
            y = tf.matmul(x, TRUE_WEIGHTS) + TRUE_BIAS + 0.01 * tf.random.normal([args.batch, 1])
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(tf.matmul(x, weights) + bias - y))
            grad_w, grad_b = tape.gradient(loss, [weights, bias])
            weights.assign_sub(args.learning_rate * grad_w)
            bias.assign_sub(args.learning_rate * grad_b)
            return loss
        return strategy.run(replica_fn)

    step = 0
    while step < args.steps:
        since = time.monotonic()
        batch = min(args.log_every, args.steps - step)
        results = [coordinator.schedule(train_step) for _ in range(batch)]
        coordinator.join()
        step += batch
        if args.hook:
            import trainscope  # the one line of a custom loop: trainscope.step(n)
            trainscope.step(batch)
        rate = batch / max(time.monotonic() - since, 1e-9)
        loss_value = float(results[-1].fetch())
        print(f"step {step} loss {loss_value:.4g} rate {rate:.1f}/s", flush=True)
    print(f"done after {step} steps", flush=True)


def main():
    args = parse_args()
    if not os.environ.get("TF_CONFIG"):
        sys.exit("tf2_ps.py: TF_CONFIG is not set")
    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    task_type = resolver.task_type
    if task_type in ("ps", "worker"):
        serve(resolver, args)
    elif task_type == "evaluator":
        idle_evaluator(resolver.task_id)
    elif task_type == "chief":
        train(resolver, args)
    else:
        sys.exit(f"tf2_ps.py: task type {task_type!r}: this program runs ps, worker, chief and "
                 "evaluator")
    return 0


if __name__ == "__main__":
    sys.exit(main())
