"""The fanout's hot-path encoder of ``delivery_task.v1`` (kind NEW): pure, no I/O.

It writes exactly the bytes ``hookstream.codec.DeliveryTask.encode`` writes (a unit test
compares them) from the text ids PostgreSQL returns, so a task costs no UUID or datetime
objects and no fastavro schema walk — per task that is most of the fanout's Python time
(BENCHMARKS.md). Avro: zigzag varints for int/long, length-prefixed strings, an enum is
its symbol's index.
"""

from __future__ import annotations

HEADER = bytes((0, 1))  # magic 0, schema version 1 (hookstream.codec)
KIND_NEW = b"\x00"  # TaskKind symbols: NEW, RETRY, REPLAY, DEFERRED -> index 0
_UUID_TEXT_LEN = b"\x48"  # zigzag(36): a canonical UUID text is always 36 characters


def zigzag_varint(n: int) -> bytes:
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def encode_new_task(
    delivery_id: str,
    event_id: str,
    endpoint_id: str,
    tenant: str,
    due_at_us: int,
    committed_at_us: int,
    lease_version: int,
) -> bytes:
    """Ids are canonical UUID text (36 characters); times are epoch microseconds."""
    tenant_raw = tenant.encode()
    return b"".join((
        HEADER,
        _UUID_TEXT_LEN, delivery_id.encode(),
        _UUID_TEXT_LEN, event_id.encode(),
        _UUID_TEXT_LEN, endpoint_id.encode(),
        zigzag_varint(len(tenant_raw)), tenant_raw,
        KIND_NEW,
        zigzag_varint(due_at_us),
        zigzag_varint(committed_at_us),
        zigzag_varint(lease_version),
    ))
