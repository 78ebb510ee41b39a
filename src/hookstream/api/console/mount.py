"""Attaching the console to the API app: a sub-application under ``/console`` with its
own middleware, and the one JSON route it adds (``POST /v1/portal-sessions``).

The middleware is where every console request passes: the session is read (or a new
anonymous one made, so the sign-in form has a CSRF token too), every state change is
refused without a valid CSRF token or when the browser says it comes from another site,
errors become HTML pages (another tenant's ids: "not found"), and every answer gets the
security headers (``headers``) and, when it changed, the session cookie. The errors are
mapped by ``hookstream.api.problems``, as for the JSON API, and rendered as a page.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from aiohttp import web

from hookstream.api.access import authed
from hookstream.api.console import actions, csrf, entry, headers, operator, pages, portal_api
from hookstream.api.console import session as sessions
from hookstream.api.console.context import (
    CONSOLE,
    KEY,
    Console,
    console_of,
    page,
    secure,
)
from hookstream.api.console.render import static_files
from hookstream.api.console.session import CHANGED, SESSION
from hookstream.api.handling import Handler
from hookstream.api.problems import problem_of
from hookstream.api.resources import API
from hookstream.controlplane.errors import ApiError
from hookstream.controlplane.portal import KeyHolder
from hookstream.core.settings import ApiSettings
from hookstream.io.pg import translating

log = logging.getLogger("hookstream.api.console")

# (method, path, handler, operator only): the console's JSON routes, in openapi.yaml
JSON_ROUTES: tuple[tuple[str, str, Handler, bool], ...] = (
    ("POST", "/v1/portal-sessions", portal_api.create_portal_session, True),
)

PageHandler = Callable[[web.Request], Awaitable[web.Response]]
PAGES: tuple[tuple[str, str, PageHandler], ...] = (
    ("GET", "/", entry.index),
    ("GET", "/login", entry.login_form),
    ("POST", "/login", entry.login),
    ("GET", "/portal", entry.portal_page),
    ("POST", "/portal", entry.portal_open),
    ("POST", "/logout", entry.logout),
    ("GET", "/endpoints", pages.endpoints_page),
    ("GET", "/endpoints/new", pages.new_endpoint),
    ("POST", "/endpoints", actions.create_endpoint),
    ("GET", "/endpoints/{endpoint_id}", pages.endpoint),
    ("GET", "/endpoints/{endpoint_id}/edit", pages.edit_endpoint),
    ("POST", "/endpoints/{endpoint_id}", actions.update_endpoint),
    ("POST", "/endpoints/{endpoint_id}/pause", actions.pause_endpoint),
    ("POST", "/endpoints/{endpoint_id}/disable", actions.disable_endpoint),
    ("POST", "/endpoints/{endpoint_id}/enable", actions.enable_endpoint),
    ("POST", "/endpoints/{endpoint_id}/replay", actions.replay_endpoint),
    ("POST", "/endpoints/{endpoint_id}/recover", actions.recover_endpoint),
    ("GET", "/endpoints/{endpoint_id}/secrets", pages.secrets_page),
    ("POST", "/endpoints/{endpoint_id}/secrets/rotate", actions.rotate_secret),
    ("POST", "/endpoints/{endpoint_id}/secrets/{version}/revoke", actions.revoke_secret),
    ("GET", "/deliveries", pages.deliveries_page),
    ("GET", "/deliveries/{delivery_id}", pages.delivery),
    ("GET", "/deliveries/{delivery_id}/live", pages.delivery_live),
    ("POST", "/deliveries/{delivery_id}/replay", actions.replay_delivery),
    ("GET", "/events", pages.events_page),
    ("GET", "/events/{event_id}", pages.event),
    ("GET", "/operations/{operation_id}", pages.operation),
    ("GET", "/operations/{operation_id}/live", pages.operation_live),
    ("GET", "/ops", operator.overview),
    ("GET", "/ops/tenants", operator.tenants),
    ("GET", "/ops/dead-letters", operator.dead_letters),
    ("GET", "/ops/quarantine", operator.quarantine),
    ("GET", "/ops/operations", operator.operations),
)

_TITLES = {400: "That request is not valid", 401: "Not signed in", 403: "Not allowed",
           404: "Not found", 405: "Not allowed", 409: "Not in this state",
           413: "Request too large", 503: "Temporarily unavailable"}


def _error_page(request: web.Request, status: int, message: str) -> web.Response:
    return page(request, "error.html", status, title=_TITLES.get(status, "Something went wrong"),
                message=message, code=status)


async def _check_csrf(request: web.Request, key: bytes, sid: str) -> None:
    if csrf.cross_site(request.headers.get("Sec-Fetch-Site")):
        raise ApiError(403, "csrf", "Refused: this request came from another site.")
    data = await request.post()
    presented = data.get(csrf.FIELD)
    if not isinstance(presented, str):
        presented = request.headers.get(csrf.HEADER)
    if not csrf.valid(key, sid, presented):
        raise ApiError(403, "csrf", "Refused: the form's security token is missing or out of"
                                    " date. Reload the page and try again.")


@web.middleware
async def console_middleware(request: web.Request,
                             handler: Callable[[web.Request], Awaitable[web.StreamResponse]],
                             ) -> web.StreamResponse:
    console = console_of(request)
    now = sessions.now()
    response: web.StreamResponse
    try:
        with translating():
            key = await console.keys.get(request.config_dict[API].conn)
            request[KEY] = key
            request[SESSION], fresh = sessions.read(request, key, now)
            # A new anonymous session is set only on a page view (for its forms' token),
            # never on a refused post: another site's form must not sign anyone out.
            request[CHANGED] = fresh and request.method in csrf.SAFE_METHODS
            if request.method not in csrf.SAFE_METHODS:
                await _check_csrf(request, key, request[SESSION].sid)
            response = await handler(request)
    except web.HTTPException as exc:
        if 300 <= exc.status < 400 and "Location" in exc.headers:  # a handler's redirect
            response = web.Response(status=exc.status,
                                    headers={"Location": exc.headers["Location"]})
        else:
            problem = problem_of(exc, request, log)
            response = _error_page(request, problem.status, problem.for_people)
    except Exception as exc:
        problem = problem_of(exc, request, log)
        response = _error_page(request, problem.status, problem.for_people)
    static = request.path.startswith("/console/static/")
    response.headers.update(headers.security_headers(
        console.settings.console_frame_ancestors, cache=static, https=secure(request)))
    if request.get(CHANGED) and KEY in request:
        sessions.write(response, request[KEY], request[SESSION], secure=secure(request),
                       now=now)
    return response


async def static(request: web.Request) -> web.Response:
    found = static_files().get(request.match_info["name"])
    if found is None:
        raise web.HTTPNotFound()
    return web.Response(body=found.body, content_type=found.content_type,
                        headers={"Cache-Control": "public, max-age=31536000, immutable"})


async def _to_console(_request: web.Request) -> web.Response:
    # answered, not raised: the API's middleware turns raised HTTP errors into JSON
    return web.Response(status=302, headers={"Location": "/console/"})


def mount(app: web.Application, settings: ApiSettings) -> None:
    if not settings.console_enabled:
        return  # and no portal links: they would lead nowhere
    app[CONSOLE] = Console(settings, KeyHolder())
    for method, path, handler, operator_only in JSON_ROUTES:
        app.router.add_route(method, path, authed(handler, operator=operator_only))
    console = web.Application(middlewares=[console_middleware])
    for method, path, page_handler in PAGES:
        console.router.add_route(method, path, page_handler)
    console.router.add_get("/static/{name}", static)
    app.add_subapp("/console", console)
    # "/" and "/console" (no slash) lead a person who opens the API's address to the console
    app.router.add_get("/", _to_console)
    app.router.add_get("/console", _to_console)
