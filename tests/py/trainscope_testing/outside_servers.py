"""Servers that no one here wrote a heartbeat for: the tasks a sidecar watches from outside.

`grpc`: a gRPC server on Debian's python3-grpcio (as a TensorFlow ps is, to the sidecar: it
serves gRPC on its spec address and answers UNIMPLEMENTED to trainscope's Heartbeat), serving
one method of its own (`outside.Echo/Say`) and, with --health, `grpc.health.v1.Health/Check`
(SERVING); with --deny, every method answers PERMISSION_DENIED (an authenticating front that
answers no one it does not know: not UNIMPLEMENTED, so only --black_box_tasks makes the sidecar
watch it from outside). `tcp`: a plain TCP listener that accepts connections and never says a
word (no HTTP/2). Run as `python3 -m trainscope_testing.outside_servers grpc --port P
[--host H] [--health]`; `argv(...)` builds that command line for a test.
"""

import argparse
import signal
import socket
import sys
import threading
from concurrent import futures

# grpc.health.v1.HealthCheckResponse{status: SERVING}: field 1, varint 1.
_SERVING = b"\x08\x01"


def argv(kind, port, health=False, deny=False, host="127.0.0.1"):
    """The command line that runs server `kind` ("grpc" or "tcp") on host:port."""
    args = [sys.executable, "-m", "trainscope_testing.outside_servers", kind, "--port", str(port),
            "--host", host]
    return args + (["--health"] if health else []) + (["--deny"] if deny else [])


def _denier(grpc):
    """A handler of every method that answers PERMISSION_DENIED."""

    def deny(_request, context):
        context.abort(grpc.StatusCode.PERMISSION_DENIED, "unknown caller")

    class Denier(grpc.GenericRpcHandler):
        def service(self, _details):
            return grpc.unary_unary_rpc_method_handler(deny)
    return Denier()


def _serve_grpc(host, port, health, deny=False):
    import grpc  # python3-grpcio; imported here so that `tcp` needs nothing but the stdlib

    def say(request, _context):
        return request

    def check(_request, _context):
        return _SERVING

    handlers = [grpc.method_handlers_generic_handler(
        "outside.Echo", {"Say": grpc.unary_unary_rpc_method_handler(say)})]
    if health:
        handlers.append(grpc.method_handlers_generic_handler(
            "grpc.health.v1.Health", {"Check": grpc.unary_unary_rpc_method_handler(check)}))
    if deny:
        handlers = [_denier(grpc)]
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2), handlers=handlers)
    if server.add_insecure_port(f"{host}:{port}") != port:
        sys.exit(f"cannot listen on {host}:{port}")
    server.start()
    print(f"gRPC server on {host}:{port} (health: {health})", flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    stop.wait()
    server.stop(0)


def _serve_tcp(host, port):
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((host, port))
    listener.listen(64)
    print(f"plain TCP listener on {host}:{port}", flush=True)
    held = []  # accepted and never answered
    while True:
        conn, _ = listener.accept()
        held.append(conn)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kind", choices=["grpc", "tcp"])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--health", action="store_true", help="serve grpc.health.v1 too")
    parser.add_argument("--deny", action="store_true", help="answer PERMISSION_DENIED to all")
    args = parser.parse_args()
    if args.kind == "grpc":
        _serve_grpc(args.host, args.port, args.health, args.deny)
    else:
        _serve_tcp(args.host, args.port)


if __name__ == "__main__":
    main()
