"""Deleting an endpoint (issue #14): ``DELETE /v1/endpoints/{id}`` answers 202 at once with
a ``delete`` operation that removes the history in batches in the background, resumes
after a crash, and from the first moment lets no new delivery be created or attempted.

On the real PostgreSQL (and Kafka for the fanout); the API runs in-process.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import psycopg
from psycopg.rows import dict_row

from hookstream.controlplane import store
from hookstream.controlplane.operations import Operations
from hookstream.io import queries
from tests.helpers import scalar, wait_until
from tests.integration.test_api_support import ApiHarness, api_fixture  # noqa: F401
from tests.integration.test_fanout_rules import Rig, rig  # noqa: F401
from tests.relay_fanout_support import envelope

BATCH = 100


def seed_history(db_url: str, endpoint_id: str, n: int, *, status: str = "delivered",
                 tenant: str = "acme") -> None:
    """``n`` events with one delivery of the endpoint each and one attempt per delivery."""
    with psycopg.connect(db_url) as conn:
        conn.execute("""
            WITH ev AS (
                INSERT INTO events (event_id, tenant, type, schema_version, occurred_at,
                                    committed_at, payload, payload_sha256)
                SELECT hookstream_uuid_v7(), %(tenant)s, 'invoice.paid', 1, now(), now(),
                       '{}', sha256('{}')
                FROM generate_series(1, %(n)s)
                RETURNING event_id, committed_at
            ), d AS (
                INSERT INTO deliveries (event_id, endpoint_id, tenant, endpoint_config_version,
                                        status, attempts, expires_at, committed_at)
                SELECT event_id, %(ep)s, %(tenant)s, 1, %(status)s, 1, now() + interval '1 day',
                       committed_at
                FROM ev
                RETURNING delivery_id, committed_at
            )
            INSERT INTO attempts (delivery_id, attempt_no, started_at, finished_at, outcome,
                                  committed_at)
            SELECT delivery_id, 1, now(), now(), 'delivered', committed_at FROM d
        """, {"tenant": tenant, "n": n, "ep": endpoint_id, "status": status})


def history(db_url: str, endpoint_id: str) -> tuple[int, int]:
    """(deliveries, attempts) of the endpoint still in the tables. The attempts counted
    include any left without their delivery row: no foreign key cascades a delivery's
    removal to its attempts any more (0014), so a delete that forgot them would leave
    them there, and only this sees it."""
    deliveries = scalar(db_url, "SELECT count(*) FROM deliveries WHERE endpoint_id = %s",
                        (endpoint_id,))
    attempts = scalar(db_url, "SELECT count(*) FROM attempts a JOIN deliveries d"
                              " USING (delivery_id, committed_at) WHERE d.endpoint_id = %s",
                      (endpoint_id,))
    orphans = scalar(db_url, "SELECT count(*) FROM attempts a WHERE NOT EXISTS ("
                             " SELECT 1 FROM deliveries d WHERE d.delivery_id = a.delivery_id"
                             " AND d.committed_at = a.committed_at)")
    return deliveries, attempts + orphans


async def finished(api: ApiHarness, operation_id: str, timeout_s: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        op = await api.ok("GET", f"/v1/operations/{operation_id}")
        if op["status"] != "running" or time.monotonic() > deadline:
            return op
        await asyncio.sleep(0.05)


async def marked_by_a_dead_instance(db_url: str, endpoint_id: str, *,
                                    lease_s: float) -> uuid.UUID:
    """What DELETE commits before its background work starts, owned by an instance that
    then died (its lease runs out after ``lease_s``): the endpoint marked, the operation
    recorded, no batch run."""
    async with await psycopg.AsyncConnection.connect(db_url, row_factory=dict_row) as conn:
        marked = await store.mark_endpoint_deleted(conn, uuid.UUID(endpoint_id), None)
        assert marked is not None
        op = await store.create_delete_operation(
            conn, tenant=marked["tenant"], endpoint_id=marked["id"], owner="crashed",
            lease_s=lease_s)
        await conn.commit()
    return op["id"]


async def test_delete_answers_202_before_the_history_is_gone(api: ApiHarness) -> None:
    api.api.operations.delete_batch_size = BATCH
    ep = await api.endpoint()
    seed_history(api.db_url, ep["id"], 350)
    delivery = scalar(api.db_url, "SELECT delivery_id FROM deliveries WHERE endpoint_id = %s"
                                  " LIMIT 1", (ep["id"],))
    # A row of the history held locked by someone else (a dispatcher writing an outcome,
    # a replay batch): a delete that removed the history inside the request would wait
    # for it; the background job goes around it and waits only for that row.
    with psycopg.connect(api.db_url) as hold:
        hold.execute("SELECT 1 FROM deliveries WHERE delivery_id = %s FOR UPDATE", (delivery,))
        started = time.monotonic()
        code, op, headers = await asyncio.wait_for(
            api.call("DELETE", f"/v1/endpoints/{ep['id']}"), timeout=5)
        answered_s = time.monotonic() - started
        assert code == 202, op
        assert answered_s < 2.0
        assert op["kind"] == "delete" and op["status"] == "running"
        assert headers["Location"] == f"/v1/operations/{op['id']}"
        # gone for the API at once, the history still there (the batch waits on the lock)
        code, _, _ = await api.call("GET", f"/v1/endpoints/{ep['id']}")
        assert code == 404
        code, _, _ = await api.call("GET", f"/v1/deliveries/{delivery}")
        assert code == 404
        listed = await api.ok("GET", "/v1/endpoints")
        assert ep["id"] not in [e["id"] for e in listed["data"]]
        assert history(api.db_url, ep["id"]) > (0, 0)  # answered before it is gone
        # the job never waits behind the lock: all but the held row go meanwhile
        await asyncio.to_thread(wait_until, lambda: history(api.db_url, ep["id"]) == (1, 1),
                                10.0, 0.05, "all but the locked row removed")
        polled = await api.ok("GET", f"/v1/operations/{op['id']}")
        assert polled["status"] == "running" and polled["progress"]["processed"] == 349
        # a repeat while it runs: the same operation
        code, again, _ = await api.call("DELETE", f"/v1/endpoints/{ep['id']}")
        assert code == 202 and again["id"] == op["id"]
        hold.rollback()
    done = await finished(api, op["id"])
    assert done["status"] == "succeeded", done
    assert done["progress"]["processed"] == 350
    assert history(api.db_url, ep["id"]) == (0, 0)
    assert scalar(api.db_url, "SELECT count(*) FROM endpoints WHERE id = %s", (ep["id"],)) == 0
    assert scalar(api.db_url, "SELECT count(*) FROM endpoint_secrets WHERE endpoint_id = %s",
                  (ep["id"],)) == 0
    # idempotent after it finished too; another tenant still learns nothing
    code, again, _ = await api.call("DELETE", f"/v1/endpoints/{ep['id']}")
    assert code == 202 and again["id"] == op["id"] and again["status"] == "succeeded"
    code, _, _ = await api.call("DELETE", f"/v1/endpoints/{ep['id']}", "globex")
    assert code == 404
    code, _, _ = await api.call("DELETE", f"/v1/endpoints/{uuid.uuid4()}")
    assert code == 404


async def test_an_interrupted_delete_resumes_where_it_stopped(api: ApiHarness) -> None:
    ep = await api.endpoint()
    seed_history(api.db_url, ep["id"], 250)
    operation_id = await marked_by_a_dead_instance(api.db_url, ep["id"], lease_s=0.3)
    # The instance that owned it ran exactly one batch, then died.
    crashed = Operations(api.api.pool, api.api.sink, batch_size=BATCH, lease_s=0.3,
                         replays=api.api.metrics.replays, owner="crashed",
                         delete_batch_size=BATCH)
    assert await crashed.step(operation_id) is True
    assert history(api.db_url, ep["id"]) == (150, 150)
    # Its lease runs out; the survivor's sweeper takes the operation over.
    survivor = api.api.operations
    survivor.delete_batch_size = BATCH
    await asyncio.sleep(0.4)
    assert await survivor.adopt_orphans() == 1
    await survivor.wait_idle()
    done = await api.ok("GET", f"/v1/operations/{operation_id}")
    assert done["status"] == "succeeded" and done["progress"]["processed"] == 250
    assert history(api.db_url, ep["id"]) == (0, 0)
    assert scalar(api.db_url, "SELECT count(*) FROM endpoints WHERE id = %s", (ep["id"],)) == 0
    # the dead instance, back, finds nothing of it to do
    assert await crashed.step(operation_id) is False


async def test_a_failed_delete_is_started_again_by_the_next_delete(api: ApiHarness) -> None:
    ep = await api.endpoint()
    seed_history(api.db_url, ep["id"], 30)
    operation_id = await marked_by_a_dead_instance(api.db_url, ep["id"], lease_s=60)
    with psycopg.connect(api.db_url) as conn:
        conn.execute("UPDATE operations SET status = 'failed', error = 'boom' WHERE id = %s",
                     (operation_id,))
    code, op, _ = await api.call("DELETE", f"/v1/endpoints/{ep['id']}")
    assert code == 202 and op["id"] != str(operation_id)
    done = await finished(api, op["id"])
    assert done["status"] == "succeeded" and done["progress"]["processed"] == 30
    assert history(api.db_url, ep["id"]) == (0, 0)


async def test_a_deleted_endpoint_gets_no_new_delivery(api: ApiHarness,
                                                       rig: Rig) -> None:  # noqa: F811
    kept = await api.endpoint()
    gone = await api.endpoint()
    first = rig.run(envelope("acme"))
    assert first.created == 2
    code, op, _ = await api.call("DELETE", f"/v1/endpoints/{gone['id']}")
    assert code == 202
    after = rig.run(envelope("acme"), envelope("acme"))
    assert after.created == 2  # the kept endpoint's two; nothing for the deleted one
    assert scalar(api.db_url, "SELECT count(*) FROM deliveries WHERE endpoint_id = %s",
                  (kept["id"],)) == 3
    await finished(api, op["id"])
    assert history(api.db_url, gone["id"]) == (0, 0)


async def test_a_pending_delivery_of_a_deleted_endpoint_is_never_attempted_and_goes(
        api: ApiHarness) -> None:
    ep = await api.endpoint()
    seed_history(api.db_url, ep["id"], 3, status="pending")
    with psycopg.connect(api.db_url) as conn:
        conn.execute("UPDATE deliveries SET next_attempt_at = now() - interval '1 hour'"
                     " WHERE endpoint_id = %s", (ep["id"],))
        rows = conn.execute("SELECT delivery_id, committed_at FROM deliveries"
                            " WHERE endpoint_id = %s", (ep["id"],)).fetchall()
    ids, committed = [r[0] for r in rows], [r[1] for r in rows]
    # Marked deleted, its operation not run yet (its owner died; a long lease).
    operation_id = await marked_by_a_dead_instance(api.db_url, ep["id"], lease_s=60)
    dispatcher, sweeper = queries.load("dispatcher"), queries.load("sweeper")
    observability = queries.load("observability")
    with psycopg.connect(api.db_url) as conn:
        # a task already queued for it (cached "active" in a dispatcher) claims nothing,
        # though it names the rows by their full key (the event's commit time)
        claimed = conn.execute(dispatcher["claim"], {
            "delivery_id": ids, "committed_at": committed, "lease_version": [0] * 3,
            "manual": [False] * 3, "lease_s": 30.0}, binary=True).fetchall()
        assert claimed == []
        # the sweeper does not hand it back, the gauges do not count it as waiting work
        swept = conn.execute(sweeper["sweep"], {"after_s": 1.0, "per_endpoint": 100,
                                                "limit": 1000}).fetchall()
        assert swept == []
        pending = {r[0]: r[1] for r in conn.execute(observability["pending_by_kind"])}
        assert pending == {"new": 0, "retry": 0, "held": 0}
        assert conn.execute(observability["worst_endpoints"], {"limit": 10}).fetchall() == []
        conn.rollback()
    assert scalar(api.db_url, "SELECT count(*) FROM attempts a JOIN deliveries d"
                              " USING (delivery_id, committed_at) WHERE d.endpoint_id = %s AND"
                              " a.outcome = 'in_flight'", (ep["id"],)) == 0
    # ... and it does not stay pending: once the operation is taken over, it is removed.
    with psycopg.connect(api.db_url) as conn:
        conn.execute("UPDATE operations SET lease_expires_at = now() - interval '1 s'"
                     " WHERE id = %s", (operation_id,))
    assert await api.api.operations.adopt_orphans() == 1
    await api.api.operations.wait_idle()
    wait_until(lambda: scalar(api.db_url, "SELECT count(*) FROM deliveries"
                                          " WHERE status = 'pending'") == 0, timeout_s=10)
    assert history(api.db_url, ep["id"]) == (0, 0)
