"""Forged exchange messages, as a process of the network without the cluster key sends them to a
sidecar's gRPC port (trainscope.sidecar.v1.Exchange). The protobuf is written by hand (the
wire format of proto/trainscope/sidecar/v1/sidecar.proto, with the hook's encoders), so that no
generated code is needed.

As a command (run inside a node: `ip netns exec NS scripts/python -m trainscope_testing.forge`):
    --to HOST:PORT --as NODE_ID --cluster NAME [--kind all] [--count 10]
prints one line per message sent: `KIND -> CODE: details`, and exits 0 whatever the answers.

Kinds: silent, suspect, left (a MemberUpdate about --as, as from --as, with a generation from
the future and a huge incarnation), dead_record (--as's record calling its tasks dead, dated an
hour ahead), stranger (members and records of nodes of no list), pingreq (a probe of arbitrary
targets: a unix socket, a far address), all (each of them). And, not part of "all" (another
service on the same port): spans (an OTLP TraceService/Export of a 30 s ps request named
"forged-slow-request", as the node's tasks send theirs).
"""

import argparse
import os
import struct
import sys
import time

# The encoders of the pip-installable hook (python/trainscope/wire.py), from this checkout.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..",
                                "python"))
from trainscope.wire import field_bytes, field_double, field_varint, varint  # noqa: E402

ALIVE, SUSPECT, SILENT, LEFT = 1, 2, 3, 4
KINDS = ("silent", "suspect", "left", "dead_record", "stranger", "pingreq")
OTLP_EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"


def header(cluster, node, generation):
    return (field_varint(1, 1) + field_bytes(2, cluster) + field_bytes(3, node)
            + field_varint(4, generation))


def member_update(node, status, generation, incarnation):
    return (field_bytes(1, node) + field_varint(2, generation) + field_varint(3, incarnation)
            + field_varint(4, status) + field_bytes(6, "forged"))


def task_view(role, index, state):
    return (field_bytes(2, role) + field_varint(3, index) + field_bytes(4, f"{role}:{index}")
            + field_bytes(6, state) + field_bytes(7, "forged: it is dead"))


def node_record(node, generation, version, made_at, tasks):
    out = (field_bytes(1, node) + field_varint(3, generation) + field_varint(4, version)
           + field_double(5, made_at))
    for role, index in tasks:
        out += field_bytes(6, task_view(role, index, "dead"))
    return out


def ping(cluster, sender, target, members=(), records=()):
    gossip = b"".join(field_bytes(1, r) for r in records)
    gossip += b"".join(field_bytes(2, m) for m in members)
    now_ns = int(time.time() * 1e9)
    return (field_bytes(1, header(cluster, sender, now_ns)) + field_bytes(2, target)
            + field_bytes(3, gossip))


def ping_req(cluster, sender, target):
    now_ns = int(time.time() * 1e9)
    return (field_bytes(1, header(cluster, sender, now_ns)) + field_bytes(2, target)
            + field_varint(3, 500))


def messages(kind, cluster, sender, to, tasks):
    """[(method, payload)] of one forged message of `kind`."""
    future = int((time.time() + 10 * 365 * 86400) * 1e9)
    huge = 1 << 50
    if kind in ("silent", "suspect", "left"):
        status = {"silent": SILENT, "suspect": SUSPECT, "left": LEFT}[kind]
        return [("Ping", ping(cluster, sender, to, members=[member_update(
            sender, status, future, huge)]))]
    if kind == "dead_record":
        return [("Ping", ping(cluster, sender, to, records=[node_record(
            sender, int(time.time() * 1e9), huge, time.time() + 3600, tasks)]))]
    if kind == "stranger":
        return [("Ping", ping(cluster, "10.99.0.1:4317", to,
                              members=[member_update(f"10.99.0.{i}:4317", ALIVE, 1, 1)
                                       for i in range(2, 50)],
                              records=[node_record(f"10.99.0.{i}:4317", 1, 1, time.time(), [])
                                       for i in range(2, 50)]))]
    if kind == "pingreq":
        return [("PingReq", ping_req(cluster, sender, t))
                for t in ("unix:/run/docker.sock", "169.254.169.254:80", "10.99.0.7:4317")]
    raise ValueError(kind)


def field_fixed64(num, n):
    return varint((num << 3) | 1) + struct.pack("<Q", n)


def forged_spans():
    """An ExportTraceServiceRequest of one client span, 30 s long, ending now."""
    now = int(time.time() * 1e9)
    span = (field_bytes(1, bytes(range(1, 17))) + field_bytes(2, bytes(range(1, 9)))
            + field_bytes(5, "forged-slow-request") + field_varint(6, 3)
            + field_fixed64(7, now - 30 * 10**9) + field_fixed64(8, now))
    return field_bytes(1, field_bytes(2, field_bytes(2, span)))


def send(channel, method, payload, timeout=3.0):
    import grpc  # Debian's python3-grpc; imported here so that the encoders need nothing
    path = (method if method.startswith("/")
            else f"/trainscope.sidecar.v1.Exchange/{method}")
    call = channel.unary_unary(path,
                               request_serializer=lambda b: b,
                               response_deserializer=lambda b: b)
    try:
        call(payload, timeout=timeout)
        return "OK", ""
    except grpc.RpcError as e:
        return e.code().name, e.details() or ""


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--to", required=True, help="host:port of a sidecar's gRPC port")
    ap.add_argument("--as", dest="sender", required=True, help="the node id to speak as")
    ap.add_argument("--cluster", required=True)
    ap.add_argument("--kind", default="all", choices=(*KINDS, "all", "spans"))
    ap.add_argument("--count", type=int, default=10)
    ap.add_argument("--tasks", default="worker:0",
                    help="role:index,... the forged record calls dead")
    ap.add_argument("--tls", nargs=3, metavar=("CERT", "KEY", "CA"),
                    help="speak mutual TLS, presenting CERT and KEY, trusting CA")
    args = ap.parse_args(argv)
    import grpc
    tasks = [(t.split(":")[0], int(t.split(":")[1])) for t in args.tasks.split(",") if t]
    kinds = KINDS if args.kind == "all" else (args.kind,)
    if args.tls:
        cert, key, ca = (open(p, "rb").read() for p in args.tls)
        channel = grpc.secure_channel(args.to, grpc.ssl_channel_credentials(ca, key, cert))
    else:
        channel = grpc.insecure_channel(args.to)
    with channel:
        for _ in range(args.count):
            if args.kind == "spans":
                code, details = send(channel, OTLP_EXPORT, forged_spans())
                print(f"spans -> {code}: {details}", flush=True)
                continue
            for kind in kinds:
                for method, payload in messages(kind, args.cluster, args.sender, args.to, tasks):
                    code, details = send(channel, method, payload)
                    print(f"{kind} -> {code}: {details}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
