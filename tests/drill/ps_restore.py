"""The fire drill's ps-kill-restore scenario (issue 13): a ps killed mid-training comes back with
its checkpoint, the workers go on, and the job still ends as well as an undisturbed one.

The drill's tasks run with --checkpoint_dir (worker:0 saves every CHECKPOINT_EVERY_STEPS of its
steps). The scenario `kill -9`s ps:1, restarts it 1 s later with the same flags (a supervisor's
restart), and checks, from outside the processes:
  - the sidecar calls ps:1 up again with the reason "restored its variables from the checkpoint
    of step N" (the ps's heartbeat says what it restored);
  - both workers go on (no exit, no "lost its variables"), each logging "going on from step N+1";
  - the steps lost: worker:0's step counter before the kill (the sidecar's view, which stops
    moving while ps:1 is down, and the worker's own "was at step M") minus N is at most one
    interval;
  - fault -> ps:1 restored (the sidecar's view) -> both workers training again, timed.
At the end of the drill (finish_job) both workers are asked to finish (SIGUSR1), every task must
end `done`, and each worker's final loss (its "final loss" line, on held-out data) must be within
LOSS_FACTOR of the loss worker:0 trained at, undisturbed, just before the kill.
Standard library only; used by fire_drill.py.
"""

import os
import re
import signal
import time

LOG_TIME = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)\.(\d{3}) ")
RESTORED = re.compile(r"restored its variables from the checkpoint of step (\d+)")
GOING_ON = re.compile(r"going on from step (\d+) \(was at step (\d+)\)")
FINAL_LOSS = re.compile(r"final loss ([0-9.e+-]+) \(initial ([0-9.e+-]+)")
RESTART_DELAY_S = 1.0  # kill -9, then the restart a supervisor would make
LOSS_FACTOR = 2.0  # final loss at most this times the undisturbed loss before the kill
WORKERS = ("worker:0", "worker:1")


def view_of(drill, name):
    for t in drill.tasks_view():
        if f"{t.get('role')}:{t.get('task')}" == name:
            return t
    return {}


def log_since(proc, offset):
    try:
        with open(proc.log_path, errors="replace") as f:
            f.seek(offset)
            return f.read()
    except OSError:
        return ""


def log_size(proc):
    try:
        return os.path.getsize(proc.log_path)
    except OSError:
        return 0


def logged_at(text, pattern):
    """Unix time of the first log line (local time, to the ms) that matches pattern, or None."""
    for line in text.splitlines():
        m = LOG_TIME.match(line)
        if m and re.search(pattern, line):
            return time.mktime(time.strptime(m.group(1), "%Y-%m-%d %H:%M:%S")) + \
                int(m.group(2)) / 1000
    return None


def log_timings(drill, res, offsets, ps_offset):
    """From the processes' own log lines: kill -> ps:1 restored -> each worker going on."""
    t0 = res["fault_at"]
    out = {"restart_s": round(res["restart_at"] - t0, 3)}
    t = logged_at(log_since(drill.tasks["ps:1"], ps_offset), r"restored \d+ variables")
    if t:
        out["ps_restored_s"] = round(t - t0, 3)
    for w in WORKERS:
        t = logged_at(log_since(drill.tasks[w], offsets[w]), r"going on from step")
        if t:
            out[f"{w}_going_on_s"] = round(t - t0, 3)
    return out


def reference_loss(drill, cluster):
    """worker:0's training loss averaged over the last 20 s: the undisturbed run's level."""
    res = drill.prom_query(f'avg_over_time(trainscope_training_loss{{cluster="{cluster}", '
                           f'role="worker", task="0"}}[20s])')
    return float(res[0]["value"][1]) if res else None


def wait_trained_a_while(drill, wait_for, every):
    """Until worker:0 is past two checkpoint intervals and one checkpoint is on disk."""
    folder = os.path.join(drill.dir, "checkpoints")
    wait_for("worker:0 past two checkpoint intervals and a checkpoint saved", lambda: (
        int(view_of(drill, "worker:0").get("steps", 0)) > 2 * every
        and any(f.endswith(".tsckpt") for f in os.listdir(folder))), 120, interval=0.5)


