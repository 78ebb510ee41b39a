"""Deliveries, replay (one and bulk), operations, recovery, events and health, on the
real PostgreSQL and Kafka: a replay must leave the row pending with its lease version
and a REPLAY task on the deliveries topic that the dispatcher's claim accepts."""

from __future__ import annotations

import asyncio
import gc
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from hookstream.core.codec import TaskKind
from hookstream.core.topics import Topics
from hookstream.io import queries
from tests.conftest import Stack
from tests.helpers import query
from tests.integration.test_api_support import (  # noqa: F401
    ApiHarness,
    api_fixture,
    api_settings,
    kapi_fixture,
    make_harness,
    read_tasks,
    seed_delivery,
    seed_event,
)


def row(db_url: str, delivery_id: Any) -> tuple[Any, ...]:
    (r,) = query(db_url, "SELECT status, lease_version, attempts FROM deliveries"
                         " WHERE delivery_id = %s", (delivery_id,))
    return r


async def test_list_filters_pages_newest_first_and_shows_attempts(api: ApiHarness) -> None:
    ep = await api.endpoint()
    other = await api.endpoint()
    now = datetime.now(UTC)
    ids = [seed_delivery(api.db_url, ep["id"], "acme", status, created_at=now - timedelta(
        minutes=10 - i), attempts=[(500, "retry"), (200, "delivered")] if status == "delivered"
        else [(500, "retry")]) for i, status in enumerate(
            ["dead", "delivered", "dead", "delivered", "pending"])]
    seed_delivery(api.db_url, other["id"], "acme", "dead")
    got: list[str] = []
    cursor = None
    while True:
        params = {"endpoint_id": ep["id"], "limit": "2", **({"cursor": cursor} if cursor else {})}
        page = await api.ok("GET", "/v1/deliveries", params=params)
        got += [d["id"] for d in page["data"]]
        if (cursor := page["next_cursor"]) is None:
            break
    assert got == [str(i) for i in reversed(ids)]
    dead = await api.ok("GET", "/v1/deliveries",
                        params={"endpoint_id": ep["id"], "status": "dead"})
    assert [d["id"] for d in dead["data"]] == [str(ids[2]), str(ids[0])]
    window = await api.ok("GET", "/v1/deliveries", params={
        "endpoint_id": ep["id"], "since": (now - timedelta(minutes=8, seconds=30)).isoformat(),
        "until": (now - timedelta(minutes=6, seconds=30)).isoformat()})
    assert [d["id"] for d in window["data"]] == [str(ids[3]), str(ids[2])]
    everything = await api.ok("GET", "/v1/deliveries")  # the tenant's endpoints
    assert len(everything["data"]) == 6
    one = await api.ok("GET", f"/v1/deliveries/{ids[1]}")
    assert one["event_type"] == "invoice.paid" and one["status"] == "delivered"
    assert [(a["attempt_no"], a["status_code"], a["outcome"], a["manual"])
            for a in one["attempt_log"]] == [(1, 500, "retry", False), (2, 200, "delivered", False)]
    code, err, _ = await api.call("GET", "/v1/deliveries", "operator")
    assert code == 400 and err["error"]["field"] == "endpoint_id"


async def test_replay_one_sets_pending_keeps_the_lease_and_enqueues_a_replay_task(
        kapi: ApiHarness, stack: Stack) -> None:
    ep = await kapi.endpoint()
    delivery_id = seed_delivery(kapi.db_url, ep["id"], "acme", "dead", lease_version=5,
                                attempts=[(500, "dead")])
    code, body, headers = await kapi.call("POST", f"/v1/deliveries/{delivery_id}/replay")
    assert code == 202, body
    assert headers["Location"] == f"/v1/deliveries/{delivery_id}"
    assert body["status"] == "pending" and body["id"] == str(delivery_id)
    assert row(kapi.db_url, delivery_id) == ("pending", 5, 1)
    topic = Topics(kapi.api.settings.topic_prefix).deliveries
    tasks = read_tasks(stack.bootstrap, topic, 1)
    assert len(tasks) == 1
    key, task = tasks[0]
    assert key == uuid.UUID(ep["id"]).bytes
    assert (task.delivery_id, task.kind, task.lease_version, str(task.endpoint_id)) == (
        delivery_id, TaskKind.REPLAY, 5, ep["id"])
    # The dispatcher's own claim takes it, as a manual attempt of the same delivery (by the
    # row's full key: the replay task carries its event's commit time).
    claim = queries.load("dispatcher")["claim"]
    claimed = query(kapi.db_url, claim, {"delivery_id": [delivery_id],
                                         "committed_at": [task.committed_at],
                                         "lease_version": [5], "manual": [True],
                                         "lease_s": 30.0})
    assert [r[0] for r in claimed] == [delivery_id]
    assert query(kapi.db_url, "SELECT attempt_no, manual FROM attempts WHERE delivery_id = %s"
                              " ORDER BY attempt_no", (delivery_id,)) == [(1, False), (2, True)]
    # A second replay while it is queued or in flight is refused, not doubled.
    code, err, _ = await kapi.call("POST", f"/v1/deliveries/{delivery_id}/replay")
    assert code == 409 and err["error"]["field"] == "status"


