"""Free TCP ports on 127.0.0.1, below the kernel's ephemeral range.

A port handed out and not yet bound by its program must not be taken meanwhile: inside the
ephemeral range any outgoing connection's source port, or another program's port 0, can take
it (two CI runs failed so). Below the range only an explicit bind can. Each process walks its
own stretch (from its pid), so tests running side by side rarely meet, and a port something
already holds is skipped (tests/support/process.cc does the same for the C++ tests).
"""

import os
import socket

from trainscope_testing.waiting import HarnessError

_LOWEST = 10000
_taken = set()  # every port handed out in this process
_next = [0]


def _ephemeral_low():
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _can_bind(port):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the servers bind
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port():
    """A port nothing holds now, below the ephemeral range, not handed out before here."""
    top = _ephemeral_low()
    span = top - _LOWEST
    if span < 1000:
        raise HarnessError(f"the ephemeral port range starts at {top}: no room below it")
    if _next[0] == 0:
        _next[0] = _LOWEST + (os.getpid() * 2654435761) % span
    for _ in range(span):
        port = _next[0]
        _next[0] = port + 1 if port + 1 < top else _LOWEST
        if port not in _taken and _can_bind(port):
            _taken.add(port)
            return port
    raise HarnessError("no free port below the ephemeral range")
