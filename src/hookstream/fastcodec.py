"""Hot-path Avro encoders for the two record types: pure, no I/O.

They write exactly the bytes ``hookstream.codec`` (fastavro) writes — property tests
compare them on generated values — from what PostgreSQL already hands over in wire-ready
form (ids as text, times as epoch microseconds), so a record costs no dataclass, UUID or
datetime objects and no schema walk. The profile justified them: fastavro's encoding was
40 % of the relay's CPU and most of the fanout's Python time per task (BENCHMARKS.md).
``hookstream.codec`` stays the reference and is used everywhere else.

Avro reminders: int/long are zigzag varints; string/bytes are a length (long) then the
bytes; a ``["null", X]`` union is the branch index then the value; an enum is its
symbol's index.
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

KIND_NEW = b"\x00"  # TaskKind symbols: NEW, RETRY, REPLAY, DEFERRED -> index 0
_UUID_TEXT_LEN = b"\x48"  # zigzag(36): a canonical UUID text is always 36 characters


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
