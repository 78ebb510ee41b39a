"""Endpoint use cases: create (one, or many from an import), read, edit, pause, disable,
enable, delete, and the health and overview the console shows. The JSON API and the
console call these with the caller's principal or scope; the rows come back as stored
(``views`` shapes them for JSON)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from hookstream.controlplane import auth, console_store, rules, store, views
from hookstream.controlplane import validation as v
from hookstream.controlplane.context import ControlPlane
from hookstream.controlplane.errors import ApiError, invalid, not_found
from hookstream.controlplane.store import Conn, Row
from hookstream.controlplane.tasks import now_utc

RECENT_DELIVERIES = 10
RECENT_OPERATIONS = 5


async def create_endpoint(cp: ControlPlane, principal: auth.Principal,
                          body: dict[str, Any]) -> tuple[Row, str]:
    """The new endpoint and its first signing secret (shown once, stored sealed)."""
    spec = v.endpoint_create(body, allow_insecure=cp.settings.allow_private_targets)
    tenant = auth.acting_tenant(principal, spec.tenant)
    async with cp.conn() as conn:
        await store.require_tenant(conn, tenant)
        return await store.create_endpoint(conn, tenant, spec, cp.settings.secret_keys)


async def import_endpoints(cp: ControlPlane, principal: auth.Principal,
                           body: dict[str, Any]) -> list[dict[str, Any]]:
    """One result per item, in order: good items are kept, bad ones explained."""
    items = v.endpoint_import(body, max_items=cp.settings.max_import_items)
    results: list[dict[str, Any]] = []
    # One transaction, a savepoint per item.
    async with cp.conn() as conn:
        for i, item in enumerate(items):
            prefix = f"endpoints[{i}]."
            try:
                if not isinstance(item, dict):
                    raise invalid(f"endpoints[{i}]", "must be an endpoint object")
                spec = v.endpoint_create(item, allow_insecure=cp.settings.allow_private_targets,
                                         prefix=prefix)
                tenant = auth.acting_tenant(principal, spec.tenant, prefix + "tenant")
                async with conn.transaction():
                    await store.require_tenant(conn, tenant, prefix + "tenant")
                    row, secret = await store.create_endpoint(conn, tenant, spec,
                                                              cp.settings.secret_keys)
            except ApiError as exc:
                results.append({"index": i, "status": exc.status, **exc.body()})
            else:
                results.append({"index": i, "status": 201, "endpoint": views.endpoint(row),
                                "secret": secret})
    return results


async def list_endpoints(cp: ControlPlane, tenant: str | None, status: list[str] | None,
                         after: tuple[datetime, uuid.UUID] | None, limit: int) -> list[Row]:
    async with cp.conn() as conn:
        return await store.list_endpoints(conn, tenant, status, after, limit)


async def get_endpoint(cp: ControlPlane, endpoint_id: uuid.UUID, scope: str | None) -> Row:
    async with cp.conn() as conn:
        return await store.get_endpoint(conn, endpoint_id, scope)


async def update_endpoint(cp: ControlPlane, endpoint_id: uuid.UUID, scope: str | None,
                          body: dict[str, Any]) -> Row:
    changes = v.endpoint_patch(body, allow_insecure=cp.settings.allow_private_targets)
    async with cp.conn() as conn:
        return await store.update_endpoint(conn, endpoint_id, scope, changes)


async def _transition(cp: ControlPlane, endpoint_id: uuid.UUID, scope: str | None,
                      action: str, **columns: Any) -> Row:
    async with cp.conn() as conn:
        ep = await store.get_endpoint(conn, endpoint_id, scope, lock=True)
        status = rules.next_status(ep["status"], action)
        return await store.set_endpoint_status(conn, endpoint_id, status, **columns)


async def pause_endpoint(cp: ControlPlane, endpoint_id: uuid.UUID, scope: str | None,
                         until: datetime | None) -> Row:
    """Hold its deliveries until ``until`` (None: until enabled); ``validation.pause``."""
    return await _transition(cp, endpoint_id, scope, "pause", paused_until=until)


async def disable_endpoint(cp: ControlPlane, endpoint_id: uuid.UUID, scope: str | None,
                           reason: str) -> Row:
    return await _transition(cp, endpoint_id, scope, "disable", disabled_reason=reason)


async def enable_endpoint(cp: ControlPlane, endpoint_id: uuid.UUID, scope: str | None) -> Row:
    return await _transition(cp, endpoint_id, scope, "enable")


async def delete_endpoint(cp: ControlPlane, scope: str | None,
                          endpoint_id: uuid.UUID) -> Row:
    """Mark the endpoint deleted and start (or find) its delete operation; its history
    goes in the background (``hookstream.controlplane.deletion``)."""
    owner, lease_s = cp.operations.owner, cp.settings.operation_lease_s
    start = True
    op: Row | None
    async with cp.conn() as conn:
        marked = await store.mark_endpoint_deleted(conn, endpoint_id, scope)
        if marked is not None:
            op = await store.create_delete_operation(
                conn, tenant=marked["tenant"], endpoint_id=endpoint_id, owner=owner,
                lease_s=lease_s)
        else:
            # Already deleted (a retry, or a second client): the operation under way or
            # finished. An endpoint still marked deleted with no live operation (it
            # failed) gets a new one: the remaining rows are all the state there is.
            op = await store.latest_delete_operation(conn, endpoint_id, scope)
            start = False
            if op is None or op["status"] == "failed":
                pending = await store.deleted_endpoint(conn, endpoint_id, scope)
                if pending is not None:
                    op = await store.create_delete_operation(
                        conn, tenant=pending["tenant"], endpoint_id=endpoint_id,
                        owner=owner, lease_s=lease_s)
                    start = True
            if op is None:
                raise not_found("endpoint")
    if start:
        cp.operations.start(op["id"])
    return op


async def health_of(conn: Conn, ep: Row, *, window_s: float,
                    now: datetime | None = None) -> dict[str, Any]:
    """The endpoint's health view (circuit, backlog, recent success rate, last error)."""
    now = now or now_utc()
    counts, last_error = await store.endpoint_health(
        conn, ep["id"], now - timedelta(seconds=window_s))
    return views.health(ep, counts, last_error, now=now, window_s=window_s)


