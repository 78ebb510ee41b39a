from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hookstream.core.codec import CodecError, DeliveryTask, EventEnvelope, TaskKind

times = st.datetimes(min_value=datetime(1971, 1, 1), max_value=datetime(2200, 1, 1),
                     timezones=st.just(UTC))


@given(
    tenant=st.text(max_size=50), type_=st.text(max_size=50), version=st.integers(0, 2**31 - 1),
    object_id=st.none() | st.text(max_size=20), object_version=st.none() | st.integers(0, 2**62),
    key=st.none() | st.text(max_size=20), occurred=times, committed=times,
    payload=st.binary(max_size=2000),
)
def test_event_envelope_round_trip(tenant: str, type_: str, version: int, object_id: str | None,
                                   object_version: int | None, key: str | None,
                                   occurred: datetime, committed: datetime, payload: bytes) -> None:
    e = EventEnvelope(uuid.uuid4(), tenant, type_, version, object_id, object_version, key,
                      occurred, committed, payload)
    assert EventEnvelope.decode(e.encode()) == e


@given(kind=st.sampled_from(list(TaskKind)), due=times, committed=times,
       lease=st.integers(0, 2**31 - 1))
def test_delivery_task_round_trip(kind: TaskKind, due: datetime, committed: datetime,
                                  lease: int) -> None:
    t = DeliveryTask(uuid.uuid4(), uuid.uuid4(), uuid.uuid4(), "acme", kind, due, committed, lease)
    decoded = DeliveryTask.decode(t.encode())
    assert decoded == t
    assert decoded.key == t.endpoint_id.bytes


def test_wire_format_starts_with_magic_and_version() -> None:
    now = datetime.now(UTC)
    data = DeliveryTask(uuid.uuid4(), uuid.uuid4(), uuid.uuid4(), "t", TaskKind.NEW, now,
                        now).encode()
    assert data[:2] == b"\x00\x01"


@pytest.mark.parametrize("data, message", [
    (b"", "bad magic"),
    (b"\x07\x01abc", "bad magic"),
    (b"\x00\x63abc", "unknown schema"),
    (b"\x00\x01", "corrupt"),
    (b"\x00\x01\xff\xff\xff\xff\xff\xff", "corrupt"),
])
def test_garbage_is_a_codec_error_not_a_crash(data: bytes, message: str) -> None:
    with pytest.raises(CodecError, match=message):
        EventEnvelope.decode(data)


@given(st.binary(max_size=200))
def test_arbitrary_bytes_decode_or_raise_codec_error(data: bytes) -> None:
    try:
        DeliveryTask.decode(data)
    except CodecError:
        pass
