"""Waiting for a condition, and the error a helper raises when the world is not as asked."""

import time


class HarnessError(Exception):
    """A helper could not do what it was asked (a timeout, a command that failed); the drills
    call it DrillError."""


def wait_for(what, predicate, timeout, interval=0.2, log=None, errors=(OSError, ValueError)):
    """Calls predicate every `interval` s until it returns a truthy value, which it returns;
    HarnessError after `timeout` s naming `what` and the last of `errors` the predicate raised
    (meaning "not yet"; urllib's and ssl's errors are OSErrors). log, when given, is told
    `ok: what`."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            value = predicate()
            if value:
                if log:
                    log(f"ok: {what}")
                return value
        except errors as e:
            last = e
        time.sleep(interval)
    raise HarnessError(f"timed out after {timeout:.0f} s waiting for {what}"
                       + (f" (last error: {last})" if last else ""))
