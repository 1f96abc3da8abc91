#!/usr/bin/env python3
"""TF1-style parameter-server training on real TensorFlow, as the jobs of the seed documents run:
one program for every task, its role from TF_CONFIG; a tf.compat.v1.train.Server per task; ps
tasks join (forever); the chief and the workers train a linear regression with
MonitoredTrainingSession, its variables spread over the ps tasks by replica_device_setter.

Run with scripts/install-tensorflow's python:
    TF_CONFIG='{"cluster": {...}, "task": {"type": "worker", "index": 0}}' \
        "$(scripts/install-tensorflow --print-python)" tests/tensorflow/tf1_ps.py --steps 500
Prints `variables: NAME@DEVICE ...` once, then `step N loss L rate R/s global_step G` every
--log_every steps (N: this task's steps; G: the whole job's). The chief and the workers exit 0
after --steps steps; ps tasks serve until they are stopped.
"""

import argparse
import json
import os
import sys
import threading
import time

import numpy as np
import tensorflow as tf

FEATURES = 8
# The model the data comes from, the same in every task (a fixed seed), and what training finds.
_rng = np.random.default_rng(7)
TRUE_WEIGHTS = _rng.normal(size=(FEATURES, 1)).astype(np.float32)
TRUE_BIAS = np.float32(0.5)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=10**12,
                   help="steps this task trains, then exits 0 (default: effectively forever)")
    p.add_argument("--log_every", type=int, default=100, help="a progress line every K steps")
    p.add_argument("--threads", type=int, default=1,
                   help="intra-op and inter-op parallelism threads (default 1)")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--learning_rate", type=float, default=0.001,
                   help="small, so that the loss falls over some thousand steps, not a hundred")
    p.add_argument("--hook", action="store_true",
                   help="add trainscope's hook (python/trainscope: hooks=[trainscope.StepHook()])")
    p.add_argument("--noop_hook", action="store_true",
                   help="add a SessionRunHook that does nothing (what TensorFlow's hook calls "
                        "cost by themselves: tests/bench/tf_hook_cost.py)")
    p.add_argument("--wedge_at_step", type=int, default=0,
                   help="at this step of this task, the training loop blocks forever (a wedged "
                        "loop: the process and its threads live on); 0: never")
    return p.parse_args()


def task_from_tf_config():
    """(cluster dict, task type, task index) from TF_CONFIG, exactly as TensorFlow reads it."""
    raw = os.environ.get("TF_CONFIG")
    if not raw:
        sys.exit("tf1_ps.py: TF_CONFIG is not set")
    tf_config = json.loads(raw)
    task = tf_config.get("task", {})
    return tf_config["cluster"], task["type"], int(task.get("index", 0))


def build_model(args, task_type, index, cluster):
    """The graph: variables on the ps tasks (replica_device_setter, round robin: global_step and
    bias on ps:0, weights on ps:1 with two ps), generated data and the step on this task."""
    device = tf.compat.v1.train.replica_device_setter(
        worker_device=f"/job:{task_type}/task:{index}", cluster=cluster)
    with tf.compat.v1.device(device):
        global_step = tf.compat.v1.train.get_or_create_global_step()
        weights = tf.compat.v1.get_variable("weights", [FEATURES, 1],
                                            initializer=tf.compat.v1.zeros_initializer())
        bias = tf.compat.v1.get_variable("bias", [1], initializer=tf.compat.v1.zeros_initializer())
        x = tf.random.normal([args.batch, FEATURES])
        y = tf.matmul(x, TRUE_WEIGHTS) + TRUE_BIAS + 0.01 * tf.random.normal([args.batch, 1])
        loss = tf.reduce_mean(tf.square(tf.matmul(x, weights) + bias - y))
        train_op = tf.compat.v1.train.GradientDescentOptimizer(args.learning_rate).minimize(
            loss, global_step=global_step)
    placed = " ".join(f"{v.op.name}@{v.device}" for v in (global_step, weights, bias))
    print(f"variables: {placed}", flush=True)
    return global_step, loss, train_op


def wait_for_chief(target, config):
    """Blocks until the chief has initialized the variables. A non-chief MonitoredTrainingSession
    waits for that too, but checks only every 30 s (SessionManager's recovery_wait_secs)."""
    uninitialized = tf.compat.v1.report_uninitialized_variables()
    with tf.compat.v1.Session(target, config=config) as sess:
        while len(sess.run(uninitialized)):
            time.sleep(0.5)


def main():
    args = parse_args()
    cluster_dict, task_type, index = task_from_tf_config()
    tf.compat.v1.disable_eager_execution()
    tf.compat.v1.logging.set_verbosity(tf.compat.v1.logging.INFO)
    cluster = tf.train.ClusterSpec(cluster_dict)
    config = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=args.threads,
                                      inter_op_parallelism_threads=args.threads)
    server = tf.compat.v1.train.Server(cluster, job_name=task_type, task_index=index,
                                       config=config)
    print(f"{task_type}:{index} serving at {server.target}", flush=True)
    if task_type == "ps":
        server.join()
        return 0
    if task_type not in ("chief", "worker"):
        sys.exit(f"tf1_ps.py: task type {task_type!r}: this program runs ps, chief and worker")

    # This task's sessions need the ps tasks and itself, not the other workers.
    config.device_filters.extend(["/job:ps", f"/job:{task_type}/task:{index}"])
    global_step, loss, train_op = build_model(args, task_type, index, cluster)
    is_chief = task_type == "chief"
    if not is_chief:
        wait_for_chief(server.target, config)
    hooks = []
    if args.hook:
        import trainscope  # the one line a user adds: hooks=[trainscope.StepHook()]
        hooks.append(trainscope.StepHook())
    if args.noop_hook:
        hooks.append(tf.compat.v1.train.SessionRunHook())
    with tf.compat.v1.train.MonitoredTrainingSession(
            master=server.target, is_chief=is_chief, config=config, checkpoint_dir=None,
            save_checkpoint_secs=None, save_summaries_steps=None, save_summaries_secs=None,
            log_step_count_steps=0, hooks=hooks) as sess:
        step, since, since_step = 0, time.monotonic(), 0
        while step < args.steps and not sess.should_stop():
            _, loss_value, job_step = sess.run([train_op, loss, global_step])
            step += 1
            if step == args.wedge_at_step:
                print(f"step {step}: wedged (--wedge_at_step)", flush=True)
                threading.Event().wait()
            if step % args.log_every == 0 or step == args.steps:
                now = time.monotonic()
                rate = (step - since_step) / max(now - since, 1e-9)
                print(f"step {step} loss {loss_value:.4g} rate {rate:.1f}/s "
                      f"global_step {job_step}", flush=True)
                since, since_step = now, step
    print(f"done after {step} steps", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