async def test_replay_refused_for_a_disabled_endpoint(kapi: ApiHarness) -> None:
    ep = await kapi.endpoint()
    delivery_id = seed_delivery(kapi.db_url, ep["id"], "acme", "dead")
    await kapi.ok("POST", f"/v1/endpoints/{ep['id']}/disable")
    code, err, _ = await kapi.call("POST", f"/v1/deliveries/{delivery_id}/replay")
    assert code == 409 and "disabled" in err["error"]["message"]
    assert row(kapi.db_url, delivery_id)[0] == "dead"
    code, err, _ = await kapi.call("POST", f"/v1/endpoints/{ep['id']}/replay",
                                   body={"since": "2020-01-01T00:00:00Z"})
    assert code in (400, 409)


async def wait_operation(h: ApiHarness, location: str) -> dict[str, Any]:
    await asyncio.wait_for(h.api.operations.wait_idle(), 30)
    return await h.ok("GET", location)  # type: ignore[no-any-return]


async def test_bulk_replay_answers_202_and_works_through_batches(kapi: ApiHarness,
                                                                 stack: Stack) -> None:
    ep = await kapi.endpoint()
    now = datetime.now(UTC)
    old = seed_delivery(kapi.db_url, ep["id"], "acme", "dead", created_at=now - timedelta(hours=3))
    recent = [seed_delivery(kapi.db_url, ep["id"], "acme", s, created_at=now - timedelta(
        minutes=30 - i)) for i, s in enumerate(["dead", "delivered", "failed", "dead", "pending"])]
    since = (now - timedelta(hours=1)).isoformat()
    code, op, headers = await kapi.call("POST", f"/v1/endpoints/{ep['id']}/replay",
                                        body={"since": since})
    assert code == 202, op
    assert headers["Location"] == f"/v1/operations/{op['id']}"
    assert op["status"] == "running" and op["progress"]["total"] == 4  # pending excluded
    done = await wait_operation(kapi, headers["Location"])
    assert done["status"] == "succeeded" and done["finished_at"]
    assert done["progress"] == {"total": 4, "processed": 4, "enqueued": 4}
    assert [row(kapi.db_url, d)[0] for d in recent] == ["pending"] * 5
    assert row(kapi.db_url, old)[0] == "dead"  # before `since`
    tasks = read_tasks(stack.bootstrap, Topics(kapi.api.settings.topic_prefix).deliveries, 4)
    assert sorted(str(t.delivery_id) for _, t in tasks) == sorted(str(d) for d in recent[:4])
    assert {t.kind for _, t in tasks} == {TaskKind.REPLAY}


async def test_bulk_replay_with_a_status_filter(kapi: ApiHarness) -> None:
    ep = await kapi.endpoint()
    dead = seed_delivery(kapi.db_url, ep["id"], "acme", "dead")
    delivered = seed_delivery(kapi.db_url, ep["id"], "acme", "delivered")
    code, _, headers = await kapi.call("POST", f"/v1/endpoints/{ep['id']}/replay", body={
        "since": (datetime.now(UTC) - timedelta(hours=1)).isoformat(), "statuses": ["dead"]})
    assert code == 202
    done = await wait_operation(kapi, headers["Location"])
    assert done["progress"]["enqueued"] == 1
    assert (row(kapi.db_url, dead)[0], row(kapi.db_url, delivered)[0]) == ("pending", "delivered")
    for body, field in [({}, "since"), ({"since": "2020-01-01T00:00:00Z"}, "since"),
                        ({"since": "yesterday"}, "since"),
                        ({"since": datetime.now(UTC).isoformat(), "statuses": ["pending"]},
                         "statuses"),
                        ({"since": datetime.now(UTC).isoformat(),
                          "until": "2021-01-01T00:00:00Z"}, "until")]:
        code, err, _ = await kapi.call("POST", f"/v1/endpoints/{ep['id']}/replay", body=body)
        assert code == 400 and err["error"]["field"] == field, (body, err)