def watch_restore(drill, t0, offsets, timeout):
    """Polls the sidecar and the workers' logs after the kill; returns what it saw, with times
    relative to t0."""
    seen = {"steps_before": offsets["worker:0 steps"], "restored_step": None,
            "going_on": {}}
    deadline = t0 + timeout
    while time.time() < deadline:
        now = time.time()
        # Its count before the kill: it stands still until worker:0 goes on (a heartbeat late).
        if seen["restored_step"] is None and "worker:0" not in seen["going_on"]:
            w0 = view_of(drill, "worker:0")
            seen["steps_before"] = max(seen["steps_before"], int(w0.get("steps", 0)))
        ps = view_of(drill, "ps:1")
        m = RESTORED.search(ps.get("reason", ""))
        if m and ps.get("state") == "up" and seen["restored_step"] is None:
            seen["restored_step"] = int(m.group(1))
            seen["ps_restored_s"] = round(now - t0, 2)
            seen["ps_reason"] = ps.get("reason")
        for w in WORKERS:
            g = GOING_ON.search(log_since(drill.tasks[w], offsets[w]))
            if g and w not in seen["going_on"]:
                seen["going_on"][w] = {"from": int(g.group(1)), "was_at": int(g.group(2))}
        if seen["restored_step"] is not None and len(seen["going_on"]) == len(WORKERS):
            # Training again: each worker's counter moved off its value at the kill (where it
            # stood while ps:1 was down), past the restored step.
            steps = {w: int(view_of(drill, w).get("steps", 0)) for w in WORKERS}
            if all(s > seen["restored_step"] and s != offsets[f"{w} steps"]
                   for w, s in steps.items()):
                seen["training_again_s"] = round(now - t0, 2)
                seen["steps_after"] = steps
                return seen
        time.sleep(0.1)
    return seen


def check_workers_went_on(drill, seen, offsets, failures):
    for w in WORKERS:
        out = log_since(drill.tasks[w], offsets[w])
        if not drill.tasks[w].alive():
            failures.append(f"{w} exited (code {drill.tasks[w].popen.returncode}) after the kill")
        for bad in ("lost its variables", "NOT_FOUND"):
            if bad in out:
                failures.append(f"{w} logged {bad!r} after the kill")
        if w not in seen["going_on"]:
            failures.append(f"{w} never logged 'going on from step' after the restore")
        elif seen["restored_step"] is not None and \
                seen["going_on"][w]["from"] != seen["restored_step"] + 1:
            failures.append(f"{w} went on from step {seen['going_on'][w]['from']}, not from the "
                            f"restored step {seen['restored_step']} + 1")


def steps_lost(seen, every, failures):
    """Steps lost by worker:0 (the saver, whose count is the checkpoint's), by its step counter
    in the sidecar's view and by its own log; each at most one interval."""
    n = seen["restored_step"]
    lost = {"by_counter": seen["steps_before"] - n}
    if "worker:0" in seen["going_on"]:
        lost["by_log"] = seen["going_on"]["worker:0"]["was_at"] - n
    for how, value in lost.items():
        # The step in flight when the kill came is not saved either: one more than the interval.
        if not 0 <= value <= every + 1:
            failures.append(f"steps lost {how} = {value}, more than one interval ({every})")
    return lost


