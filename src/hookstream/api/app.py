"""The control-plane app (aiohttp), assembled: the JSON routes (``routes``) behind the
bearer-key check (``access``) and the error and metrics middleware, ``/openapi.json``,
the control plane opened with the app (``resources``), and the browser console
(``console.mount``).

Only the entry point that serves it (``server``) imports this module; everything it
assembles is imported from here, never the other way round.
"""

from __future__ import annotations

from aiohttp import web
from prometheus_client import CollectorRegistry

from hookstream.api.access import authed
from hookstream.api.console.mount import mount
from hookstream.api.middleware import errors_and_metrics
from hookstream.api.openapi import openapi
from hookstream.api.resources import REGISTRY, SETTINGS, open_control_plane
from hookstream.api.routes import ROUTES
from hookstream.core.settings import ApiSettings

MAX_BODY_BYTES = 1024 * 1024


def build_app(settings: ApiSettings, registry: CollectorRegistry | None = None) -> web.Application:
    app = web.Application(middlewares=[errors_and_metrics], client_max_size=MAX_BODY_BYTES)
    app[SETTINGS] = settings
    app[REGISTRY] = registry if registry is not None else CollectorRegistry()
    app.cleanup_ctx.append(open_control_plane)
    app.router.add_get("/openapi.json", openapi)
    for method, path, handler, operator in ROUTES:
        app.router.add_route(method, path, authed(handler, operator=operator))
    mount(app, settings)  # the browser console and its JSON route
    return app