def seed_dead_events(kapi: ApiHarness, endpoint_id: str, n: int,
                     now: datetime) -> tuple[list[uuid.UUID], list[uuid.UUID]]:
    """n events of acme, each with a dead delivery to the endpoint created a minute
    apart, the oldest 2n minutes before ``now``: (event ids, delivery ids)."""
    events = [seed_event(kapi.db_url, "acme") for _ in range(n)]
    ids = [seed_delivery(kapi.db_url, endpoint_id, "acme", "dead", event_id=e,
                         created_at=now - timedelta(minutes=2 * n - i))
           for i, e in enumerate(events)]
    return events, ids


def expire_operation_leases(kapi: ApiHarness) -> None:
    """The instance running the operations died: their leases run out."""
    query(kapi.db_url, "UPDATE operations SET lease_expires_at = now() - interval '1 s'"
                       " RETURNING id")


async def adopt_as_another_instance(ops: Any) -> None:
    """The same operations object plays another API instance: it starts work for real
    again and its sweeper adopts the one orphaned operation."""
    del ops.start
    ops.owner = f"api-{uuid.uuid4()}"
    assert await ops.adopt_orphans() == 1


async def test_bulk_replay_of_a_set_of_events(kapi: ApiHarness, stack: Stack) -> None:
    ep = await kapi.endpoint()
    now = datetime.now(UTC)
    events, ids = seed_dead_events(kapi, ep["id"], 5, now)
    # Another tenant's event (with a dead delivery to its own endpoint) matches nothing.
    theirs = await kapi.endpoint("globex")
    their_event = seed_event(kapi.db_url, "globex")
    their_delivery = seed_delivery(kapi.db_url, theirs["id"], "globex", "dead",
                                   event_id=their_event)
    picked = [events[1], events[3]]
    code, op, headers = await kapi.call("POST", f"/v1/endpoints/{ep['id']}/replay", body={
        "event_ids": [str(e) for e in picked] + [str(their_event), str(uuid.uuid4())]})
    assert code == 202, op
    assert headers["Location"] == f"/v1/operations/{op['id']}"
    assert op["progress"]["total"] == 2
    assert op["params"]["event_ids"][:2] == [str(e) for e in picked]
    done = await wait_operation(kapi, headers["Location"])
    assert done["status"] == "succeeded"
    assert done["progress"] == {"total": 2, "processed": 2, "enqueued": 2}
    assert [row(kapi.db_url, d)[0] for d in ids] == ["dead", "pending", "dead", "pending",
                                                    "dead"]
    assert row(kapi.db_url, their_delivery)[0] == "dead"
    topic = Topics(kapi.api.settings.topic_prefix).deliveries
    tasks = read_tasks(stack.bootstrap, topic, 2)
    assert sorted(t.delivery_id for _, t in tasks) == sorted([ids[1], ids[3]])  # only those
    assert {t.kind for _, t in tasks} == {TaskKind.REPLAY}
    assert {k for k, _ in tasks} == {uuid.UUID(ep["id"]).bytes}
    # The other tenant's key cannot reach this endpoint at all.
    code, _, _ = await kapi.call("POST", f"/v1/endpoints/{ep['id']}/replay", "globex",
                                 body={"event_ids": [str(events[0])]})
    assert code == 404
    # An operator key may replay by event id too; statuses and a range still apply.
    code, op, headers = await kapi.call("POST", f"/v1/endpoints/{ep['id']}/replay",
                                        "operator", body={
        "event_ids": [str(events[0]), str(events[1]), str(events[4])], "statuses": ["dead"],
        "since": (now - timedelta(minutes=9, seconds=30)).isoformat()})
    assert code == 202, op
    assert op["tenant"] == "acme" and op["progress"]["total"] == 1  # [1] is pending now
    await wait_operation(kapi, headers["Location"])
    assert [row(kapi.db_url, d)[0] for d in ids] == ["dead", "pending", "dead", "pending",
                                                    "pending"]
    tasks = read_tasks(stack.bootstrap, topic, 3)
    assert sorted(t.delivery_id for _, t in tasks) == sorted([ids[1], ids[3], ids[4]])
    for body, field in [({"event_ids": []}, "event_ids"),
                        ({"event_ids": [str(events[0]), "nope"]}, "event_ids[1]"),
                        ({"event_ids": [str(uuid.uuid4())] * 1001}, "event_ids")]:
        code, err, _ = await kapi.call("POST", f"/v1/endpoints/{ep['id']}/replay", body=body)
        assert code == 400 and err["error"]["field"] == field, (body, err)
    code, err, _ = await kapi.call("POST", f"/v1/endpoints/{ep['id']}/recover",
                                   body={"event_ids": [str(events[0])]})
    assert code == 400 and err["error"]["field"] == "event_ids"


