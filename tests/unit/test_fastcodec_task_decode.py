"""The dispatcher's hand-rolled task decoder against fastavro's, on valid and broken input."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hookstream.core.codec import CodecError, DeliveryTask, TaskKind
from hookstream.core.fastcodec import decode_task

times = st.datetimes(min_value=datetime(1900, 1, 1), max_value=datetime(2200, 1, 1),
                     timezones=st.just(UTC))
tasks = st.builds(
    DeliveryTask, delivery_id=st.uuids(), event_id=st.uuids(), endpoint_id=st.uuids(),
    tenant=st.text(max_size=300), kind=st.sampled_from(TaskKind), due_at=times,
    committed_at=times, lease_version=st.integers(-2**31, 2**31 - 1))


def reference(data: bytes) -> DeliveryTask | type[CodecError]:
    try:
        return DeliveryTask.decode(data)
    except CodecError:
        return CodecError


def fast(data: bytes) -> DeliveryTask | type[CodecError]:
    try:
        return decode_task(data)
    except CodecError:
        return CodecError


@given(tasks)
def test_decodes_what_the_reference_encoder_wrote(task: DeliveryTask) -> None:
    assert decode_task(task.encode()) == task


@given(tasks, st.data())
def test_a_cut_or_damaged_record_gets_the_reference_answer(task: DeliveryTask,
                                                           data: st.DataObject) -> None:
    raw = bytearray(task.encode())
    cut = data.draw(st.integers(0, len(raw)))
    flips = data.draw(st.lists(st.tuples(st.integers(0, len(raw) - 1), st.integers(0, 255)),
                               max_size=3))
    for at, value in flips:
        raw[at] = value
    for candidate in (bytes(raw), bytes(raw[:cut]), bytes(raw) + b"\x00trailing"):
        assert fast(candidate) == reference(candidate)


@given(st.binary(max_size=200))
def test_arbitrary_bytes_get_the_reference_answer(raw: bytes) -> None:
    assert fast(raw) == reference(raw)
    assert fast(b"\x00\x01" + raw) == reference(b"\x00\x01" + raw)


def test_unknown_schema_version_is_refused_like_the_reference() -> None:
    task = DeliveryTask(uuid.uuid4(), uuid.uuid4(), uuid.uuid4(), "t", TaskKind.NEW,
                        datetime.now(UTC), datetime.now(UTC))
    raw = b"\x00\x09" + task.encode()[2:]
    with pytest.raises(CodecError, match="unknown schema"):
        decode_task(raw)
