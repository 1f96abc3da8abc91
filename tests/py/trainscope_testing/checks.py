"""The checks of a test program: each logged `ok` or `FAIL` as it is made, the failures listed at
the end, and the program's temporary folder kept when one failed (or when asked)."""

import shutil
import tempfile

from trainscope_testing.logs import logger
from trainscope_testing.waiting import HarnessError


class Checks:
    """check(ok, what) logs and records one check; check.run(...) runs the test's body."""

    def __init__(self, log=None):
        self.log = log or logger()
        self.failures = []

    def __call__(self, ok, what):
        self.log(("ok   " if ok else "FAIL ") + what)
        if not ok:
            self.failures.append(what)
        return ok

    def run(self, prefix, body, keep=False, errors=(HarnessError,)):
        """body(folder) in a new temporary folder named `prefix`...; an exception of `errors`
        (the harness could not do what the test needs) is one more failure. Returns the
        program's exit code: 0 when every check held, else 1."""
        d = tempfile.mkdtemp(prefix=prefix)
        try:
            body(d)
        except errors as e:
            self(False, str(e))
        finally:
            if self.failures or keep:
                self.log(f"logs kept in {d}")
            else:
                shutil.rmtree(d, ignore_errors=True)
        self.log(f"{len(self.failures)} failure(s)" + "".join(f"\n  {f}" for f in self.failures))
        return 1 if self.failures else 0