async def endpoint_health(cp: ControlPlane, endpoint_id: uuid.UUID, scope: str | None, *,
                          window_s: float) -> dict[str, Any]:
    now = now_utc()
    async with cp.conn() as conn:
        ep = await store.get_endpoint(conn, endpoint_id, scope)
        return await health_of(conn, ep, window_s=window_s, now=now)


async def list_with_health(cp: ControlPlane, tenant: str | None, status: list[str] | None,
                           after: tuple[datetime, uuid.UUID] | None, limit: int, *,
                           window_s: float) -> list[tuple[Row, dict[str, Any] | None]]:
    """Up to ``limit`` endpoints, the first ``limit - 1`` with their health (a page and
    the row that says there is another)."""
    async with cp.conn() as conn:
        rows = await store.list_endpoints(conn, tenant, status, after, limit)
        return [(r, await health_of(conn, r, window_s=window_s) if i < limit - 1 else None)
                for i, r in enumerate(rows)]


@dataclass(frozen=True)
class Overview:
    endpoint: Row
    health: dict[str, Any]
    deliveries: list[Row]
    operations: list[Row]


async def overview(cp: ControlPlane, endpoint_id: uuid.UUID, scope: str | None, *,
                   window_s: float) -> Overview:
    """An endpoint with its health, its latest deliveries and its latest operations."""
    async with cp.conn() as conn:
        ep = await store.get_endpoint(conn, endpoint_id, scope)
        health = await health_of(conn, ep, window_s=window_s)
        recent = await store.list_deliveries(
            conn, tenant=scope, endpoint_id=endpoint_id,
            statuses=v.DELIVERY_STATUSES, since=cp.oldest(),
            until=now_utc() + timedelta(days=1), before=None, limit=RECENT_DELIVERIES)
        operations = await console_store.endpoint_operations(
            conn, ep["tenant"], endpoint_id, RECENT_OPERATIONS)
    return Overview(ep, health, recent, operations)
