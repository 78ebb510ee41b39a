"""``POST /v1/portal-sessions``: an operator's backend asks for a short-lived portal link
for one tenant, to embed the portal in its own product (JSON API, operator key); the
link itself is made by ``hookstream.controlplane.portal``."""

from __future__ import annotations

from aiohttp import web

from hookstream.api.console.context import console_of
from hookstream.api.handling import Ctx, json_response
from hookstream.controlplane import portal


async def create_portal_session(c: Ctx) -> web.Response:
    c.query()
    body = await c.body()
    console = console_of(c.request)
    base = console.settings.console_public_url or f"{c.request.scheme}://{c.request.host}"
    return json_response(await portal.create_portal_session(
        c.cp, console.keys, c.principal, body, base=base), 201)
