"""cgroup v1 groups the multi-node tests make for real faults: a CPU quota (a straggler)."""

import os
import time

from trainscope_testing.netns import HarnessError


class CpuCgroup:
    """A cgroup v1 cpu group beneath this process's own, with a CPU quota; removed on exit."""

    def __init__(self, name, quota_cores):
        own = ""
        with open("/proc/self/cgroup") as f:
            for line in f:
                _, controllers, path = line.rstrip("\n").split(":", 2)
                if "cpu" in controllers.split(","):
                    own = os.path.join("/sys/fs/cgroup", controllers, path.lstrip("/"))
        if not own or not os.path.isdir(own):
            raise HarnessError("no cgroup v1 cpu hierarchy here (/proc/self/cgroup)")
        self.parent = own
        self.path = os.path.join(own, f"trainscope-test-{os.getpid()}-{name}")
        os.mkdir(self.path)
        self.write("cpu.cfs_period_us", 100000)
        self.write("cpu.cfs_quota_us", int(quota_cores * 100000))

    def write(self, name, value, where=None):
        with open(os.path.join(where or self.path, name), "w") as f:
            f.write(f"{value}\n")

    def add(self, pid):
        self.write("cgroup.procs", pid)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        """Moves every process back to the parent group and removes this one."""
        with open(os.path.join(self.path, "cgroup.procs")) as f:
            for pid in f.read().split():
                try:
                    self.write("cgroup.procs", pid, self.parent)
                except OSError:
                    pass  # It exited meanwhile.
        for _ in range(100):
            try:
                os.rmdir(self.path)
                return
            except OSError:
                time.sleep(0.05)
