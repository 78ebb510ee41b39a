"""The dispatcher's boundary: a database call is retried until it succeeds (the failure
reported, health back once it answers), a refused row is not retried, and /healthz
counts the delay forwarder. Fake store, no I/O."""

from __future__ import annotations

import uuid

import pytest
from hookstream.dispatcher.boundary import Durable, Health
from hookstream.dispatcher.store import EndpointRow

from hookstream.io.kafka import Failed, Record
from hookstream.io.pg import DatabaseUnavailable, DataRejected
from tests.unit.dispatcher_parts import Parts, row


class FlakyStore:
    """Unavailable ``outages`` times, then answers; ``record`` refuses its rows."""

    def __init__(self, outages: int):
        self.outages, self.calls = outages, 0

    async def load_endpoints(self, ids: list[uuid.UUID]) -> list[EndpointRow]:
        self.calls += 1
        if self.calls <= self.outages:
            raise DatabaseUnavailable("connection refused")
        return [row(endpoint_id=i) for i in ids]

    async def record(self, *args: object) -> int:
        self.calls += 1
        raise DataRejected("invalid byte sequence")


async def _acked(records: list[Record]) -> bool:
    return True


async def test_a_database_call_is_retried_until_it_answers_and_health_comes_back() -> None:
    parts = Parts()
    health, store = Health(parts.metrics), FlakyStore(outages=1)
    health.healthy = True
    durable = Durable(store, _acked, health)  # type: ignore[arg-type]
    rows = await durable.load_endpoints([uuid.uuid4()])
    assert len(rows) == 1 and store.calls == 2
    assert parts.sample("hookstream_dispatcher_errors_total", kind="database") == 1
    assert health.healthy and health.last_error is None


async def test_a_refused_row_is_not_retried() -> None:
    parts = Parts()
    store = FlakyStore(outages=0)
    durable = Durable(store, _acked, Health(parts.metrics))  # type: ignore[arg-type]
    with pytest.raises(DataRejected):
        await durable.record([], {}, {})
    assert store.calls == 1


def test_a_failure_marks_the_process_unhealthy_and_says_why() -> None:
    parts = Parts()
    health = Health(parts.metrics)
    health.healthy = True
    failed = [Failed(Record("t", b"k", b"v"), "MSG_TIMED_OUT: timed out", True)]
    health.publish_failed(failed)
    assert not health.healthy and health.last_error is not None
    assert health.last_error.startswith("kafka: 1 records not acknowledged")
    assert parts.sample("hookstream_dispatcher_errors_total", kind="kafka_produce") == 1
    assert parts.sample("hookstream_dispatcher_errors_total", kind="kafka") == 1


class Forwarder:
    def __init__(self) -> None:
        self.healthy = False
        self.last_error: str | None = "delay forwarder died: boom"


def test_the_delay_forwarder_counts_towards_health() -> None:
    health = Health(Parts().metrics)
    health.healthy = True
    health.delay = forwarder = Forwarder()
    assert not health.healthy and health.last_error == "delay forwarder died: boom"
    forwarder.healthy, forwarder.last_error = True, None
    assert health.healthy and health.last_error is None
