"""The dispatcher's PostgreSQL boundary: claims and outcomes, batched into few round trips."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from psycopg import AsyncConnection
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from hookstream import queries
from hookstream.codec import DeliveryTask
from hookstream.policy.classify import Outcome

Q = queries.load("dispatcher")

# What a decision does to the delivery row until retries (delay tiers) take over RETRY.
ROW_STATUS = {
    Outcome.DELIVERED: "delivered",
    Outcome.RETRY: "failed",
    Outcome.FAILED: "failed",
    Outcome.DEAD: "dead",
    Outcome.DISABLE: "failed",
}


@dataclass(frozen=True, slots=True)
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


@dataclass(frozen=True, slots=True)
class AttemptRecord:
    claim: Claim
    status: str
    started_at: Any
    finished_at: Any
    status_code: int | None
    latency_ms: float
    error_class: str | None
    outcome: str
    excerpt: str | None
    error: str | None
    disable_endpoint: bool


class Store:
    def __init__(self, dsn: str, lease_s: float, max_size: int = 4):
        self.lease_s = lease_s
        self.pool = AsyncConnectionPool(
            dsn, min_size=1, max_size=max_size, open=False,
            kwargs={"autocommit": True, "row_factory": dict_row})

    async def open(self) -> None:
        await self.pool.open(wait=True, timeout=30)

    async def close(self) -> None:
        await self.pool.close()

    async def claim(self, tasks: list[DeliveryTask]) -> list[Claim]:
        if not tasks:
            return []
        conn: AsyncConnection[Any]
        async with self.pool.connection() as conn:
            cur = await conn.execute(Q["claim"], {
                "delivery_id": [t.delivery_id for t in tasks],
                "lease_version": [t.lease_version for t in tasks],
                "lease_s": self.lease_s,
            })
            rows = await cur.fetchall()
        return [Claim(
            delivery_id=r["delivery_id"], lease_version=r["lease_version"],
            attempt_no=r["attempt_no"], endpoint_id=r["endpoint_id"], event_id=r["event_id"],
            tenant=r["tenant"], url=r["url"], payload=bytes(r["payload"]),
            secrets=list(r["secrets"])) for r in rows]

    async def record(self, outcomes: list[AttemptRecord]) -> None:
        if not outcomes:
            return
        conn: AsyncConnection[Any]
        async with self.pool.connection() as conn, conn.transaction():
            await conn.execute(Q["record_outcomes"], {
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
            })
            gone = list({o.claim.endpoint_id for o in outcomes if o.disable_endpoint})
            if gone:
                await conn.execute(Q["disable_endpoints"], {
                    "ids": gone, "reason": "endpoint answered 410 Gone"})

    async def expired_leases(self, limit: int, produce: Any) -> int:
        """Hand deliveries whose worker died back to the queue: ``produce`` is awaited with
        the rows (it must make their tasks durable) before the rows are released."""
        conn: AsyncConnection[Any]
        async with self.pool.connection() as conn, conn.transaction():
            cur = await conn.execute(Q["expired_leases"], {"limit": limit})
            rows = await cur.fetchall()
            if not rows:
                return 0
            await produce(rows)
            await conn.execute(Q["release_expired"], {"ids": [r["delivery_id"] for r in rows]})
        return len(rows)
