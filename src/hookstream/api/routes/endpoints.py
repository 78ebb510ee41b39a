"""``/v1/endpoints``: create (one, or many from an import), list, read, edit, delete,
pause, disable, enable, health; and the endpoint's signing secrets."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from hookstream.api.handling import Ctx, Route, json_response, page
from hookstream.controlplane import auth, endpoints, secrets, views
from hookstream.controlplane import validation as v
from hookstream.controlplane.store import Row
from hookstream.controlplane.tasks import now_utc
from hookstream.endpoints import STATUSES

DEFAULT_HEALTH_WINDOW_S = 3600


async def create_endpoint(c: Ctx) -> web.Response:
    c.query()
    row, secret = await endpoints.create_endpoint(c.cp, c.principal, await c.body())
    return json_response({**views.endpoint(row), "secret": secret}, 201,
                         f"/v1/endpoints/{row['id']}")


async def import_endpoints(c: Ctx) -> web.Response:
    c.query()
    results = await endpoints.import_endpoints(c.cp, c.principal, await c.body())
    return json_response({"results": results}, 207)


async def list_endpoints(c: Ctx) -> web.Response:
    q = c.query("tenant", "status", "cursor", "limit")
    tenant = auth.listing_tenant(c.principal, v.tenant_param(q))
    status = v.choices_param(q, "status", STATUSES)
    limit = v.limit_param(q)
    rows = await endpoints.list_endpoints(c.cp, tenant, status, v.cursor_param(q), limit + 1)
    return page([views.endpoint(r) for r in rows], rows, limit,
                lambda r: (r["created_at"], r["id"]))


async def get_endpoint(c: Ctx) -> web.Response:
    c.query()
    row = await endpoints.get_endpoint(c.cp, c.path_uuid("endpoint_id"), c.scope)
    return json_response(views.endpoint(row))


async def update_endpoint(c: Ctx) -> web.Response:
    c.query()
    endpoint_id = c.path_uuid("endpoint_id")
    row = await endpoints.update_endpoint(c.cp, endpoint_id, c.scope, await c.body())
    return json_response(views.endpoint(row))


async def delete_endpoint(c: Ctx) -> web.Response:
    c.query()
    # 202 at once: the history goes in the background (hookstream.controlplane.deletion)
    op = await endpoints.delete_endpoint(c.cp, c.scope, c.path_uuid("endpoint_id"))
    return json_response(views.operation(op), 202, f"/v1/operations/{op['id']}")


async def _transition(c: Ctx, change: Callable[..., Awaitable[Row]], *args: Any) -> web.Response:
    row = await change(c.cp, c.path_uuid("endpoint_id"), c.scope, *args)
    return json_response(views.endpoint(row))


async def pause_endpoint(c: Ctx) -> web.Response:
    c.query()
    until = v.pause(await c.body(required=False), now=now_utc())
    return await _transition(c, endpoints.pause_endpoint, until)


async def disable_endpoint(c: Ctx) -> web.Response:
    c.query()
    reason = v.disable(await c.body(required=False))
    return await _transition(c, endpoints.disable_endpoint, reason)


async def enable_endpoint(c: Ctx) -> web.Response:
    c.query()
    v.only(await c.body(required=False), ())
    return await _transition(c, endpoints.enable_endpoint)


async def endpoint_health(c: Ctx) -> web.Response:
    q = c.query("window_s")
    raw = v.single(q, "window_s")
    window_s = DEFAULT_HEALTH_WINDOW_S if raw is None else v.integer_text(raw, "window_s",
                                                                          60, 7 * 86_400)
    return json_response(await endpoints.endpoint_health(
        c.cp, c.path_uuid("endpoint_id"), c.scope, window_s=window_s))


# -- secrets -----------------------------------------------------------------------------
async def list_secrets(c: Ctx) -> web.Response:
    c.query()
    _, rows = await secrets.list_secrets(c.cp, c.path_uuid("endpoint_id"), c.scope)
    return json_response({"data": [views.secret_info(r) for r in rows]})


async def rotate_secret(c: Ctx) -> web.Response:
    c.query()
    overlap_s = v.rotation(await c.body(required=False),
                           default_overlap_s=c.settings.secret_overlap_s)
    done = await secrets.rotate_secret(c.cp, c.path_uuid("endpoint_id"), c.scope, overlap_s)
    return json_response({"version": done.version, "secret": done.secret,
                          "overlap_s": done.overlap_s,
                          "secrets": [views.secret_info(r) for r in done.secrets]}, 201)


async def revoke_secret(c: Ctx) -> web.Response:
    c.query()
    version = v.secret_version(c.request.match_info["version"])
    row = await secrets.revoke_secret(c.cp, c.path_uuid("endpoint_id"), c.scope, version)
    return json_response(views.secret_info({**row, "active": False}))


ROUTES: tuple[Route, ...] = (
    ("POST", "/v1/endpoints", create_endpoint, False),
    ("GET", "/v1/endpoints", list_endpoints, False),
    ("POST", "/v1/endpoints/import", import_endpoints, False),
    ("GET", "/v1/endpoints/{endpoint_id}", get_endpoint, False),
    ("PATCH", "/v1/endpoints/{endpoint_id}", update_endpoint, False),
    ("DELETE", "/v1/endpoints/{endpoint_id}", delete_endpoint, False),
    ("POST", "/v1/endpoints/{endpoint_id}/pause", pause_endpoint, False),
    ("POST", "/v1/endpoints/{endpoint_id}/disable", disable_endpoint, False),
    ("POST", "/v1/endpoints/{endpoint_id}/enable", enable_endpoint, False),
    ("GET", "/v1/endpoints/{endpoint_id}/health", endpoint_health, False),
    ("GET", "/v1/endpoints/{endpoint_id}/secrets", list_secrets, False),
    ("POST", "/v1/endpoints/{endpoint_id}/secrets/rotate", rotate_secret, False),
    ("DELETE", "/v1/endpoints/{endpoint_id}/secrets/{version}", revoke_secret, False),
)
