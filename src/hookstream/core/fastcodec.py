"""Hot-path Avro encoders for the two record types: pure, no I/O.

They write exactly the bytes ``hookstream.core.codec`` (fastavro) writes — property tests
compare them on generated values — from what PostgreSQL already hands over in wire-ready
form (ids as text, times as epoch microseconds), so a record costs no dataclass, UUID or
datetime objects and no schema walk. The profile justified them: fastavro's encoding was
40 % of the relay's CPU and most of the fanout's Python time per task (py-spy of
benchmarks/relay_fanout.py --profile).
``hookstream.core.codec`` stays the reference and is used everywhere else.

Avro reminders: int/long are zigzag varints; string/bytes are a length (long) then the
bytes; a ``["null", X]`` union is the branch index then the value; an enum is its
symbol's index.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from uuid import UUID, SafeUUID

from hookstream.core.codec import DeliveryTask, TaskKind

# magic byte 0, schema version 1 (see hookstream.core.codec)
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


# -- decoding the delivery task (the dispatcher reads one per attempt) --------------------
_KINDS = tuple(TaskKind)  # symbol order of the schema's enum
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    """(value, next position) of the zigzag varint at ``pos``; IndexError if cut short."""
    shift = result = 0
    while True:
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
        if shift > 63:
            raise ValueError("varint longer than a long")


def _uuid(text: bytes) -> UUID:
    # UUID(str) re-validates and re-strips in Python; this is its int path, done once.
    # The caller has matched the 36-character canonical layout.
    u = _new_uuid(UUID)
    _set(u, "int", int(text.replace(b"-", b""), 16))
    _set(u, "is_safe", SafeUUID.unknown)
    return u


_new_uuid = object.__new__
_set = object.__setattr__
_U = rb"([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})"
# magic 0, version 1, then three ids: each zigzag(36) == 0x48 and canonical UUID text
_IDS = re.compile(rb"\x00\x01\x48" + _U + rb"\x48" + _U + rb"\x48" + _U)


def decode_task(data: bytes) -> DeliveryTask:
    """``DeliveryTask.decode`` without fastavro's schema walk; same result on every input.

    Only the exact shape of schema version 1 with canonical UUID text is read here;
    anything else (another version, a malformed, odd or over-long record) goes to the
    reference decoder, which decodes it or raises its ``CodecError``: results and errors
    never differ between the two (tests/unit/test_fastcodec_task_decode.py).
    """
    try:
        m = _IDS.match(data)
        if m is None:
            raise ValueError("not the version-1 layout")
        n, pos = _varint(data, 113)
        if n < 0 or pos + n > len(data):
            raise ValueError("tenant cut short")
        tenant = data[pos:pos + n].decode("utf-8")
        pos += n
        kind, pos = _varint(data, pos)
        due_us, pos = _varint(data, pos)
        committed_us, pos = _varint(data, pos)
        lease, pos = _varint(data, pos)
        if pos != len(data) or not 0 <= kind < len(_KINDS) or not -2**31 <= lease < 2**31:
            raise ValueError("not the exact version-1 shape")
        delivery, event, endpoint = m.groups()
        return DeliveryTask(
            delivery_id=_uuid(delivery), event_id=_uuid(event), endpoint_id=_uuid(endpoint),
            tenant=tenant, kind=_KINDS[kind], due_at=_EPOCH + timedelta(microseconds=due_us),
            committed_at=_EPOCH + timedelta(microseconds=committed_us), lease_version=lease)
    except (ValueError, IndexError, OverflowError):
        return DeliveryTask.decode(data)
