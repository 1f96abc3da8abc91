"""Programs the tests start: each its own pid, its output in a log file, and stopped by that
pid only (never by name), so that a test ends what it started and nothing else."""

import os
import signal
import subprocess
import time


def tail(log_path, n=15):
    """The last n lines of the log at log_path ("" when there is none)."""
    try:
        with open(log_path, errors="replace") as f:
            return "".join(f.readlines()[-n:])
    except OSError:
        return ""


class Proc:
    """A program started by a test: its pid, its log (`logdir/name.log`, appended), and how to
    signal and stop it; node: the node it runs on, when started by nodes.Loopback. Not
    thread-safe."""

    def __init__(self, name, argv, logdir, env=None, node=None):
        self.name, self.argv, self.env, self.node = name, argv, env, node
        self.log_path = os.path.join(logdir, name.replace(":", "-") + ".log")
        self.popen = None
        self.stopped = False  # SIGSTOPped by us

    def start(self):
        """Starts the program (env added to this process's environment); returns self."""
        logf = open(self.log_path, "ab")
        logf.write(f"\n=== {time.strftime('%H:%M:%S')} {' '.join(self.argv)}\n".encode())
        logf.flush()
        env = dict(os.environ)
        env.update(self.env or {})
        self.popen = subprocess.Popen(self.argv, stdout=logf, stderr=subprocess.STDOUT, env=env,
                                      stdin=subprocess.DEVNULL)
        logf.close()
        return self

    @property
    def pid(self):
        return self.popen.pid if self.popen else None

    def alive(self):
        return self.popen is not None and self.popen.poll() is None

    @property
    def returncode(self):
        return self.popen.poll() if self.popen is not None else None

    def signal(self, sig):
        if self.alive():
            os.kill(self.popen.pid, sig)
            if sig == signal.SIGSTOP:
                self.stopped = True
            elif sig == signal.SIGCONT:
                self.stopped = False

    def stop(self, timeout=5.0):
        """SIGTERM (after SIGCONT when stopped); SIGKILL when it has not ended in timeout s."""
        if not self.alive():
            return
        if self.stopped:
            self.signal(signal.SIGCONT)
        self.popen.send_signal(signal.SIGTERM)
        self.reap(timeout)

    def reap(self, timeout):
        """Waits timeout s for the program to end, then SIGKILLs it."""
        try:
            self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait(5)

    def kill9(self):
        if self.alive():
            self.popen.kill()
            self.popen.wait(5)

    def tail(self, n=15):
        return tail(self.log_path, n)


class ProcGroup:
    """The programs of one test, stopped together: SIGTERM to all, then each waited for."""

    def __init__(self, logdir):
        self.logdir, self.procs = logdir, []

    def start(self, name, argv, env=None):
        """Starts argv as Proc `name` (log `logdir/name.log`); returns the Proc."""
        proc = Proc(name, argv, self.logdir, env).start()
        self.procs.append(proc)
        return proc

    def stop(self, timeout=10.0):
        for proc in self.procs:
            if proc.alive():
                proc.popen.terminate()
        for proc in self.procs:
            proc.reap(timeout)
