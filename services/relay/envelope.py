"""The relay's hot-path encoder of ``event_envelope.v1``: pure, no I/O.

It writes exactly the bytes ``hookstream.codec.EventEnvelope.encode`` writes (a unit test
compares them on generated rows) from values PostgreSQL already hands over in wire-ready
form (the id as text, times as epoch microseconds), so a row is encoded without building
a dataclass, UUID or datetime objects, or walking the schema in fastavro — that walk was
40 % of the relay's CPU in the profile (BENCHMARKS.md).

Avro reminders: int/long are zigzag varints; string/bytes are a length (long) then the
bytes; a ``["null", X]`` union is the branch index (long) then the value.
"""

from __future__ import annotations

# magic byte 0, schema version 1 (see hookstream.codec)
HEADER = bytes((0, 1))
_SMALL = [bytes((((n << 1) ^ (n >> 63)) & 0xFF,)) for n in range(64)]  # zigzag(0..63) < 128
_NULL = b"\x00"
_SOME = b"\x02"  # union branch 1, zigzag(1) == 2


def zigzag_varint(n: int) -> bytes:
    """An Avro int/long: zigzag, then base-128 varint, low group first."""
    if 0 <= n < 64:
        return _SMALL[n]
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def _text(s: str) -> bytes:
    raw = s.encode()
    return zigzag_varint(len(raw)) + raw


def encode_envelope(
    event_id: str,
    tenant: str,
    type: str,
    schema_version: int,
    object_id: str | None,
    object_version: int | None,
    coalescing_key: str | None,
    occurred_at_us: int,
    committed_at_us: int,
    payload: bytes,
) -> bytes:
    """``event_id`` is the canonical UUID text; times are microseconds since the epoch."""
    return b"".join((
        HEADER,
        _text(event_id),
        _text(tenant),
        _text(type),
        zigzag_varint(schema_version),
        _NULL if object_id is None else _SOME + _text(object_id),
        _NULL if object_version is None else _SOME + zigzag_varint(object_version),
        _NULL if coalescing_key is None else _SOME + _text(coalescing_key),
        zigzag_varint(occurred_at_us),
        zigzag_varint(committed_at_us),
        zigzag_varint(len(payload)),
        payload,
    ))
