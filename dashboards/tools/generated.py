"""Writes generated files, or checks that they are current: shared by the generators.

Standard library only.
"""

import os


def write_or_check(root, files, check, command):
    """files: {path relative to root: text}. Writes those that differ, or with check only
    lists them. Prints what it did; returns the exit code (1: check found stale files)."""
    stale = []
    for rel, text in files.items():
        path = os.path.join(root, rel)
        current = open(path).read() if os.path.exists(path) else None
        if current != text:
            stale.append(rel)
            if not check:
                os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
                with open(path, "w") as f:
                    f.write(text)
    if check and stale:
        print(f"out of date (run {command}):", ", ".join(stale))
        return 1
    print(("checked " if check else "wrote ") + ", ".join(sorted(files)))
    return 0
