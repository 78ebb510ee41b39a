"""The operator's view of the fleet: the worst endpoints by oldest pending age, bulk
operations in progress, dead deliveries, quarantined outbox rows, every tenant.

Every list is bounded and index-driven: the worst endpoints are the same query the
metrics sampler runs, dead deliveries and quarantined rows walk small partial indexes
(migration 0010), newest first with keyset cursors.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from hookstream.controlplane import console_store, store
from hookstream.controlplane.context import ControlPlane
from hookstream.controlplane.store import Row

WORST = 10
OVERVIEW_ROWS = 10
_FAR_FUTURE = datetime(9999, 1, 1, tzinfo=UTC)
_MAX_UUID = "ffffffff-ffff-ffff-ffff-ffffffffffff"


@dataclass(frozen=True)
class Overview:
    worst: list[Row]
    running: list[Row]
    dead: list[Row]
    quarantined: list[Row]


async def _dead(conn: store.Conn, before: Any, limit: int) -> list[Row]:
    at, ident = before or (_FAR_FUTURE, _MAX_UUID)
    return await console_store.dead_deliveries(conn, at, ident, limit)


async def _quarantined(conn: store.Conn, before: tuple[datetime, int] | None,
                       limit: int) -> list[Row]:
    at, ident = before or (_FAR_FUTURE, 2**63 - 1)
    return await console_store.quarantined_outbox(conn, at, ident, limit)


async def overview(cp: ControlPlane) -> Overview:
    async with cp.conn() as conn:
        worst = await console_store.worst_endpoints(conn, WORST)
        running = await console_store.running_operations(conn, OVERVIEW_ROWS)
        dead = await _dead(conn, None, OVERVIEW_ROWS)
        quarantined = await _quarantined(conn, None, OVERVIEW_ROWS)
    return Overview(worst, running, dead, quarantined)


async def tenants(cp: ControlPlane, after: str | None, limit: int) -> list[Row]:
    async with cp.conn() as conn:
        return await store.list_tenants(conn, after, limit)


async def dead_deliveries(cp: ControlPlane, before: Any, limit: int) -> list[Row]:
    """Dead deliveries, newest first, before the cursor ``(updated_at, delivery_id)``."""
    async with cp.conn() as conn:
        return await _dead(conn, before, limit)


async def quarantined(cp: ControlPlane, before: tuple[datetime, int] | None,
                      limit: int) -> list[Row]:
    """Quarantined outbox rows, newest first, before the cursor ``(quarantined_at, id)``."""
    async with cp.conn() as conn:
        return await _quarantined(conn, before, limit)


async def running_operations(cp: ControlPlane, limit: int) -> list[Row]:
    async with cp.conn() as conn:
        return await console_store.running_operations(conn, limit)