async def test_recover_re_enables_and_replays_what_failed_since_the_streak(
        kapi: ApiHarness) -> None:
    ep = await kapi.endpoint()
    now = datetime.now(UTC)
    before = seed_delivery(kapi.db_url, ep["id"], "acme", "dead",
                           created_at=now - timedelta(hours=5))
    during = [seed_delivery(kapi.db_url, ep["id"], "acme", s, created_at=now - timedelta(hours=1))
              for s in ("dead", "failed", "delivered")]
    query(kapi.db_url, "UPDATE endpoints SET status = 'disabled', disabled_reason = 'HTTP 410',"
                       " consecutive_failures = 40, first_failure_at = now() - interval '2 hours'"
                       " RETURNING id")
    code, op, headers = await kapi.call("POST", f"/v1/endpoints/{ep['id']}/recover")
    assert code == 202, op
    assert op["kind"] == "recover" and op["params"]["reenabled"] is True
    done = await wait_operation(kapi, headers["Location"])
    assert done["progress"]["enqueued"] == 2
    assert [row(kapi.db_url, d)[0] for d in during] == ["pending", "pending", "delivered"]
    assert row(kapi.db_url, before)[0] == "dead"
    health = await kapi.ok("GET", f"/v1/endpoints/{ep['id']}")
    assert (health["status"], health["consecutive_failures"]) == ("active", 0)


async def test_an_orphaned_operation_is_resumed_at_its_cursor(kapi: ApiHarness,
                                                             stack: Stack) -> None:
    ep = await kapi.endpoint()
    now = datetime.now(UTC)
    ids = [seed_delivery(kapi.db_url, ep["id"], "acme", "dead",
                         created_at=now - timedelta(minutes=10 - i)) for i in range(5)]
    ops = kapi.api.operations
    started: list[uuid.UUID] = []
    ops.start = started.append  # type: ignore[method-assign,assignment]
    code, op, headers = await kapi.call("POST", f"/v1/endpoints/{ep['id']}/replay", body={
        "since": (now - timedelta(hours=1)).isoformat()})
    assert code == 202 and started == [uuid.UUID(op["id"])]
    # This instance gets one batch (of 2) done, then dies: its lease runs out.
    assert await ops.step(started[0]) is True
    expire_operation_leases(kapi)
    assert (await kapi.ok("GET", headers["Location"]))["progress"]["processed"] == 2
    # Another instance's sweeper adopts it and finishes from the cursor.
    await adopt_as_another_instance(ops)
    done = await wait_operation(kapi, headers["Location"])
    assert done["status"] == "succeeded"
    assert done["progress"] == {"total": 5, "processed": 5, "enqueued": 5}
    assert [row(kapi.db_url, d)[0] for d in ids] == ["pending"] * 5
    tasks = read_tasks(stack.bootstrap, Topics(kapi.api.settings.topic_prefix).deliveries, 5)
    assert sorted(t.delivery_id for _, t in tasks) == sorted(ids)  # each exactly once
    assert await ops.adopt_orphans() == 0


