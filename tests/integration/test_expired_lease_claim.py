"""A delivery whose worker died, reclaimed in the real database through the reaper's own
task: the attempt the dead worker left open is closed as lost, whichever of the two
(the reaper's release, or the claim of the task it produced) reaches the row first.

The race, seen in CI: the reaper produces the task first and releases the row after the
broker acknowledged it; a dispatcher can consume and claim that task in between (the
claim accepts an in-flight row whose lease expired). The release then finds a newer
lease version and does nothing, and the dead worker's attempt stayed ``in_flight``
forever — a request the receiver saw, explained by no closed attempt."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from hookstream.dispatcher.store import Store

from hookstream.core.codec import DeliveryTask, TaskKind
from hookstream.dev.localstack.devkeys import development_keyring
from hookstream.endpoints import create_endpoint
from tests.helpers import query


def _delivery(db_url: str) -> DeliveryTask:
    with psycopg.connect(db_url) as conn:
        endpoint = create_endpoint(conn, tenant="acme", url="https://a.example/h").endpoint_id
        event = uuid.uuid4()
        conn.execute(
            "INSERT INTO events (event_id, tenant, type, schema_version, occurred_at,"
            " committed_at, payload, payload_sha256) VALUES (%s, 'acme', 'x.y', 1,"
            " now(), now(), '\\x7b7d', '\\x00')", (event,))
        # the task carries the event's commit time, as the fanout's do (the row's key)
        row = conn.execute(
            "INSERT INTO deliveries (event_id, endpoint_id, tenant, endpoint_config_version,"
            " created_at, next_attempt_at, expires_at, committed_at) SELECT event_id, %s,"
            " 'acme', 1, now(), now(), now() + interval '1 day', committed_at FROM events"
            " WHERE event_id = %s RETURNING delivery_id, committed_at",
            (endpoint, event)).fetchone()
    assert row is not None
    now = datetime.now(UTC)
    return DeliveryTask(delivery_id=row[0], event_id=event, endpoint_id=endpoint,
                        tenant="acme", kind=TaskKind.NEW, due_at=now, committed_at=row[1],
                        lease_version=0)


def _attempts(db_url: str, delivery: uuid.UUID) -> list[tuple[Any, ...]]:
    return query(db_url, "SELECT attempt_no, outcome, error_class, finished_at IS NOT NULL"
                         " FROM attempts WHERE delivery_id = %s ORDER BY attempt_no",
                 (delivery,))


def _expire(db_url: str, delivery: uuid.UUID) -> None:
    with psycopg.connect(db_url) as conn:
        conn.execute("UPDATE deliveries SET lease_expires_at = now() - interval '1 second'"
                     " WHERE delivery_id = %s", (delivery,))


async def test_a_claim_of_the_reapers_task_before_its_release_closes_the_lost_attempt(
        db_url: str) -> None:
    task = _delivery(db_url)
    store = Store(db_url, lease_s=30, keyring=development_keyring())
    await store.open()
    try:
        [first] = await store.claim([task])
        assert first.attempt_no == 1
        _expire(db_url, task.delivery_id)  # its worker died mid-attempt

        async def produce_and_be_consumed_at_once(rows: list[dict[str, Any]]) -> bool:
            # The reaper's task reached a dispatcher, which claimed it, before the
            # reaper's release ran.
            [row] = rows
            reclaimed = await store.claim([DeliveryTask(
                delivery_id=row["delivery_id"], event_id=row["event_id"],
                endpoint_id=row["endpoint_id"], tenant=row["tenant"], kind=TaskKind.RETRY,
                due_at=datetime.now(UTC), committed_at=row["committed_at"],
                lease_version=row["lease_version"])])
            assert [c.attempt_no for c in reclaimed] == [2]
            return True

        assert await store.expired_leases(10, produce_and_be_consumed_at_once) == 1
        assert _attempts(db_url, task.delivery_id) == [
            (1, "lost", "worker_lost", True),   # closed, not left in flight
            (2, "in_flight", None, False),      # the live one
        ]
    finally:
        await store.close()


async def test_the_reapers_release_first_then_the_claim_closes_the_attempt_once(
        db_url: str) -> None:
    task = _delivery(db_url)
    store = Store(db_url, lease_s=30, keyring=development_keyring())
    await store.open()
    try:
        await store.claim([task])
        _expire(db_url, task.delivery_id)
        produced: list[dict[str, Any]] = []

        async def produce(rows: list[dict[str, Any]]) -> bool:
            produced.extend(rows)
            return True

        assert await store.expired_leases(10, produce) == 1
        [row] = produced
        [again] = await store.claim([DeliveryTask(
            delivery_id=row["delivery_id"], event_id=row["event_id"],
            endpoint_id=row["endpoint_id"], tenant=row["tenant"], kind=TaskKind.RETRY,
            due_at=datetime.now(UTC), committed_at=row["committed_at"],
            lease_version=row["lease_version"])])
        assert again.attempt_no == 2
        assert _attempts(db_url, task.delivery_id) == [
            (1, "lost", "worker_lost", True), (2, "in_flight", None, False)]
    finally:
        await store.close()


async def test_first_attempts_batched_with_a_takeover_still_close_the_lost_attempt(
        db_url: str) -> None:
    # First attempts claim through claim_first, which leaves the takeover's update out
    # (their rows were never claimed); a batch with one task past its first claim must
    # take the whole claim, so the lost attempt behind it is closed all the same.
    lost, fresh = _delivery(db_url), _delivery(db_url)
    store = Store(db_url, lease_s=30, keyring=development_keyring())
    await store.open()
    try:
        [first] = await store.claim([lost])  # lease version 0: claim_first
        assert first.attempt_no == 1
        _expire(db_url, lost.delivery_id)  # its worker died mid-attempt
        # The reaper produces its task; a dispatcher claims it, with a new delivery's
        # task, before the reaper's release (the race of the first test above).
        async def produce_and_be_consumed_at_once(rows: list[dict[str, Any]]) -> bool:
            [row] = rows
            claimed = await store.claim([fresh, DeliveryTask(
                delivery_id=row["delivery_id"], event_id=row["event_id"],
                endpoint_id=row["endpoint_id"], tenant=row["tenant"], kind=TaskKind.RETRY,
                due_at=datetime.now(UTC), committed_at=row["committed_at"],
                lease_version=row["lease_version"])])
            assert sorted((c.delivery_id == lost.delivery_id, c.attempt_no)
                          for c in claimed) == [(False, 1), (True, 2)]
            return True

        assert await store.expired_leases(10, produce_and_be_consumed_at_once) == 1
        assert _attempts(db_url, lost.delivery_id) == [
            (1, "lost", "worker_lost", True), (2, "in_flight", None, False)]
        assert _attempts(db_url, fresh.delivery_id) == [(1, "in_flight", None, False)]
    finally:
        await store.close()


async def test_a_task_of_a_vanished_endpoint_claims_nothing_and_leaves_the_row_alone(
        db_url: str) -> None:
    # No foreign key ties a delivery to its endpoint any more (0014): a fanout statement
    # begun before an endpoint's deletion can commit a row after the endpoint row went.
    # Its task must claim nothing — not mark the row in flight with an attempt that no
    # request follows (the claim's result joins the endpoint, so such a claim returned
    # no row and left the delivery to be reaped and "claimed" again, lease after lease).
    task = _delivery(db_url)
    with psycopg.connect(db_url) as conn:
        conn.execute("DELETE FROM endpoints WHERE id = %s", (task.endpoint_id,))
    store = Store(db_url, lease_s=30, keyring=development_keyring())
    await store.open()
    try:
        assert await store.claim([task]) == []
    finally:
        await store.close()
    assert query(db_url, "SELECT status, attempts, lease_version FROM deliveries"
                         " WHERE delivery_id = %s", (task.delivery_id,)) == [("pending", 0, 0)]
    assert _attempts(db_url, task.delivery_id) == []


async def test_a_task_with_another_commit_time_claims_nothing(db_url: str) -> None:
    # The commit time is the row's partition key: a task naming another one finds no
    # row (dropped as stale; the sweeper re-queues the pending row with its own key).
    task = _delivery(db_url)
    store = Store(db_url, lease_s=30, keyring=development_keyring())
    await store.open()
    try:
        wrong = DeliveryTask(
            delivery_id=task.delivery_id, event_id=task.event_id,
            endpoint_id=task.endpoint_id, tenant=task.tenant, kind=task.kind,
            due_at=task.due_at, committed_at=task.committed_at.replace(microsecond=0)
            - timedelta(seconds=1), lease_version=0)
        assert await store.claim([wrong]) == []
        assert [c.attempt_no for c in await store.claim([task])] == [1]
    finally:
        await store.close()


async def test_a_task_made_after_a_claim_is_early_while_its_row_is_in_flight(
        db_url: str) -> None:
    # Issue #47: a retry published before its outcome row is written, or a reaped lease's
    # task produced before its row is released, meets a row still in flight at the
    # task's own lease version. It claims nothing and parks nothing; ``early`` tells it
    # from a stale task (whose row a later claim moved on), which is dropped.
    task = _delivery(db_url)
    store = Store(db_url, lease_s=30, keyring=development_keyring())
    await store.open()
    try:
        assert await store.early([task]) == set()  # a first attempt is never early
        [first] = await store.claim([task])
        after = DeliveryTask(
            delivery_id=task.delivery_id, event_id=task.event_id,
            endpoint_id=task.endpoint_id, tenant="acme", kind=TaskKind.RETRY,
            due_at=datetime.now(UTC) + timedelta(seconds=30), committed_at=task.committed_at,
            lease_version=first.lease_version)
        assert await store.claim([after]) == []  # the attempt's lease is live
        assert await store.park([after]) == set()  # nor can it be parked
        assert await store.postpone([after]) == set()
        assert await store.early([after]) == {task.delivery_id}
        # its first attempt's task, redelivered: stale (version 0, the row is at 1)
        assert await store.early([task]) == set()
        with psycopg.connect(db_url) as conn:  # the outcome is written: pending again
            conn.execute("UPDATE deliveries SET status = 'pending', lease_expires_at = NULL"
                         " WHERE delivery_id = %s", (task.delivery_id,))
        assert await store.early([after]) == set()
        assert await store.park([after]) == {task.delivery_id}
        assert query(db_url, "SELECT parked FROM deliveries WHERE delivery_id = %s",
                     (task.delivery_id,)) == [(True,)]
    finally:
        await store.close()
