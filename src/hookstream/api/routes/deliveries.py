"""``/v1/deliveries``: list, one with its attempts, and a replay of one."""

from __future__ import annotations

from datetime import timedelta

from aiohttp import web

from hookstream.api.handling import Ctx, Route, json_response, page
from hookstream.controlplane import auth, deliveries, views
from hookstream.controlplane import validation as v
from hookstream.controlplane.errors import invalid
from hookstream.controlplane.tasks import now_utc


async def list_deliveries(c: Ctx) -> web.Response:
    q = c.query("tenant", "endpoint_id", "status", "since", "until", "cursor", "limit")
    endpoint_id = v.uuid_param(q, "endpoint_id")
    requested = v.tenant_param(q)
    if c.principal.operator and requested is None and endpoint_id is None:
        raise invalid("endpoint_id", "give endpoint_id or tenant when using an operator key")
    tenant = auth.listing_tenant(c.principal, requested)
    statuses = v.choices_param(q, "status", v.DELIVERY_STATUSES) or v.DELIVERY_STATUSES
    since = v.time_param(q, "since") or c.cp.oldest()
    until = v.time_param(q, "until") or now_utc() + timedelta(days=1)
    limit = v.limit_param(q)
    _, rows = await deliveries.list_deliveries(
        c.cp, tenant=tenant, endpoint_id=endpoint_id, statuses=statuses, since=since,
        until=until, before=v.cursor_param(q), limit=limit + 1)
    return page([views.delivery(r) for r in rows], rows, limit,
                lambda r: (r["created_at"], r["delivery_id"]))


async def get_delivery(c: Ctx) -> web.Response:
    c.query()
    row, attempts = await deliveries.get_delivery(c.cp, c.path_uuid("delivery_id"), c.scope)
    return json_response({**views.delivery(row), "attempt_log": [views.attempt(a)
                                                                  for a in attempts]})


async def replay_delivery(c: Ctx) -> web.Response:
    c.query()
    v.only(await c.body(required=False), ())
    delivery_id = c.path_uuid("delivery_id")
    done = await deliveries.replay_delivery(c.cp, delivery_id, c.scope)
    response = json_response(views.delivery(done.delivery), 202,
                             f"/v1/deliveries/{delivery_id}")
    # Who sends it: the task Kafka acknowledged, or (Kafka away) the dispatcher's sweeper.
    response.headers["Hookstream-Task"] = "acknowledged" if done.queued else "sweeper"
    return response


ROUTES: tuple[Route, ...] = (
    ("GET", "/v1/deliveries", list_deliveries, False),
    ("GET", "/v1/deliveries/{delivery_id}", get_delivery, False),
    ("POST", "/v1/deliveries/{delivery_id}/replay", replay_delivery, False),
)
