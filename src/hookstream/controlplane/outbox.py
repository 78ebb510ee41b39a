"""The outbox's quarantine: rows the relay set aside (a reason on each), and putting one
back in line once its cause is fixed (a relay setting raised, a schema version
deployed, the row corrected in SQL). A tenant sees its own rows; another tenant's event
ids are not found."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from hookstream.controlplane import outbox_store, views
from hookstream.controlplane.context import ControlPlane
from hookstream.controlplane.errors import conflict, not_found
from hookstream.controlplane.store import Row

_END = datetime(9999, 1, 1, tzinfo=UTC)


async def list_quarantined(cp: ControlPlane, tenant: str | None,
                           before: tuple[datetime, uuid.UUID] | None, limit: int) -> list[Row]:
    before_at, before_id = before or (_END, uuid.UUID(int=2**128 - 1))
    async with cp.conn() as conn:
        return await outbox_store.list_quarantined(conn, tenant=tenant, before_at=before_at,
                                                   before_id=before_id, limit=limit)


async def get_row(cp: ControlPlane, event_id: uuid.UUID, scope: str | None) -> Row:
    async with cp.conn() as conn:
        row = await outbox_store.get_row(conn, event_id, scope)
    if row is None:
        raise not_found("outbox row")
    return row


async def requeue(cp: ControlPlane, event_id: uuid.UUID, scope: str | None) -> Row:
    """The row, back in line (409 if it is not quarantined); the relay is woken."""
    async with cp.conn() as conn:
        if not await outbox_store.requeue(conn, event_id, scope):
            row = await outbox_store.get_row(conn, event_id, scope)
            if row is None:
                raise not_found("outbox row")
            raise conflict(f"outbox row is {views.outbox_row(row)['state']}, not quarantined")
        await outbox_store.wake_relay(conn)
        row = await outbox_store.get_row(conn, event_id, scope)
    assert row is not None
    return row
