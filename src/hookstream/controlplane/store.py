"""The control plane's database boundary: named queries from ``sql/api.sql``, run on an async
psycopg connection with dict rows. The caller owns the transaction (one per request,
from the pool); rules and validation happen before anything reaches here."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from psycopg import AsyncConnection
from psycopg.rows import DictRow
from psycopg.types.json import Jsonb

from hookstream.controlplane import auth
from hookstream.controlplane.errors import conflict, invalid, not_found
from hookstream.controlplane.rules import revoke_refusal
from hookstream.controlplane.validation import (
    DELIVERY_STATUSES,
    EndpointSpec,
    ReplayRange,
    nil_uuid,
)
from hookstream.core.counts import COUNT_CAP
from hookstream.core.secretbox import Keyring, seal
from hookstream.core.signing import generate_secret
from hookstream.io import queries

Q = queries.load("api")
Conn = AsyncConnection[DictRow]
Row = dict[str, Any]
_BEGINNING = datetime(1970, 1, 1, tzinfo=UTC)
_END = datetime(9999, 1, 1, tzinfo=UTC)


async def _one(conn: Conn, name: str, params: dict[str, Any]) -> Row | None:
    cur = await conn.execute(Q[name], params)
    return await cur.fetchone()


async def _all(conn: Conn, name: str, params: dict[str, Any], *,
               custom_plan: bool = False) -> list[Row]:
    # custom_plan: never a server-side prepared statement, so PostgreSQL plans each call
    # with its values. A generic plan of a query whose range bounds are parameters
    # guesses a few rows per partition and may read a whole range where the values'
    # plan would read its head (hookstream.io.sql api.sql list_deliveries).
    cur = await conn.execute(Q[name], params, prepare=False if custom_plan else None)
    return await cur.fetchall()


# -- principals, tenants, keys -----------------------------------------------------------
async def principal(conn: Conn, token: str) -> auth.Principal | None:
    row = await _one(conn, "principal", {"sha": auth.hash_token(token)})
    return None if row is None else auth.Principal(row["id"], row["tenant"])


async def create_tenant(conn: Conn, tenant: str, name: str) -> Row:
    row = await _one(conn, "create_tenant", {"id": tenant, "name": name})
    if row is None:
        raise conflict(f"tenant {tenant!r} already exists", "id")
    return row


async def require_tenant(conn: Conn, tenant: str, field: str = "tenant") -> None:
    row = await _one(conn, "tenant_exists", {"tenant": tenant})
    if not (row and row["exists"]):
        raise invalid(field, f"unknown tenant {tenant!r}")


async def list_tenants(conn: Conn, after: str | None, limit: int) -> list[Row]:
    return await _all(conn, "list_tenants", {"after": after, "limit": limit})


async def create_api_key(conn: Conn, tenant: str | None, name: str) -> tuple[Row, str]:
    token = auth.new_token()
    row = await _one(conn, "create_api_key", {
        "tenant": tenant, "name": name, "prefix": auth.display_prefix(token),
        "sha": auth.hash_token(token)})
    assert row is not None
    return row, token


async def list_api_keys(conn: Conn, tenant: str | None, *, every: bool = False) -> list[Row]:
    return await _all(conn, "list_api_keys", {"tenant": tenant, "all": every})


async def revoke_api_key(conn: Conn, key_id: uuid.UUID) -> Row:
    row = await _one(conn, "revoke_api_key", {"id": key_id})
    if row is None:
        raise not_found("active API key")
    return row


# -- endpoints ---------------------------------------------------------------------------
async def create_endpoint(conn: Conn, tenant: str, spec: EndpointSpec,
                          keyring: Keyring) -> tuple[Row, str]:
    row = await _one(conn, "insert_endpoint", {
        "tenant": tenant, "url": spec.url, "description": spec.description,
        "event_types": spec.event_types, "rate_per_s": spec.rate_per_s, "burst": spec.burst,
        "max_in_flight": spec.max_in_flight, "coalesce": spec.coalesce})
    assert row is not None
    secret = generate_secret()
    key_id, sealed = seal(keyring, secret, row["id"].bytes)
    await conn.execute(Q["insert_first_secret"],
                       {"id": row["id"], "key_id": key_id, "sealed": sealed})
    return row, secret


async def get_endpoint(conn: Conn, endpoint_id: uuid.UUID, tenant: str | None,
                       *, lock: bool = False) -> Row:
    row = await _one(conn, "lock_endpoint" if lock else "get_endpoint",
                     {"id": endpoint_id, "tenant": tenant})
    if row is None:
        raise not_found("endpoint")
    return row


async def list_endpoints(conn: Conn, tenant: str | None, status: list[str] | None,
                         after: tuple[datetime, uuid.UUID] | None, limit: int) -> list[Row]:
    after_at, after_id = after or (_BEGINNING, nil_uuid())
    return await _all(conn, "list_endpoints", {
        "tenant": tenant, "status": status, "after_at": after_at, "after_id": after_id,
        "limit": limit})


async def update_endpoint(conn: Conn, endpoint_id: uuid.UUID, tenant: str | None,
                          changes: dict[str, Any]) -> Row:
    params = {name: changes.get(name) for name in (
        "url", "description", "event_types", "rate_per_s", "burst", "max_in_flight",
        "coalesce")}
    row = await _one(conn, "update_endpoint", {"id": endpoint_id, "tenant": tenant, **params})
    if row is None:
        raise not_found("endpoint")
    return row


async def set_endpoint_status(conn: Conn, endpoint_id: uuid.UUID, status: str, *,
                              paused_until: datetime | None = None,
                              disabled_reason: str | None = None) -> Row:
    row = await _one(conn, "set_endpoint_status", {
        "id": endpoint_id, "status": status, "paused_until": paused_until,
        "disabled_reason": disabled_reason})
    assert row is not None  # the caller holds the row lock
    return row


async def mark_endpoint_deleted(conn: Conn, endpoint_id: uuid.UUID,
                                tenant: str | None) -> Row | None:
    """The endpoint (id, tenant) now marked deleted; None if it was not found live."""
    return await _one(conn, "mark_endpoint_deleted", {"id": endpoint_id, "tenant": tenant})


async def latest_delete_operation(conn: Conn, endpoint_id: uuid.UUID,
                                  tenant: str | None) -> Row | None:
    return await _one(conn, "latest_delete_operation", {"id": endpoint_id, "tenant": tenant})


async def deleted_endpoint(conn: Conn, endpoint_id: uuid.UUID,
                           tenant: str | None) -> Row | None:
    return await _one(conn, "deleted_endpoint", {"id": endpoint_id, "tenant": tenant})


async def create_delete_operation(conn: Conn, *, tenant: str, endpoint_id: uuid.UUID,
                                  owner: str, lease_s: float) -> Row:
    # total stays 0: counting the history up front would walk all of it (progress
    # counts the deliveries removed so far).
    row = await _one(conn, "create_operation", {
        "tenant": tenant, "kind": "delete", "endpoint_id": endpoint_id, "params": Jsonb({}),
        "total": 0, "owner": owner, "lease_s": lease_s})
    assert row is not None
    return row


async def delete_history_batch(conn: Conn, endpoint_id: uuid.UUID, limit: int) -> int:
    """Remove up to ``limit`` of a deleted endpoint's deliveries with their attempts, in
    the caller's transaction; returns how many deliveries went."""
    rows = await _all(conn, "select_history_batch", {"endpoint_id": endpoint_id, "limit": limit})
    if rows:
        keys = {"ids": [r["delivery_id"] for r in rows],
                "committed_at": [r["committed_at"] for r in rows]}
        await conn.execute(Q["delete_history_attempts"], keys)
        await conn.execute(Q["delete_history_deliveries"], keys)
    return len(rows)


