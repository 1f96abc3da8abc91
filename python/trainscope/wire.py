"""trainscope.v1.HeartbeatResponse in protobuf's wire format, written by hand (the fields the
hook fills; proto/trainscope/v1/runtime.proto), so that the hook needs no generated code and
works with whatever protobuf the program has."""

import struct

PHASES = {"unknown": 0, "starting": 1, "creating_session": 2, "training": 3, "done": 4,
          "serving": 5, "leaving": 6}


def varint(n):
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def field_varint(num, n):
    return varint(num << 3) + varint(n)


def field_bytes(num, data):
    if isinstance(data, str):
        data = data.encode("utf-8", "replace")
    return varint((num << 3) | 2) + varint(len(data)) + data


def field_double(num, x):
    return varint((num << 3) | 1) + struct.pack("<d", float(x))


def task_id(role, index):
    return field_bytes(1, role) + field_varint(2, index)


def heartbeat(role, index, pid, hostname, listen_address, version, phase, steps, unix_seconds,
              last_step_seconds, expects_progress, waiting=None):
    """The serialized HeartbeatResponse. waiting: (what, since_unix, [(role, index, address)])."""
    identity = (field_bytes(1, task_id(role, index)) + field_bytes(3, version)
                + field_bytes(8, listen_address) + field_varint(9, pid)
                + field_bytes(10, hostname))
    out = field_bytes(1, identity) + field_varint(2, PHASES.get(phase, 0))
    if waiting:
        what, since, peers = waiting
        w = field_bytes(1, what) + field_double(2, since)
        for r, i, address in peers:
            w += field_bytes(3, field_bytes(1, task_id(r, i)) + field_bytes(2, address))
        out += field_bytes(3, w)
    out += field_varint(4, steps) + field_double(7, unix_seconds)
    if last_step_seconds > 0:
        out += field_double(9, last_step_seconds)
    if expects_progress:
        out += field_varint(10, 1)
    return out