async def test_an_orphaned_replay_of_a_set_of_events_resumes_with_the_same_set(
        kapi: ApiHarness, stack: Stack) -> None:
    ep = await kapi.endpoint()
    now = datetime.now(UTC)
    events, ids = seed_dead_events(kapi, ep["id"], 5, now)
    ops = kapi.api.operations
    started: list[uuid.UUID] = []
    ops.start = started.append  # type: ignore[method-assign,assignment]
    code, op, headers = await kapi.call("POST", f"/v1/endpoints/{ep['id']}/replay", body={
        "event_ids": [str(events[i]) for i in (0, 2, 4)]})
    assert code == 202 and op["progress"]["total"] == 3
    assert await ops.step(started[0]) is True  # one batch of 2, then this instance dies
    expire_operation_leases(kapi)
    await adopt_as_another_instance(ops)
    done = await wait_operation(kapi, headers["Location"])
    assert done["status"] == "succeeded"
    assert done["progress"] == {"total": 3, "processed": 3, "enqueued": 3}
    assert [row(kapi.db_url, d)[0] for d in ids] == ["pending", "dead", "pending", "dead",
                                                    "pending"]
    tasks = read_tasks(stack.bootstrap, Topics(kapi.api.settings.topic_prefix).deliveries, 3)
    assert sorted(t.delivery_id for _, t in tasks) == sorted([ids[0], ids[2], ids[4]])


async def test_events_for_reconciliation(api: ApiHarness) -> None:
    now = datetime.now(UTC)
    ep = await api.endpoint(event_types=["invoice.*"])
    e1 = seed_event(api.db_url, "acme", "invoice.paid", occurred_at=now - timedelta(days=2))
    e2 = seed_event(api.db_url, "acme", "order.shipped", occurred_at=now - timedelta(days=1))
    e3 = seed_event(api.db_url, "acme", "invoice.created", payload=b"\xffnot json",
                    occurred_at=now - timedelta(hours=1))
    seed_event(api.db_url, "acme", "invoice.paid", occurred_at=now - timedelta(days=40))
    seed_event(api.db_url, "globex", "invoice.paid")
    page = await api.ok("GET", "/v1/events")
    assert [e["id"] for e in page["data"]] == [str(e1), str(e2), str(e3)]
    assert page["data"][0]["payload"] == {"id": 1} and page["data"][0]["object_version"] == 7
    assert page["data"][2]["payload"] is None
    assert page["data"][2]["payload_base64"] == "/25vdCBqc29u"  # the exact bytes
    subscribed = await api.ok("GET", "/v1/events", params={"endpoint_id": ep["id"]})
    assert [e["id"] for e in subscribed["data"]] == [str(e1), str(e3)]
    typed = await api.ok("GET", "/v1/events", params={"type": "order.*", "limit": "1"})
    assert [e["id"] for e in typed["data"]] == [str(e2)] and typed["next_cursor"] is None
    paged = await api.ok("GET", "/v1/events", params={"limit": "2"})
    rest = await api.ok("GET", "/v1/events", params={"limit": "2",
                                                      "cursor": paged["next_cursor"]})
    assert [e["id"] for e in paged["data"] + rest["data"]] == [str(e1), str(e2), str(e3)]
    code, err, _ = await api.call("GET", "/v1/events", params={
        "since": (now - timedelta(days=31)).isoformat()})
    assert code == 400 and err["error"]["field"] == "since"
    code, err, _ = await api.call("GET", "/v1/events", "operator")
    assert code == 400 and err["error"]["field"] == "tenant"
    assert (await api.ok("GET", f"/v1/events/{e1}"))["type"] == "invoice.paid"


async def test_health_reports_backlog_circuit_last_error_and_success_rate(
        api: ApiHarness) -> None:
    ep = await api.endpoint()
    now = datetime.now(UTC)
    seed_delivery(api.db_url, ep["id"], "acme", "pending", created_at=now - timedelta(minutes=5))
    seed_delivery(api.db_url, ep["id"], "acme", "pending", created_at=now - timedelta(minutes=1))
    seed_delivery(api.db_url, ep["id"], "acme", "in_flight")
    seed_delivery(api.db_url, ep["id"], "acme", "delivered",
                  attempts=[(503, "retry"), (200, "delivered")])
    failing = seed_delivery(api.db_url, ep["id"], "acme", "dead",
                            attempts=[(500, "retry"), (500, "dead")])
    query(api.db_url, "UPDATE endpoints SET consecutive_failures = 3, first_failure_at = now(),"
                      " paused_until = now() + interval '1 minute' RETURNING id")
    health = await api.ok("GET", f"/v1/endpoints/{ep['id']}/health")
    assert health["pending"] == 2 and health["in_flight"] == 1 and health["dead"] == 1
    assert 299 <= health["oldest_pending_age_s"] <= 330
    assert health["circuit"]["state"] == "open"
    assert health["circuit"]["consecutive_failures"] == 3
    assert health["recent"] == {"window_s": 3600, "attempts": 4, "delivered": 1,
                                "success_rate": 0.25}
    assert health["last_error"]["delivery_id"] == str(failing)
    assert health["last_error"]["status_code"] == 500
    code, err, _ = await api.call("GET", f"/v1/endpoints/{ep['id']}/health",
                                  params={"window_s": "5"})
    assert code == 400 and err["error"]["field"] == "window_s"


