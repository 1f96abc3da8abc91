"""What a test does when this host cannot run it (no root, no network namespaces, a tool missing).

On a developer's machine the suite, or one check of it, is skipped with one line saying why. In
CI (the environment has CI=true) that line says FAILED instead and the process exits 1: there a
skipped suite would hide that it never ran, and scripts/install-deps installs what every suite
needs. Standard library only.
"""

import os
import sys

SKIP_CODE = 77  # ctest's SKIP_RETURN_CODE for the suites that can be skipped.


def in_ci():
    """True when the environment says this is a CI run (CI=true, as CI services set it)."""
    return os.environ.get("CI", "").lower() == "true"


def _fail_in_ci(what, why):
    if in_ci():
        print(f"FAILED {what}: {why} (CI=true: a suite that cannot run fails the run)",
              flush=True)
        sys.exit(1)


def skip(what, why):
    """Ends the process because `what` (a whole suite) cannot run here, for the reason `why`:
    one line and exit SKIP_CODE; in CI one line and exit 1. Raises SystemExit, so the `finally`
    blocks of the caller still run."""
    _fail_in_ci(what, why)
    print(f"SKIPPED {what}: {why}", flush=True)
    sys.exit(SKIP_CODE)


def skip_check(what, why, log):
    """`what`, one check of a suite, cannot run here for the reason `why`: logs that it is
    skipped and returns, so the suite goes on; in CI ends the process as skip() does."""
    _fail_in_ci(what, why)
    log(f"skipped {what}: {why}")
