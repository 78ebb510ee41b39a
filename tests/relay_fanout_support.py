"""Helpers of the relay and fanout tests: real topics, real records, no stand-ins."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

import orjson
import psycopg
from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)
from prometheus_client import CollectorRegistry

from hookstream.core.codec import DeliveryTask, EventEnvelope
from hookstream.core.event_key import event_key


def envelope(tenant: str = "acme", type: str = "invoice.paid", *,
             payload: Any = None, event_id: uuid.UUID | None = None,
             coalescing_key: str | None = None, object_version: int | None = None,
             committed_at: datetime | None = None) -> EventEnvelope:
    at = committed_at or datetime.now(UTC)
    body = payload if isinstance(payload, bytes) else orjson.dumps(payload or {"n": 1})
    return EventEnvelope(
        event_id=event_id or uuid.uuid4(), tenant=tenant, type=type, schema_version=1,
        object_id="obj", object_version=object_version, coalescing_key=coalescing_key,
        occurred_at=at, committed_at=at, payload=body)


def produce(bootstrap: str, topic: str, records: Iterable[tuple[bytes, bytes]]) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for key, value in records:
        p.produce(topic, value, key)
    assert p.flush(30) == 0


def relay_key(e: EventEnvelope) -> bytes:
    """The key the relay would give the event's record: tests standing in for the relay
    key alike."""
    return event_key(e.tenant, e.coalescing_key, e.object_id, str(e.event_id))


def produce_events(bootstrap: str, topic: str, events: Iterable[EventEnvelope]) -> None:
    produce(bootstrap, topic, ((relay_key(e), e.encode()) for e in events))


def read_topic(bootstrap: str, topic: str, timeout_s: float = 30.0) -> list[Message]:
    """Every record of every partition from the beginning to the current end."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"read-{uuid.uuid4().hex}",
                  "enable.auto.commit": False, "enable.partition.eof": True})
    try:
        ends = _ends(c, topic, timeout_s)
        c.assign([TopicPartition(topic, p, 0) for p in ends])
        out: list[Message] = []
        done: set[int] = set()
        deadline = time.monotonic() + timeout_s
        while len(done) < len(ends):
            assert time.monotonic() < deadline, f"could not read {topic} to its end"
            for m in c.consume(1000, timeout=0.5):
                err = m.error()
                if err is not None:
                    assert err.code() == KafkaError._PARTITION_EOF, err
                    done.add(m.partition())
                    continue
                out.append(m)
                if m.offset() + 1 >= ends[m.partition()]:
                    done.add(m.partition())
        return out
    finally:
        c.close()


def _ends(c: Consumer, topic: str, timeout_s: float) -> dict[int, int]:
    """High watermark of each non-empty partition. Right after a topic is created the
    broker may still answer NOT_LEADER for a moment: retried until the deadline."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            meta = c.list_topics(topic, timeout=10).topics[topic]
            ends: dict[int, int] = {}
            for p in meta.partitions:
                low, high = c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
                if high > low:
                    ends[p] = high
            return ends
        except KafkaException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def read_tasks(bootstrap: str, topic: str) -> list[DeliveryTask]:
    return [DeliveryTask.decode(m.value() or b"") for m in read_topic(bootstrap, topic)]


def consume_batch(bootstrap: str, topic: str, n: int, timeout_s: float = 30.0) -> list[Message]:
    """``n`` records from ``topic`` through a fresh consumer group (as the fanout reads)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"t-{uuid.uuid4().hex}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe([topic])
    out: list[Message] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(out) < n:
            assert time.monotonic() < deadline, f"only {len(out)} of {n} records in {topic}"
            out.extend(m for m in c.consume(n - len(out), timeout=0.5) if m.error() is None)
        return out
    finally:
        c.close()


def metric(registry: CollectorRegistry, name: str, labels: dict[str, str] | None = None) -> float:
    value = registry.get_sample_value(name, labels or {})
    return 0.0 if value is None else value


def add_endpoints(db_url: str, tenant: str, n: int, *, event_types: list[str] | None = None,
                  status: str = "active", coalesce: bool = True) -> list[str]:
    """``n`` endpoints of ``tenant`` in one statement; their ids (text), in id order."""
    with psycopg.connect(db_url) as conn:
        rows = conn.execute(
            "INSERT INTO endpoints (tenant, url, event_types, status, coalesce)"
            " SELECT %s, 'https://example.com/hooks/' || i, %s, %s, %s"
            " FROM generate_series(1, %s) AS i RETURNING id::text",
            (tenant, event_types or ["*"], status, coalesce, n)).fetchall()
    return sorted(r[0] for r in rows)
