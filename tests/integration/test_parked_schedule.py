"""A slow endpoint's parked backlog in the real database: parked at its slots, pulled
forward when the endpoint speeds up, handed back by the sweeper when each slot comes —
and another endpoint's parked rows untouched."""

from __future__ import annotations

import dataclasses
import time
import uuid
from datetime import UTC, datetime

import psycopg
import pytest
from hookstream.dispatcher.store import Store

from hookstream.core.codec import DeliveryTask, TaskKind
from hookstream.endpoints import create_endpoint
from tests.helpers import query

SLOTS = 10


def _deliveries(db_url: str, endpoint: uuid.UUID, n: int) -> list[DeliveryTask]:
    tasks = []
    with psycopg.connect(db_url) as conn:
        for _ in range(n):
            event = uuid.uuid4()
            conn.execute(
                "INSERT INTO events (event_id, tenant, type, schema_version, occurred_at,"
                " committed_at, payload, payload_sha256) VALUES (%s, 'acme', 'x.y', 1,"
                " now(), now(), '\\x7b7d', '\\x00')", (event,))
            # the task carries the event's commit time, as the fanout's do (the row's key)
            delivery = conn.execute(
                "INSERT INTO deliveries (event_id, endpoint_id, tenant, endpoint_config_version,"
                " created_at, next_attempt_at, expires_at, committed_at) SELECT event_id, %s,"
                " 'acme', 1, now(), now(), now() + interval '1 day', committed_at FROM events"
                " WHERE event_id = %s RETURNING delivery_id, committed_at",
                (endpoint, event)).fetchone()
            assert delivery is not None
            tasks.append(DeliveryTask(
                delivery_id=delivery[0], event_id=event, endpoint_id=endpoint, tenant="acme",
                kind=TaskKind.NEW, due_at=datetime.now(UTC), committed_at=delivery[1],
                lease_version=0))
    return tasks


def _due(db_url: str, endpoint: uuid.UUID) -> list[float]:
    return [r[0] for r in query(
        db_url, "SELECT extract(epoch FROM next_attempt_at)::float8 FROM deliveries"
                " WHERE endpoint_id = %s AND parked ORDER BY next_attempt_at", (endpoint,))]


async def test_a_parked_schedule_is_pulled_forward_for_one_endpoint_and_swept_when_due(
        db_url: str) -> None:
    with psycopg.connect(db_url) as conn:
        fast = create_endpoint(conn, tenant="acme", url="https://a.example/h").endpoint_id
        other = create_endpoint(conn, tenant="acme", url="https://b.example/h").endpoint_id
    now = time.time()
    store = Store(db_url, lease_s=30)
    await store.open()
    try:
        # Parked at 1/s from 100 s out (the pace of a slow endpoint): slots 100..109 s.
        for endpoint in (fast, other):
            tasks = _deliveries(db_url, endpoint, SLOTS)
            await store.park([
                dataclasses.replace(t, due_at=datetime.fromtimestamp(now + 100 + k, UTC))
                for k, t in enumerate(tasks)])
        slots = pytest.approx([now + 100 + k for k in range(SLOTS)], abs=1e-5)  # µs in SQL
        assert _due(db_url, fast) == slots and _due(db_url, other) == slots
        assert await store.sweep(120, 100, 1000) == []  # nothing due yet

        # It now drains 100/s: the schedule moves toward now by 1/100, in order.
        moved = await store.pull_forward(fast, now, 0.01)
        assert moved == SLOTS
        due = _due(db_url, fast)
        assert [d - now for d in due] == pytest.approx([1 + k / 100 for k in range(SLOTS)],
                                                       abs=1e-4)
        assert _due(db_url, other) == slots

        # Its slots come: the sweeper hands back exactly its rows, as parked ones.
        time.sleep(max(0.0, due[-1] - time.time()) + 0.05)
        swept = await store.sweep(120, 100, 1000)
        assert {r["endpoint_id"] for r in swept} == {fast}
        assert len(swept) == SLOTS and {r["reason"] for r in swept} == {"parked"}
        assert _due(db_url, fast) == []
    finally:
        await store.close()
