"""``/v1/outbox``: rows the relay quarantined, and putting one back in line
(``hookstream.controlplane.outbox``)."""

from __future__ import annotations

from aiohttp import web

from hookstream.api.handling import Ctx, Route, json_response, page
from hookstream.controlplane import auth, outbox
from hookstream.controlplane import validation as v
from hookstream.controlplane.views import outbox_row


async def list_quarantined(c: Ctx) -> web.Response:
    q = c.query("tenant", "cursor", "limit")
    tenant = auth.listing_tenant(c.principal, v.tenant_param(q))
    limit = v.limit_param(q)
    rows = await outbox.list_quarantined(c.cp, tenant, v.cursor_param(q), limit + 1)
    return page([outbox_row(r) for r in rows], rows, limit,
                lambda r: (r["quarantined_at"], r["event_id"]))


async def get_outbox_row(c: Ctx) -> web.Response:
    c.query()
    return json_response(outbox_row(await outbox.get_row(c.cp, c.path_uuid("event_id"),
                                                         c.scope)))


async def requeue(c: Ctx) -> web.Response:
    c.query()
    v.only(await c.body(required=False), ())
    event_id = c.path_uuid("event_id")
    row = await outbox.requeue(c.cp, event_id, c.scope)
    return json_response(outbox_row(row), 202, f"/v1/outbox/{event_id}")


ROUTES: tuple[Route, ...] = (
    ("GET", "/v1/outbox/quarantined", list_quarantined, False),
    ("GET", "/v1/outbox/{event_id}", get_outbox_row, False),
    ("POST", "/v1/outbox/{event_id}/requeue", requeue, False),
)
