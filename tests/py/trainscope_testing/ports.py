"""Free TCP ports on 127.0.0.1, asked of the OS (bind to port 0)."""

import socket

from trainscope_testing.waiting import HarnessError

_taken = set()  # every port handed out in this process


def free_port():
    """A port the OS just gave for 127.0.0.1 and that this process has not been given before
    (a port handed out but not yet bound by its program must not be handed out again)."""
    for _ in range(50):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _taken:
            _taken.add(port)
            return port
    raise HarnessError("no free port")
