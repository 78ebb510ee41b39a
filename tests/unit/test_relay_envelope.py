"""The relay's hot-path encoder writes exactly what hookstream.core.codec writes."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from hookstream.relay.validate import (
    broker_rejection_reason,
    reason_category,
    rejection_reason,
)
from hypothesis import given
from hypothesis import strategies as st

from hookstream.core.codec import EventEnvelope
from hookstream.core.fastcodec import encode_envelope, zigzag_varint

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
times = st.datetimes(min_value=datetime(1971, 1, 1), max_value=datetime(2200, 1, 1),
                     timezones=st.just(UTC))
optional_text = st.none() | st.text(max_size=40)
int32 = st.integers(-(2**31), 2**31 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)


def _us(at: datetime) -> int:
    return (at - EPOCH) // timedelta(microseconds=1)


@given(event_id=st.uuids(), tenant=st.text(max_size=30), type=st.text(max_size=30),
       schema_version=int32, object_id=optional_text,
       object_version=st.none() | int64, coalescing_key=optional_text,
       occurred_at=times, committed_at=times, payload=st.binary(max_size=300))
def test_same_bytes_as_the_codec(event_id: uuid.UUID, tenant: str, type: str,
                                 schema_version: int, object_id: str | None,
                                 object_version: int | None, coalescing_key: str | None,
                                 occurred_at: datetime, committed_at: datetime,
                                 payload: bytes) -> None:
    reference = EventEnvelope(event_id, tenant, type, schema_version, object_id,
                              object_version, coalescing_key, occurred_at, committed_at,
                              payload).encode()
    fast = encode_envelope(str(event_id), tenant, type, schema_version, object_id,
                           object_version, coalescing_key, _us(occurred_at), _us(committed_at),
                           payload)
    assert fast == reference
    assert EventEnvelope.decode(fast).payload == payload


@pytest.mark.parametrize("n, encoded", [
    (0, b"\x00"), (-1, b"\x01"), (1, b"\x02"), (63, b"\x7e"), (64, b"\x80\x01"),
    (-65, b"\x81\x01"), (2**63 - 1, b"\xfe" + b"\xff" * 8 + b"\x01"),
])
def test_zigzag_varint_table(n: int, encoded: bytes) -> None:
    assert zigzag_varint(n) == encoded


@pytest.mark.parametrize("name", ["MSG_SIZE_TOO_LARGE", "RECORD_LIST_TOO_LARGE",
                                  "INVALID_RECORD"])
def test_broker_refusals_of_the_record_itself_quarantine_it(name: str) -> None:
    reason = broker_rejection_reason(name, "Broker: Message size too large")
    assert reason is not None and name in reason
    assert reason_category(reason) == "broker_rejected"


@pytest.mark.parametrize("name", ["_MSG_TIMED_OUT", "_TRANSPORT", "NOT_LEADER_FOR_PARTITION",
                                  "_ALL_BROKERS_DOWN", "REQUEST_TIMED_OUT"])
def test_transient_broker_errors_keep_the_row_for_a_later_round(name: str) -> None:
    assert broker_rejection_reason(name, "whatever") is None


@pytest.mark.parametrize("kwargs, category", [
    ({"schema_version": 9}, "schema_version"),
    ({"type": "bad type"}, "event_type"),
    ({"payload": b"x" * 2000}, "too_large"),
    ({"payload": b"{oops"}, "json"),
])
def test_every_rejection_has_a_bounded_metric_label(kwargs: dict[str, object],
                                                    category: str) -> None:
    args: dict[str, object] = {"type": "invoice.paid", "schema_version": 1,
                               "payload": b"{}", "max_payload_bytes": 1000} | kwargs
    reason = rejection_reason(**args)  # type: ignore[arg-type]
    assert reason is not None and reason_category(reason) == category
