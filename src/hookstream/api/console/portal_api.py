"""``POST /v1/portal-sessions``: an operator's backend asks for a short-lived portal link
for one tenant, to embed the portal in its own product (JSON API, operator key).

The link is ``<base>/console/portal#token=<signed grant>``: the token rides in the
fragment, which browsers never send, so it reaches no log. It is valid until
``expires_at`` (``ttl_s``, 1 minute to 1 day) and only while the operator key that
asked for it is not revoked; ``read_only`` links show everything and change nothing.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

from aiohttp import web

from hookstream.api import store
from hookstream.api import validation as v
from hookstream.api.app import Ctx, json_response
from hookstream.api.console import tokens
from hookstream.api.console.context import console_of
from hookstream.api.errors import invalid

DEFAULT_TTL_S = 3600
MIN_TTL_S = 60
MAX_TTL_S = 86_400


def portal_url(base: str, token: str) -> str:
    return f"{base}/console/portal#token={token}"


async def create_portal_session(c: Ctx) -> web.Response:
    c.query()
    body = await c.body()
    v.only(body, ("tenant", "ttl_s", "read_only"))
    if "tenant" not in body:
        raise invalid("tenant", "required")
    tenant = v.tenant_id(body["tenant"])
    ttl_s = v.integer(body.get("ttl_s", DEFAULT_TTL_S), "ttl_s", MIN_TTL_S, MAX_TTL_S)
    read_only = v.boolean(body.get("read_only", False), "read_only")
    console = console_of(c.request)
    async with c.api.conn() as conn:
        await store.require_tenant(conn, tenant)
    key = await console.keys.get(c.api.conn)
    grant = tokens.Grant(tenant, int(time.time()) + ttl_s, c.principal.key_id, read_only)
    token = tokens.sign_grant(key, grant)
    base = console.settings.console_public_url or f"{c.request.scheme}://{c.request.host}"
    return json_response({"url": portal_url(base, token), "token": token, "tenant": tenant,
                          "read_only": read_only,
                          "expires_at": datetime.fromtimestamp(grant.expires_at, UTC)}, 201)
