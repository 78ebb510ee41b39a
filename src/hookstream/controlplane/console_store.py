"""The database side of the console (``sql/console.sql``): its signing key, whether the
key behind a session is still active, and the operator's bounded, index-driven lists
(the worst endpoints are the metrics sampler's own query, ``sql/observability.sql``).
The caller owns the transaction."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from hookstream.controlplane.store import Conn, Row
from hookstream.io import queries

Q = queries.load("console")
OBSERVABILITY = queries.load("observability")


async def _rows(conn: Conn, sql: str, params: dict[str, Any]) -> list[Row]:
    return await (await conn.execute(sql, params)).fetchall()


async def console_key(conn: Conn) -> bytes | None:
    row = await (await conn.execute(Q["console_key"])).fetchone()
    return None if row is None else bytes(row["key"])


async def create_console_key(conn: Conn, key: bytes) -> None:
    await conn.execute(Q["create_console_key"], {"key": key})


async def active_key(conn: Conn, key_id: uuid.UUID | None) -> Row | None:
    """The API key (its tenant) if it exists and is not revoked."""
    return await (await conn.execute(Q["api_key_active"], {"id": key_id})).fetchone()


async def worst_endpoints(conn: Conn, limit: int) -> list[Row]:
    return await _rows(conn, OBSERVABILITY["worst_endpoints"], {"limit": limit})


async def running_operations(conn: Conn, limit: int) -> list[Row]:
    return await _rows(conn, Q["running_operations"], {"limit": limit})


async def endpoint_operations(conn: Conn, tenant: str, endpoint_id: uuid.UUID,
                              limit: int) -> list[Row]:
    return await _rows(conn, Q["endpoint_operations"], {
        "tenant": tenant, "endpoint_id": endpoint_id, "limit": limit})


async def dead_deliveries(conn: Conn, before_at: datetime, before_id: Any,
                          limit: int) -> list[Row]:
    return await _rows(conn, Q["dead_letters"], {"before_at": before_at, "before_id": before_id,
                                                 "limit": limit})


async def quarantined_outbox(conn: Conn, before_at: datetime, before_id: int,
                             limit: int) -> list[Row]:
    return await _rows(conn, Q["quarantined_outbox"], {"before_at": before_at,
                                                       "before_id": before_id, "limit": limit})
