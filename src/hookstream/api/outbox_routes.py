"""``/v1/outbox``: rows the relay quarantined (a reason on each), and putting one back in
line once its cause is fixed (a relay setting raised, a schema version deployed, the row
corrected in SQL). A tenant sees its own rows; another tenant's event ids answer 404."""

from __future__ import annotations

import base64
import uuid
from datetime import UTC, datetime
from typing import Any

from aiohttp import web

from hookstream.api import auth
from hookstream.api import validation as v
from hookstream.api.errors import conflict, not_found
from hookstream.api.handling import Ctx, Route, json_response, page
from hookstream.io import queries

Q = queries.load("api_outbox")
_END = datetime(9999, 1, 1, tzinfo=UTC)
PAYLOAD_EXCERPT_BYTES = 4096


def outbox_row(row: dict[str, Any]) -> dict[str, Any]:
    state = ("published" if row.get("published_at") else
             "quarantined" if row["quarantined_at"] else "pending")
    view = {
        "event_id": row["event_id"], "tenant": row["tenant"], "type": row["type"],
        "schema_version": row["schema_version"], "object_id": row["object_id"],
        "object_version": row["object_version"], "occurred_at": row["occurred_at"],
        "created_at": row["created_at"], "state": state,
        "quarantined_at": row["quarantined_at"], "reason": row["quarantine_reason"],
        "payload_bytes": row["payload_bytes"],
    }
    if "published_at" in row:
        view["published_at"] = row["published_at"]
    if "payload" in row:
        # Whatever the producer wrote, JSON or not: the first bytes, to see what is wrong.
        view["payload_excerpt_base64"] = base64.b64encode(
            bytes(row["payload"][:PAYLOAD_EXCERPT_BYTES])).decode("ascii")
    return view


async def _all(c: Ctx, name: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    async with c.api.conn() as conn:
        cur = await conn.execute(Q[name], params)
        return await cur.fetchall()


async def list_quarantined(c: Ctx) -> web.Response:
    q = c.query("tenant", "cursor", "limit")
    tenant = auth.listing_tenant(c.principal, v.tenant_param(q))
    limit = v.limit_param(q)
    before_at, before_id = v.cursor_param(q) or (_END, uuid.UUID(int=2**128 - 1))
    rows = await _all(c, "list_quarantined", {
        "tenant": tenant, "before_at": before_at, "before_id": before_id, "limit": limit + 1})
    return page([outbox_row(r) for r in rows], rows, limit,
                lambda r: (r["quarantined_at"], r["event_id"]))


async def get_outbox_row(c: Ctx) -> web.Response:
    c.query()
    rows = await _all(c, "get_outbox_row", {"id": c.path_uuid("event_id"), "tenant": c.scope})
    if not rows:
        raise not_found("outbox row")
    return json_response(outbox_row(rows[0]))


async def requeue(c: Ctx) -> web.Response:
    c.query()
    v.only(await c.body(required=False), ())
    event_id = c.path_uuid("event_id")
    async with c.api.conn() as conn:
        cur = await conn.execute(Q["requeue"], {"id": event_id, "tenant": c.scope})
        if await cur.fetchone() is None:
            cur = await conn.execute(Q["get_outbox_row"], {"id": event_id, "tenant": c.scope})
            row = await cur.fetchone()
            if row is None:
                raise not_found("outbox row")
            raise conflict(f"outbox row is {outbox_row(row)['state']}, not quarantined")
        await conn.execute(Q["wake_relay"])
        cur = await conn.execute(Q["get_outbox_row"], {"id": event_id, "tenant": c.scope})
        row = await cur.fetchone()
    assert row is not None
    return json_response(outbox_row(row), 202, f"/v1/outbox/{event_id}")


ROUTES: tuple[Route, ...] = (
    ("GET", "/v1/outbox/quarantined", list_quarantined, False),
    ("GET", "/v1/outbox/{event_id}", get_outbox_row, False),
    ("POST", "/v1/outbox/{event_id}/requeue", requeue, False),
)