async def history_remains(conn: Conn, endpoint_id: uuid.UUID) -> bool:
    row = await _one(conn, "history_remains", {"endpoint_id": endpoint_id})
    return bool(row and row["remains"])


async def remove_deleted_endpoint(conn: Conn, endpoint_id: uuid.UUID) -> None:
    await conn.execute(Q["remove_deleted_endpoint"], {"id": endpoint_id})


# -- secrets -----------------------------------------------------------------------------
async def list_secrets(conn: Conn, endpoint_id: uuid.UUID) -> list[Row]:
    return await _all(conn, "list_secrets", {"id": endpoint_id})


async def rotate_secret(conn: Conn, endpoint_id: uuid.UUID, overlap_s: float,
                        keyring: Keyring) -> tuple[Row, str]:
    secret = generate_secret()
    key_id, sealed = seal(keyring, secret, endpoint_id.bytes)
    row = await _one(conn, "rotate_secret", {"id": endpoint_id, "overlap_s": overlap_s,
                                             "key_id": key_id, "sealed": sealed})
    assert row is not None
    return row, secret


async def revoke_secret(conn: Conn, endpoint_id: uuid.UUID, version: int) -> Row:
    active = [r["version"] for r in await list_secrets(conn, endpoint_id) if r["active"]]
    if (refusal := revoke_refusal(version, active)) is not None:
        raise refusal
    row = await _one(conn, "revoke_secret", {"id": endpoint_id, "version": version})
    if row is None:
        raise not_found("active secret version")
    return row


