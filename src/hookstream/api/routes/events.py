"""``/v1/events``: the events as published, for reconciliation."""

from __future__ import annotations

from datetime import timedelta

from aiohttp import web

from hookstream.api.handling import Ctx, Route, json_response, page
from hookstream.controlplane import events, views
from hookstream.controlplane import validation as v
from hookstream.controlplane.tasks import now_utc


async def list_events(c: Ctx) -> web.Response:
    q = c.query("tenant", "endpoint_id", "type", "since", "until", "cursor", "limit")
    endpoint_id = v.uuid_param(q, "endpoint_id")
    patterns = v.type_patterns_param(q)
    requested = v.tenant_param(q)
    since = events.since_in_window(c.cp, v.time_param(q, "since"))
    until = v.time_param(q, "until") or now_utc() + timedelta(days=1)
    limit = v.limit_param(q)
    _, rows = await events.list_events(
        c.cp, c.principal, requested=requested, endpoint_id=endpoint_id, patterns=patterns,
        since=since, until=until, after=v.cursor_param(q), limit=limit + 1)
    return page([views.event(r) for r in rows], rows, limit,
                lambda r: (r["occurred_at"], r["event_id"]))


async def get_event(c: Ctx) -> web.Response:
    c.query()
    row = await events.get_event(c.cp, c.path_uuid("event_id"), c.scope)
    return json_response(views.event(row))


ROUTES: tuple[Route, ...] = (
    ("GET", "/v1/events", list_events, False),
    ("GET", "/v1/events/{event_id}", get_event, False),
)