# -- Kafka away: no transaction waits for it -------------------------------------------
@pytest.fixture(name="offline")
async def offline_fixture(db_url: str, topics: Any) -> AsyncIterator[ApiHarness]:
    """The API with a broker address nothing listens on: every task waits out its
    acknowledgement bound and fails."""
    settings = api_settings(db_url, "127.0.0.1:1", topics.prefix, operation_batch_size=2)
    harness, client = await make_harness(db_url, settings)
    publisher = harness.api.sink.publisher
    yield harness
    await client.close()
    # Drop the instrumentation (a reference cycle through the publisher) and collect, so
    # the producer of a broker that never existed stops reconnecting for the rest of the run.
    publisher.__dict__.pop("publish_async", None)
    del publisher, harness, client
    gc.collect()


def _signal_publishing(harness: ApiHarness) -> asyncio.Event:
    """Set once the API hands tasks to Kafka (instrumentation; the producer stays real)."""
    publishing = asyncio.Event()
    publisher = harness.api.sink.publisher
    publish_async = publisher.publish_async

    async def publish_and_signal(records: Any, wait_s: float | None = None) -> Any:
        publishing.set()
        return await publish_async(records, wait_s)

    publisher.publish_async = publish_and_signal  # type: ignore[method-assign]
    return publishing


def _open_transactions(db_url: str) -> list[tuple[Any, ...]]:
    return query(db_url, "SELECT pid, state, query FROM pg_stat_activity"
                         " WHERE datname = current_database() AND xact_start IS NOT NULL"
                         " AND pid <> pg_backend_pid()")


async def test_replay_commits_before_waiting_for_kafka_and_says_who_sends_it(
        offline: ApiHarness) -> None:
    ep = await offline.endpoint()
    delivery_id = seed_delivery(offline.db_url, ep["id"], "acme", "dead", lease_version=4)
    publishing = _signal_publishing(offline)
    request = asyncio.create_task(offline.call("POST", f"/v1/deliveries/{delivery_id}/replay"))
    await asyncio.wait_for(publishing.wait(), 10)
    # While the API waits for Kafka the replay is already committed, and no transaction
    # (no row lock, no snapshot) is held across the wait.
    assert _open_transactions(offline.db_url) == []
    assert row(offline.db_url, delivery_id) == ("pending", 4, 0)
    code, body, headers = await asyncio.wait_for(request, 30)
    # Kafka never acknowledged within the bound: still accepted, and the answer says that
    # the dispatcher's sweeper sends it (a pending delivery overdue with no task).
    assert code == 202 and body["status"] == "pending"
    assert headers["Hookstream-Task"] == "sweeper"
    assert row(offline.db_url, delivery_id) == ("pending", 4, 0)


async def test_bulk_replay_commits_each_batch_before_waiting_for_kafka(
        offline: ApiHarness) -> None:
    ep = await offline.endpoint()
    ids = [seed_delivery(offline.db_url, ep["id"], "acme", "dead") for _ in range(3)]
    publishing = _signal_publishing(offline)
    code, op, _ = await offline.call("POST", f"/v1/endpoints/{ep['id']}/replay",
                                     body={"since": (datetime.now(UTC) - timedelta(
                                         hours=1)).isoformat()})
    assert code == 202, op
    await asyncio.wait_for(publishing.wait(), 10)
    assert _open_transactions(offline.db_url) == []
    # The first batch (two rows) is committed pending with the operation's cursor past
    # it; the task waits for Kafka, and the sweeper backs it if this instance dies.
    assert sorted(row(offline.db_url, d)[0] for d in ids) == ["dead", "pending", "pending"]
    (processed,), = query(offline.db_url, "SELECT processed FROM operations WHERE id = %s",
                          (op["id"],))
    assert processed == 2
