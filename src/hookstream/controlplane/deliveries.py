"""Delivery use cases: list, one with its attempts, and a replay of one delivery (the
same webhook-id and bytes, one more attempt): committed first, its task to Kafka after
(``hookstream.controlplane.tasks``)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from hookstream.controlplane import rules, store
from hookstream.controlplane import validation as v
from hookstream.controlplane.context import ControlPlane
from hookstream.controlplane.store import Row
from hookstream.controlplane.tasks import now_utc, replay_tasks


async def list_deliveries(cp: ControlPlane, *, tenant: str | None,
                          endpoint_id: uuid.UUID | None, statuses: Sequence[str],
                          since: datetime, until: datetime,
                          before: tuple[datetime, uuid.UUID] | None,
                          limit: int) -> tuple[Row | None, list[Row]]:
    """The endpoint asked for (another tenant's: 404, not an empty page) and the rows."""
    async with cp.conn() as conn:
        ep = None if endpoint_id is None else await store.get_endpoint(conn, endpoint_id,
                                                                        tenant)
        rows = await store.list_deliveries(
            conn, tenant=tenant, endpoint_id=endpoint_id, statuses=statuses, since=since,
            until=until, before=before, limit=limit)
    return ep, rows


async def get_delivery(cp: ControlPlane, delivery_id: uuid.UUID,
                       scope: str | None) -> tuple[Row, list[Row]]:
    """The delivery and its attempts."""
    async with cp.conn() as conn:
        row = await store.get_delivery(conn, delivery_id, scope)
        return row, await store.delivery_attempts(conn, row["delivery_id"])


@dataclass(frozen=True)
class Detail:
    delivery: Row
    attempts: list[Row]
    endpoint: Row
    replay_refusal: str | None  # why a replay would be refused now, if it would


async def detail(cp: ControlPlane, delivery_id: uuid.UUID, scope: str | None) -> Detail:
    async with cp.conn() as conn:
        d = await store.get_delivery(conn, delivery_id, scope)
        attempts = await store.delivery_attempts(conn, delivery_id)
        ep = await store.get_endpoint(conn, d["endpoint_id"], scope)
    refusal = rules.replay_refusal(d["status"], ep["status"])
    return Detail(d, attempts, ep, None if refusal is None else refusal.message)


@dataclass(frozen=True)
class Replayed:
    delivery: Row  # as it is after the commit
    queued: bool  # Kafka acknowledged the task; False: the dispatcher's sweeper sends it


async def replay_delivery(cp: ControlPlane, delivery_id: uuid.UUID,
                          scope: str | None) -> Replayed:
    async with cp.conn() as conn:
        row = await store.lock_delivery_for_replay(conn, delivery_id, scope)
        if (refusal := rules.replay_refusal(row["status"], row["endpoint_status"])) is not None:
            raise refusal
        marked = await store.mark_pending(conn, [delivery_id], v.REPLAYABLE)
        fresh = await store.get_delivery(conn, delivery_id, scope)
    # Committed: only now the task goes to Kafka, outside any transaction.
    cp.metrics.replays.labels("single").inc(len(marked))
    queued = await cp.sink.offer(replay_tasks(marked, now_utc()))
    return Replayed(fresh, queued)
