"""The dashboards' own checker (dashboards/tools/check_dashboards.py of a source tree), which the
drills use to run every panel query against their Prometheus."""

import importlib.util
import os
import sys


def check_dashboards(src):
    """dashboards/tools/check_dashboards.py of source tree `src`, loaded once per run as the
    module `check_dashboards` (the tool stays a script of its own folder)."""
    module = sys.modules.get("check_dashboards")
    if module is None:
        path = os.path.join(src, "dashboards", "tools", "check_dashboards.py")
        spec = importlib.util.spec_from_file_location("check_dashboards", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules["check_dashboards"] = module
        spec.loader.exec_module(module)
    return module
