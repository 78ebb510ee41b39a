"""The database side of the outbox's quarantine (``sql/api_outbox.sql``): rows the relay
set aside, and putting one back in line. The caller owns the transaction."""

from __future__ import annotations

import uuid
from datetime import datetime

from hookstream.controlplane.store import Conn, Row
from hookstream.io import queries

Q = queries.load("api_outbox")


async def list_quarantined(conn: Conn, *, tenant: str | None, before_at: datetime,
                           before_id: uuid.UUID, limit: int) -> list[Row]:
    cur = await conn.execute(Q["list_quarantined"], {
        "tenant": tenant, "before_at": before_at, "before_id": before_id, "limit": limit})
    return await cur.fetchall()


async def get_row(conn: Conn, event_id: uuid.UUID, tenant: str | None) -> Row | None:
    cur = await conn.execute(Q["get_outbox_row"], {"id": event_id, "tenant": tenant})
    return await cur.fetchone()


async def requeue(conn: Conn, event_id: uuid.UUID, tenant: str | None) -> bool:
    """True when the row was quarantined and is now back in line."""
    cur = await conn.execute(Q["requeue"], {"id": event_id, "tenant": tenant})
    return await cur.fetchone() is not None


async def wake_relay(conn: Conn) -> None:
    await conn.execute(Q["wake_relay"])
