"""The log lines of the tests: `[tag HH:MM:SS] msg`, flushed at once."""

import time


def logger(tag=None):
    """A function msg -> None printing `[tag HH:MM:SS] msg` (`[HH:MM:SS] msg` without tag)."""
    prefix = f"{tag} " if tag else ""

    def log(msg):
        print(f"[{prefix}{time.strftime('%H:%M:%S')}] {msg}", flush=True)
    return log