# -- health ------------------------------------------------------------------------------
async def endpoint_health(conn: Conn, endpoint_id: uuid.UUID,
                          window_start: datetime) -> tuple[Row, Row | None]:
    params = {"id": endpoint_id, "window_start": window_start,
              "all_statuses": list(DELIVERY_STATUSES), "cap": COUNT_CAP}
    counts = await _one(conn, "endpoint_health", params)
    assert counts is not None
    return counts, await _one(conn, "last_error", params)


# -- deliveries --------------------------------------------------------------------------
async def list_deliveries(conn: Conn, *, tenant: str | None, endpoint_id: uuid.UUID | None,
                          statuses: Sequence[str], since: datetime, until: datetime,
                          before: tuple[datetime, uuid.UUID] | None, limit: int) -> list[Row]:
    before_at, before_id = before or (_END, uuid.UUID(int=2**128 - 1))
    return await _all(conn, "list_deliveries", {
        "tenant": tenant, "endpoint_id": endpoint_id, "statuses": list(statuses),
        "since": since, "until": until, "before_at": before_at, "before_id": before_id,
        "limit": limit}, custom_plan=True)


async def get_delivery(conn: Conn, delivery_id: uuid.UUID, tenant: str | None) -> Row:
    row = await _one(conn, "get_delivery", {"id": delivery_id, "tenant": tenant})
    if row is None:
        raise not_found("delivery")
    return row


async def delivery_attempts(conn: Conn, delivery_id: uuid.UUID) -> list[Row]:
    return await _all(conn, "delivery_attempts", {"id": delivery_id})


async def lock_delivery_for_replay(conn: Conn, delivery_id: uuid.UUID,
                                   tenant: str | None) -> Row:
    row = await _one(conn, "lock_delivery_for_replay", {"id": delivery_id, "tenant": tenant})
    if row is None:
        raise not_found("delivery")
    return row


async def mark_pending(conn: Conn, ids: Sequence[uuid.UUID],
                       from_statuses: Sequence[str]) -> list[Row]:
    return await _all(conn, "mark_pending",
                      {"ids": list(ids), "from_statuses": list(from_statuses)})


# -- bulk operations ---------------------------------------------------------------------
def _range_params(endpoint_id: uuid.UUID, tenant: str, r: ReplayRange) -> dict[str, Any]:
    return {"endpoint_id": endpoint_id, "tenant": tenant, "statuses": list(r.statuses),
            "since": r.since, "until": r.until,
            "event_ids": None if r.event_ids is None else list(r.event_ids)}