def scenario(drill, cluster, every, h):
    """Runs ps-kill-restore; appends its result to drill.results."""
    res = {"scenario": "ps-kill-restore", "alert": "(none: not a page)",
           "labels": {"cluster": cluster, "role": "ps", "task": "1"}, "ok": False,
           "checkpoint_every_steps": every}
    drill.results.append(res)
    failures = []
    try:
        wait_trained_a_while(drill, h.wait_for, every)
        res["reference_loss"] = reference_loss(drill, cluster)
        drill.reference_loss = res["reference_loss"]
        offsets = {w: log_size(drill.tasks[w]) for w in WORKERS}
        ps_offset = log_size(drill.tasks["ps:1"])
        offsets.update({f"{w} steps": int(view_of(drill, w).get("steps", 0)) for w in WORKERS})
        t0 = time.time()
        res["fault_at"] = t0
        drill.tasks["ps:1"].kill9()
        time.sleep(RESTART_DELAY_S)
        res["restart_at"] = time.time()
        drill.start_task("ps:1")
        seen = watch_restore(drill, t0, offsets, 90)
        res.update({k: v for k, v in seen.items() if k != "going_on"}, going_on=seen["going_on"])
        if seen["restored_step"] is None:
            raise h.DrillError("the sidecar never said ps:1 restored its variables from a "
                               f"checkpoint (its reason: {view_of(drill, 'ps:1').get('reason')})")
        m = re.search(r"restored \d+ variables .* of step (\d+) from .* in ([0-9.]+) ms",
                      log_since(drill.tasks["ps:1"], ps_offset))
        if m:
            res["ps_log_restored_step"], res["restore_ms"] = int(m.group(1)), float(m.group(2))
        res["by_logs"] = log_timings(drill, res, offsets, ps_offset)
        check_workers_went_on(drill, seen, offsets, failures)
        res["steps_lost"] = steps_lost(seen, every, failures)
        if "training_again_s" not in seen:
            failures.append("the workers did not train past the restored step within 90 s")
    except h.DrillError as e:
        failures.append(str(e))
    res["ok"] = not failures
    res["error"] = "; ".join(failures)
    drill.failures += [f"scenario ps-kill-restore: {f}" for f in failures]
    h.log(f"  ps-kill-restore: {summary(res)}")
    return res


def summary(res):
    if not res.get("restored_step"):
        return res.get("error") or "no restore seen"
    return (f"restored step {res['restored_step']} (sidecar after {res.get('ps_restored_s')} s), "
            f"both workers training again after {res.get('training_again_s')} s, steps lost "
            f"{res.get('steps_lost')} (interval {res['checkpoint_every_steps']}); by the logs, "
            f"after the kill: {res.get('by_logs')}"
            + ("" if res["ok"] else f"; FAILED: {res['error']}"))


def finish_job(drill, h, quiet_s=15):
    """The job ends: every worker is asked to finish (SIGUSR1), every task must end `done`, each
    worker's final loss must be near the reference loss; nothing may page (quiet_s, then
    check_no_false_alarms)."""
    h.log("the job finishes (SIGUSR1 to both workers): every task done, nothing paged")
    offsets = {w: log_size(drill.tasks[w]) for w in WORKERS}
    for w in WORKERS:
        drill.should_run.discard(w)
        drill.tasks[w].signal(signal.SIGUSR1)
    everyone = sorted(drill.tasks)
    try:
        h.wait_for("every task done", lambda: all(drill.state_of(n) == "done" for n in everyone),
                 60, interval=0.3)
    except h.DrillError as e:
        states = {n: drill.state_of(n) for n in everyone}
        drill.failures.append(f"the job's end: {e} (states {states})")
        return
    drill.should_run.clear()
    drill.final_losses = {}
    for w in WORKERS:
        m = FINAL_LOSS.search(log_since(drill.tasks[w], offsets[w]))
        if not m:
            drill.failures.append(f"{w} logged no final loss")
            continue
        drill.final_losses[w] = {"final": float(m.group(1)), "initial": float(m.group(2))}
    check_final_loss(drill)
    time.sleep(quiet_s)
    drill.notes.append(f"the job finished (every task done); final losses {drill.final_losses}, "
                       f"reference {getattr(drill, 'reference_loss', None)}; waited {quiet_s} s "
                       "for any page")


def check_final_loss(drill):
    ref = getattr(drill, "reference_loss", None)
    for w, loss in drill.final_losses.items():
        if loss["final"] * 100 > loss["initial"]:
            drill.failures.append(f"{w}: final loss {loss['final']} not 100x below the initial "
                                  f"{loss['initial']}")
        if ref is not None and loss["final"] > LOSS_FACTOR * ref:
            drill.failures.append(f"{w}: final loss {loss['final']} is worse than {LOSS_FACTOR}x "
                                  f"the undisturbed loss before the kill ({ref:.6f})")
