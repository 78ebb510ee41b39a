"""Time-ordered ids (migration 0012): what hookstream_uuid_v7() makes, and that the rows
the fanout, hookstream_emit() and write_event() insert carry such ids and stay correct."""

from __future__ import annotations

import time
import uuid

import psycopg

from hookstream.core.ids import uuid7_ms
from hookstream.outbox import write_event
from tests.helpers import query, scalar
from tests.integration.test_fanout_rules import Rig, rig  # noqa: F401
from tests.relay_fanout_support import add_endpoints, envelope


def _near_now(value: uuid.UUID) -> bool:
    return abs(uuid7_ms(value) - time.time() * 1000) < 60_000


def test_the_sql_function_makes_distinct_v7_ids_ordered_by_millisecond(db_url: str) -> None:
    with psycopg.connect(db_url) as conn:
        first = [r[0] for r in conn.execute(
            "SELECT hookstream_uuid_v7() FROM generate_series(1, 2000)").fetchall()]
        conn.execute("SELECT pg_sleep(0.005)")
        (later,), = conn.execute("SELECT hookstream_uuid_v7()").fetchall()
    assert len(set(first)) == 2000
    assert all(u.version == 7 and u.variant == uuid.RFC_4122 and _near_now(u) for u in first)
    assert later > max(first)  # a later millisecond sorts after, in PostgreSQL's order too
    with psycopg.connect(db_url) as conn:
        assert conn.execute("SELECT %s::uuid > %s::uuid", (later, max(first))).fetchone() == (
            True,)


def test_deliveries_made_by_the_fanout_get_v7_ids(rig: Rig, db_url: str) -> None:  # noqa: F811
    endpoints = set(add_endpoints(db_url, "acme", 3))
    events = [envelope("acme") for _ in range(4)]
    result = rig.run(*events)
    assert result.created == 12
    rows = query(db_url, "SELECT delivery_id, event_id::text, endpoint_id::text FROM deliveries")
    assert {(ev, ep) for _, ev, ep in rows} == {
        (str(e.event_id), ep) for e in events for ep in endpoints}
    assert all(d.version == 7 and _near_now(d) for d, _, _ in rows)


def test_events_from_hookstream_emit_and_write_event_get_v7_ids(db_url: str) -> None:
    with psycopg.connect(db_url) as conn:
        emitted = conn.execute(
            "SELECT hookstream_emit('acme', 'invoice.paid', '{\"id\": 1}'::jsonb)").fetchone()
        written = write_event(conn, tenant="acme", type="invoice.paid", payload={"id": 2})
        given = write_event(conn, tenant="acme", type="invoice.paid", payload={"id": 3},
                            event_id=uuid.UUID(int=7))  # an id the producer chose is kept
    assert emitted is not None and emitted[0].version == 7 and _near_now(emitted[0])
    assert written.version == 7 and _near_now(written)
    assert scalar(db_url, "SELECT count(*) FROM outbox WHERE event_id IN (%s, %s, %s)",
                  (emitted[0], written, given)) == 3