async def create_operation(conn: Conn, *, tenant: str, kind: str, endpoint_id: uuid.UUID,
                           replay: ReplayRange, extra: dict[str, Any], owner: str,
                           lease_s: float) -> Row:
    count = "count_replay_batch" if replay.event_ids is None else "count_replay_events"
    total = await _one(conn, count, _range_params(endpoint_id, tenant, replay))
    assert total is not None
    # Everything select_replay_batch needs: whichever instance works the operation
    # (after a takeover too) replays the same set.
    params: dict[str, Any] = {"since": replay.since.isoformat(),
                              "until": replay.until.isoformat(),
                              "statuses": list(replay.statuses), **extra}
    if replay.event_ids is not None:
        params["event_ids"] = [str(e) for e in replay.event_ids]
    row = await _one(conn, "create_operation", {
        "tenant": tenant, "kind": kind, "endpoint_id": endpoint_id, "params": Jsonb(params),
        "total": total["n"], "owner": owner, "lease_s": lease_s})
    assert row is not None
    return row


async def get_operation(conn: Conn, operation_id: uuid.UUID, tenant: str | None) -> Row:
    row = await _one(conn, "get_operation", {"id": operation_id, "tenant": tenant})
    if row is None:
        raise not_found("operation")
    return row


async def lock_owned_operation(conn: Conn, operation_id: uuid.UUID, owner: str) -> Row | None:
    return await _one(conn, "lock_owned_operation", {"id": operation_id, "owner": owner})


def operation_replay(op: Row) -> ReplayRange:
    """The filter an operation was created with (its ``params``)."""
    p = op["params"]
    event_ids = p.get("event_ids")
    return ReplayRange(datetime.fromisoformat(p["since"]), datetime.fromisoformat(p["until"]),
                       tuple(p["statuses"]),
                       None if event_ids is None else tuple(uuid.UUID(e) for e in event_ids))


async def select_replay_batch(conn: Conn, op: Row, limit: int) -> list[Row]:
    replay = operation_replay(op)
    name = "select_replay_batch" if replay.event_ids is None else "select_replay_events"
    return await _all(conn, name, {
        **_range_params(op["endpoint_id"], op["tenant"], replay),
        "after_at": op["cursor_at"] or _BEGINNING - timedelta(days=1),
        "after_id": op["cursor_id"] or nil_uuid(), "limit": limit})


async def operation_progress(conn: Conn, op: Row, owner: str, *, cursor: Row, processed: int,
                             enqueued: int, lease_s: float) -> None:
    await conn.execute(Q["operation_progress"], {
        "id": op["id"], "owner": owner, "cursor_at": cursor["created_at"],
        "cursor_id": cursor["delivery_id"], "processed": processed, "enqueued": enqueued,
        "lease_s": lease_s})


async def finish_operation(conn: Conn, operation_id: uuid.UUID, owner: str, status: str,
                           error: str | None = None) -> None:
    await conn.execute(Q["finish_operation"], {
        "id": operation_id, "owner": owner, "status": status, "error": error})


async def claim_orphaned_operation(conn: Conn, owner: str, lease_s: float) -> uuid.UUID | None:
    row = await _one(conn, "claim_orphaned_operation", {"owner": owner, "lease_s": lease_s})
    return None if row is None else row["id"]


# -- events ------------------------------------------------------------------------------
async def list_events(conn: Conn, *, tenant: str, patterns: list[str] | None, since: datetime,
                      until: datetime, after: tuple[datetime, uuid.UUID] | None,
                      limit: int) -> list[Row]:
    after_at, after_id = after or (_BEGINNING - timedelta(days=1), nil_uuid())
    return await _all(conn, "list_events", {
        "tenant": tenant, "patterns": patterns, "since": since, "until": until,
        "after_at": after_at, "after_id": after_id, "limit": limit})


async def get_event(conn: Conn, event_id: uuid.UUID, tenant: str | None) -> Row:
    row = await _one(conn, "get_event", {"id": event_id, "tenant": tenant})
    if row is None:
        raise not_found("event")
    return row
