"""The dispatcher's PostgreSQL boundary: claims and outcomes, batched into few round trips."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg import AsyncConnection
from psycopg.rows import dict_row, tuple_row
from psycopg_pool import AsyncConnectionPool

from hookstream.core.codec import DeliveryTask, TaskKind
from hookstream.core.secretbox import Keyring, OpenedSecrets
from hookstream.io import queries
from hookstream.io.pg import (
    NETWORK_BOUNDS,
    POOL_RECONNECT_S,
    plan_with_values_async,
    translated,
)
from hookstream.policy.circuit import CircuitState

Q = queries.load("dispatcher")
SWEEP = queries.load("sweeper")


# Not frozen: a frozen dataclass sets each field through object.__setattr__, ~0.7 µs
# more per object, and one of these is built per attempt.
@dataclass(slots=True)
class Claim:
    delivery_id: uuid.UUID
    lease_version: int
    attempt_no: int
    endpoint_id: uuid.UUID
    event_id: uuid.UUID
    tenant: str
    url: str
    payload: bytes
    secrets: list[str]
    manual: bool
    expires_at_s: float
    # the event's commit time: the row's partition key, so its outcome finds it at once
    committed_at: datetime


# Not frozen: a frozen dataclass sets each field through object.__setattr__, ~0.7 µs
# more per object, and one of these is built per attempt.
@dataclass(slots=True)
class AttemptRecord:
    claim: Claim
    status: str
    started_at: float  # epoch seconds
    finished_at: float
    status_code: int | None
    latency_ms: float
    error_class: str | None
    outcome: str
    excerpt: str | None
    error: str | None
    next_at_s: float | None  # the retry's due time when status is pending


@dataclass(frozen=True, slots=True)
class EndpointRow:
    id: uuid.UUID
    tenant: str
    status: str
    rate_per_s: float
    burst: int
    max_in_flight: int
    config_version: int
    circuit: CircuitState


def claim_statement(tasks: list[DeliveryTask]) -> str:
    """``claim_first`` when every task carries lease version 0 (first attempts: their
    rows were never claimed, so no lost attempt can be behind them and the claim need
    not plan the takeover's update), else ``claim``. dispatcher.sql says why it holds."""
    return "claim_first" if all(t.lease_version == 0 for t in tasks) else "claim"


class Store:
    def __init__(self, dsn: str, lease_s: float, max_size: int = 4,
                 keyring: Keyring | None = None):
        self.lease_s = lease_s
        # Secrets arrive sealed; opened here, at the boundary, once per version.
        self.secrets = OpenedSecrets(keyring or Keyring())
        # Every statement planned with its values: only then does a batch's
        # committed_at = ANY(...) prune to its days (hookstream.io.pg).
        self.pool = AsyncConnectionPool(
            dsn, min_size=1, max_size=max_size, open=False, configure=plan_with_values_async,
            kwargs={"autocommit": True, "row_factory": dict_row, **NETWORK_BOUNDS},
            reconnect_timeout=POOL_RECONNECT_S)

    @translated
    async def open(self) -> None:
        await self.pool.open(wait=True, timeout=30)

    async def close(self) -> None:
        await self.pool.close()

    @translated
    async def claim(self, tasks: list[DeliveryTask]) -> list[Claim]:
        if not tasks:
            return []
        conn: AsyncConnection[Any]
        async with self.pool.connection() as conn:
            # Tuple rows: the hottest statement skips building a dict per row.
            cur = conn.cursor(row_factory=tuple_row)
            await cur.execute(Q[claim_statement(tasks)], {
                "delivery_id": [t.delivery_id for t in tasks],
                "committed_at": [t.committed_at for t in tasks],
                "lease_version": [t.lease_version for t in tasks],
                "manual": [t.kind is TaskKind.REPLAY for t in tasks],
                "lease_s": self.lease_s,
            })
            rows = await cur.fetchall()
        opened = self.secrets.secrets
        # Column order is the claim statement's SELECT list.
        return [Claim(delivery_id, lease_version, attempt_no, endpoint_id, event_id, tenant,
                      url, payload, opened(endpoint_id, versions, key_ids, blobs), manual,
                      expires_at_s, committed_at)
                for (delivery_id, lease_version, attempt_no, endpoint_id, event_id, manual,
                     expires_at_s, committed_at, payload, url, tenant, versions, key_ids,
                     blobs) in rows]

    @translated
    async def load_endpoints(self, ids: list[uuid.UUID]) -> list[EndpointRow]:
        conn: AsyncConnection[Any]
        async with self.pool.connection() as conn:
            cur = conn.cursor(row_factory=dict_row)
            await cur.execute(Q["load_endpoints"], {"ids": ids})
            rows = await cur.fetchall()
        return [EndpointRow(
            id=r["id"], tenant=r["tenant"], status=r["status"], rate_per_s=r["rate_per_s"],
            burst=r["burst"], max_in_flight=r["max_in_flight"],
            config_version=r["config_version"],
            circuit=CircuitState(r["consecutive_failures"], r["first_failure_at"],
                                 r["paused_until"])) for r in rows]

    @translated
    async def record(
        self,
        outcomes: list[AttemptRecord],
        circuits: dict[uuid.UUID, CircuitState],
        disable: dict[uuid.UUID, str],
    ) -> int:
        """One transaction: attempt rows, delivery rows, circuit states, disablements.
        Returns how many outcomes moved their delivery row (the rest arrived late)."""
        if not outcomes and not circuits and not disable:
            return 0
        conn: AsyncConnection[Any]
        async with self.pool.connection() as conn:
            # Usually the outcomes statement alone, atomic by itself on an autocommit
            # connection: BEGIN and COMMIT would be two more round trips per batch.
            if circuits or disable:
                async with conn.transaction():
                    return await self._record(conn, outcomes, circuits, disable)
            return await self._record(conn, outcomes, circuits, disable)

    async def _record(
        self,
        conn: AsyncConnection[Any],
        outcomes: list[AttemptRecord],
        circuits: dict[uuid.UUID, CircuitState],
        disable: dict[uuid.UUID, str],
    ) -> int:
        applied = 0
        if outcomes:
            cur = await conn.execute(Q["record_outcomes"], {
                "delivery_id": [o.claim.delivery_id for o in outcomes],
                "lease_version": [o.claim.lease_version for o in outcomes],
                "attempt_no": [o.claim.attempt_no for o in outcomes],
                "status": [o.status for o in outcomes],
                "started_at": [o.started_at for o in outcomes],
                "finished_at": [o.finished_at for o in outcomes],
                "status_code": [o.status_code for o in outcomes],
                "latency_ms": [o.latency_ms for o in outcomes],
                "error_class": [o.error_class for o in outcomes],
                "outcome": [o.outcome for o in outcomes],
                "excerpt": [o.excerpt for o in outcomes],
                "error": [o.error for o in outcomes],
                "next_at": [o.next_at_s for o in outcomes],
                "committed_at": [o.claim.committed_at for o in outcomes],
            })
            applied = cur.rowcount
        if circuits:
            ids = list(circuits)
            await conn.execute(Q["update_circuits"], {
                "ids": ids,
                "failures": [circuits[i].consecutive_failures for i in ids],
                "first_failure_at": [circuits[i].first_failure_at for i in ids],
                "paused_until": [circuits[i].paused_until for i in ids],
            })
        if disable:
            ids = list(disable)
            await conn.execute(Q["disable_endpoints"], {
                "ids": ids, "reasons": [disable[i] for i in ids]})
        return applied

    @translated
    async def expired_leases(self, limit: int, produce: Any) -> int:
        """Hand deliveries whose worker died back to the queue: ``produce`` is awaited with
        the rows (True once their tasks are durable) before the rows are released. No
        transaction is open while it waits for the broker."""
        conn: AsyncConnection[Any]
        async with self.pool.connection() as conn:
            cur = conn.cursor(row_factory=dict_row)
            rows = await (await cur.execute(Q["expired_leases"], {"limit": limit})).fetchall()
        if not rows or not await produce(rows):
            return 0
        async with self.pool.connection() as conn:
            await conn.execute(Q["release_expired"], {
                "ids": [r["delivery_id"] for r in rows],
                "committed_at": [r["committed_at"] for r in rows],
                "versions": [r["lease_version"] for r in rows]})
        return len(rows)

    @translated
    async def sweep(self, after_s: float, per_endpoint: int, limit: int) -> list[dict[str, Any]]:
        """Overdue pending deliveries of active endpoints, marked swept (see sweeper.sql)."""
        conn: AsyncConnection[Any]
        async with self.pool.connection() as conn, conn.transaction():
            # Planned without sorts: each endpoint's probe must read deliveries_due in
            # order, never a whole partition's pending rows (sweeper.sql says why).
            await conn.execute("SET LOCAL enable_sort = off")
            cur = conn.cursor(row_factory=dict_row)
            await cur.execute(SWEEP["sweep"], {
                "after_s": after_s, "per_endpoint": per_endpoint, "limit": limit})
            return await cur.fetchall()

    @translated
    async def release_parked(self, endpoint_id: uuid.UUID, limit: int
                             ) -> list[dict[str, Any]]:
        """The next ``limit`` parked rows of an endpoint, handed back now (sweeper.sql's
        release_parked): the caller produces their tasks."""
        conn: AsyncConnection[Any]
        async with self.pool.connection() as conn, conn.transaction():
            await conn.execute("SET LOCAL enable_sort = off")  # deliveries_due's order only
            cur = conn.cursor(row_factory=dict_row)
            await cur.execute(SWEEP["release_parked"], {"endpoint": endpoint_id,
                                                        "limit": limit})
            return await cur.fetchall()

    @translated
    async def park(self, tasks: list[DeliveryTask]) -> set[uuid.UUID]:
        """Parked in PostgreSQL, each due at its slot, with no task anywhere: the sweeper
        hands them back when the slot comes (see 0008_parked.sql). Once this returns the
        originals' offsets may advance. Returns the deliveries parked (a task whose row
        is not pending at its lease version parks nothing: stale, or ``early``)."""
        return await self._write_due(SWEEP["park"], tasks)

    @translated
    async def pull_forward(self, endpoint_id: uuid.UUID, now_s: float, factor: float) -> int:
        """An endpoint's parked schedule compressed toward now (backlog.compressed, in
        SQL): its backlog comes back at its new pace. Returns the rows moved."""
        conn: AsyncConnection[Any]
        async with self.pool.connection() as conn:
            cur = await conn.execute(SWEEP["pull_forward"], {
                "endpoint": endpoint_id, "now": now_s, "factor": factor})
            return cur.rowcount

    @translated
    async def postpone(self, tasks: list[DeliveryTask]) -> set[uuid.UUID]:
        """Deferred tasks' due times written to their rows (the sweeper's reference).
        Returns the deliveries written."""
        return await self._write_due(SWEEP["postpone"], tasks)

    @translated
    async def early(self, tasks: list[DeliveryTask]) -> set[uuid.UUID]:
        """Of tasks that claimed or parked nothing, those whose row is still in flight at
        the task's own lease version: made after their attempt's claim and arrived before
        its outcome was written (dispatcher.sql says why). The rest are stale."""
        tasks = [t for t in tasks if t.lease_version > 0]  # a first attempt is never early
        return await self._by_key(Q["early"], tasks) if tasks else set()

    async def _write_due(self, query: str, tasks: list[DeliveryTask]) -> set[uuid.UUID]:
        """Each task's due time onto its row (same delivery, same lease version, pending)."""
        return await self._by_key(query, tasks, due=True) if tasks else set()

    async def _by_key(self, query: str, tasks: list[DeliveryTask],
                      due: bool = False) -> set[uuid.UUID]:
        params: dict[str, Any] = {
            "ids": [t.delivery_id for t in tasks],
            "committed_at": [t.committed_at for t in tasks],
            "versions": [t.lease_version for t in tasks]}
        if due:
            params["due"] = [t.due_at.timestamp() for t in tasks]
        conn: AsyncConnection[Any]
        async with self.pool.connection() as conn:
            cur = conn.cursor(row_factory=tuple_row)
            await cur.execute(query, params)
            return {row[0] for row in await cur.fetchall()}
