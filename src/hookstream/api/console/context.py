"""What every console handler needs: the control plane, the signing key, the session,
the signed-in viewer, and a page rendered with the context every template
shares (viewer, CSRF token, the message of the action just done)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from aiohttp import web
from multidict import MultiDict

from hookstream.api.console import csrf, forms
from hookstream.api.console import session as sessions
from hookstream.api.console.render import render_html
from hookstream.api.console.session import SESSION, Viewer
from hookstream.api.resources import control_plane
from hookstream.controlplane import portal, tokens
from hookstream.controlplane import validation as v
from hookstream.controlplane.context import ControlPlane
from hookstream.controlplane.errors import ApiError, not_found
from hookstream.core.settings import ApiSettings

PAGE_SIZE = 25
KEY = web.RequestKey("console_key", bytes)
VIEWER = web.RequestKey("console_viewer", Viewer)

# ?done=<name> after a redirect: a fixed message, never text taken from the URL
DONE = {
    "created": "Endpoint created.",
    "saved": "Endpoint saved.",
    "paused": "Endpoint paused: deliveries are held until it is enabled.",
    "disabled": "Endpoint disabled.",
    "enabled": "Endpoint enabled: held deliveries are being sent.",
    "replayed": "Replay queued: a new attempt of the same delivery (same webhook-id).",
    "replayed-sweeper": "Replay committed; Kafka did not confirm the task in time, so the"
                        " dispatcher's sweeper will send it within minutes.",
    "revoked": "Secret revoked.",
    "signed-out": "Signed out.",
    "ended": "Your session has ended (expired or its key was revoked). Sign in again.",
}


@dataclass
class Console:
    settings: ApiSettings
    keys: portal.KeyHolder


CONSOLE = web.AppKey("hookstream_console", Console)


def api_of(request: web.Request) -> ControlPlane:
    return control_plane(request)


def console_of(request: web.Request) -> Console:
    return request.config_dict[CONSOLE]


def secure(request: web.Request) -> bool:
    return request.secure or console_of(request).settings.console_public_url.startswith(
        "https://")


async def viewer(request: web.Request, *, operator: bool = False,
                 write: bool = False) -> Viewer:
    """The signed-in viewer, or a redirect to sign in. ``operator``: operator pages
    answer "not found" to tenants, like any resource of someone else. ``write``: a
    read-only portal link changes nothing."""
    s = request[SESSION]
    if not s.signed_in:
        raise web.HTTPSeeOther("/console/login")
    if not await portal.session_valid(api_of(request), s):
        sessions.replace(request, tokens.anonymous(sessions.now(), sessions.ANONYMOUS_TTL_S))
        raise web.HTTPSeeOther("/console/login?done=ended")
    found = Viewer(s)
    request[VIEWER] = found
    if operator and not found.operator:
        raise not_found("page")
    if write and found.read_only:
        raise ApiError(403, "read_only", "this portal link is read-only")
    return found


async def form(request: web.Request) -> MultiDict[str]:
    data = await request.post()
    # file parts are never expected; a field that is one is treated as absent
    return MultiDict((k, val) for k, val in data.items() if isinstance(val, str))


def query_time(query: Any, name: str) -> datetime | None:
    raw = forms.time_value(v.single(query, name))
    return None if raw is None else v.timestamp(raw, name)


def query_uuid(query: Any, name: str) -> Any:
    raw = v.single(query, name)
    return None if not raw else v.uuid_value(raw, name)


def query_tenant(query: Any) -> str | None:
    raw = v.single(query, "tenant")
    return None if not raw else v.tenant_id(raw)


def query_cursor(query: Any) -> Any:
    raw = v.single(query, "cursor")
    return None if not raw else v.decode_cursor(raw)


def page_context(request: web.Request) -> dict[str, Any]:
    s = request.get(SESSION)
    key = request.get(KEY)
    return {
        "viewer": request.get(VIEWER),
        "csrf_token": csrf.token_for(key, s.sid) if s is not None and key is not None else "",
        "csrf_field": csrf.FIELD,
        "done": DONE.get(request.query.get("done", "")),
        "grafana_url": console_of(request).settings.console_grafana_url,
        "path": request.path,
    }


def page(request: web.Request, template: str, status: int = 200, **context: Any) -> web.Response:
    html = render_html(template, {**page_context(request), **context})
    return web.Response(text=html, status=status, content_type="text/html", charset="utf-8")


def see_other(location: str) -> web.HTTPSeeOther:
    return web.HTTPSeeOther(location)
