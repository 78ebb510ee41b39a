"""``/v1/me`` (who a key is), and the operator's ``/v1/tenants`` and API keys."""

from __future__ import annotations

from aiohttp import web

from hookstream.api.handling import Ctx, Route, json_response
from hookstream.controlplane import tenants, views
from hookstream.controlplane import validation as v
from hookstream.controlplane.errors import invalid


async def whoami(c: Ctx) -> web.Response:
    c.query()
    p = c.principal
    return json_response({"key_id": p.key_id, "tenant": p.tenant, "operator": p.operator})


async def create_tenant(c: Ctx) -> web.Response:
    c.query()
    body = await c.body()
    v.only(body, ("id", "name"))
    if "id" not in body:
        raise invalid("id", "required")
    tenant = v.tenant_id(body["id"], "id")
    name = v.text(body.get("name", ""), "name", max_len=v.MAX_NAME)
    async with c.cp.conn() as conn:
        row = await tenants.create_tenant(conn, tenant, name)
    return json_response(views.tenant(row), 201, f"/v1/tenants/{tenant}")


async def list_tenants(c: Ctx) -> web.Response:
    q = c.query("cursor", "limit")
    raw = v.single(q, "cursor")
    after = None if raw is None else v.tenant_id(raw, "cursor")
    limit = v.limit_param(q)
    async with c.cp.conn() as conn:
        rows = await tenants.list_tenants(conn, after, limit + 1)
    more = len(rows) > limit
    return json_response({"data": [views.tenant(r) for r in rows[:limit]],
                          "next_cursor": rows[limit - 1]["id"] if more else None})


def _path_tenant(c: Ctx) -> str:
    return v.tenant_id(c.request.match_info["tenant"], "tenant")


async def create_tenant_key(c: Ctx) -> web.Response:
    c.query()
    body = await c.body(required=False)
    v.only(body, ("name",))
    name = v.text(body.get("name", ""), "name", max_len=v.MAX_NAME)
    tenant = _path_tenant(c)
    async with c.cp.conn() as conn:
        row, token = await tenants.issue_key(conn, tenant, name)
    return json_response({**views.api_key(row), "token": token}, 201)


async def list_tenant_keys(c: Ctx) -> web.Response:
    c.query()
    tenant = _path_tenant(c)
    async with c.cp.conn() as conn:
        rows = await tenants.list_keys(conn, tenant, known_tenant=True)
    return json_response({"data": [views.api_key(r) for r in rows]})


async def revoke_key(c: Ctx) -> web.Response:
    c.query()
    async with c.cp.conn() as conn:
        row = await tenants.revoke_key(conn, c.path_uuid("key_id"))
    return json_response(views.api_key(row))


ROUTES: tuple[Route, ...] = (
    ("GET", "/v1/me", whoami, False),
    ("POST", "/v1/tenants", create_tenant, True),
    ("GET", "/v1/tenants", list_tenants, True),
    ("POST", "/v1/tenants/{tenant}/api-keys", create_tenant_key, True),
    ("GET", "/v1/tenants/{tenant}/api-keys", list_tenant_keys, True),
    ("DELETE", "/v1/api-keys/{key_id}", revoke_key, True),
)
