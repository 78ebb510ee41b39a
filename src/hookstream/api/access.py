"""Who calls a JSON route: the bearer key, looked up for every request, and the
operator-only routes refused to tenant keys."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web

from hookstream.api.handling import Ctx, Handler
from hookstream.api.resources import API
from hookstream.controlplane import auth, tenants


def authed(handler: Handler, *, operator: bool = False) -> Callable[[web.Request], Awaitable[
        web.Response]]:
    async def wrapped(request: web.Request) -> web.Response:
        cp = request.app[API]
        principal = await tenants.authenticate(cp, request.headers.get("Authorization"))
        if operator:
            auth.require_operator(principal)
        return await handler(Ctx(request, cp, principal))

    wrapped.__name__ = handler.__name__
    return wrapped
