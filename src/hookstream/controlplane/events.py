"""Event use cases: the events as published (within the history window), for
reconciliation; with an endpoint, the ones it subscribes to (missed ones included)."""

from __future__ import annotations

import uuid
from datetime import datetime

from hookstream.controlplane import auth, store
from hookstream.controlplane.context import ControlPlane
from hookstream.controlplane.errors import invalid
from hookstream.controlplane.store import Row


def since_in_window(cp: ControlPlane, since: datetime | None) -> datetime:
    """The start of an events listing: the oldest kept event by default; before it, 400."""
    oldest = cp.oldest()
    since = since or oldest
    if since < oldest:
        raise invalid("since", f"events are kept for {cp.settings.history_days} days")
    return since


async def list_events(cp: ControlPlane, principal: auth.Principal, *, requested: str | None,
                      endpoint_id: uuid.UUID | None, patterns: list[str] | None,
                      since: datetime, until: datetime,
                      after: tuple[datetime, uuid.UUID] | None, limit: int,
                      operator_without_tenant: str | None = None) -> tuple[str, list[Row]]:
    """The tenant whose events these are, and the rows. ``operator_without_tenant``: the
    refusal an operator gets for naming neither an endpoint nor a tenant (None: the one
    ``auth.acting_tenant`` gives). ``since``: from ``since_in_window``."""
    async with cp.conn() as conn:
        if endpoint_id is not None:
            ep = await store.get_endpoint(conn, endpoint_id,
                                          auth.listing_tenant(principal, requested))
            tenant, patterns = ep["tenant"], patterns or ep["event_types"]
        elif (operator_without_tenant is not None and principal.operator
              and requested is None):
            raise invalid("tenant", operator_without_tenant)
        else:
            tenant = auth.acting_tenant(principal, requested)
        rows = await store.list_events(conn, tenant=tenant, patterns=patterns, since=since,
                                       until=until, after=after, limit=limit)
    return tenant, rows


async def get_event(cp: ControlPlane, event_id: uuid.UUID, scope: str | None) -> Row:
    async with cp.conn() as conn:
        return await store.get_event(conn, event_id, scope)
