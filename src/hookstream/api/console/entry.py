"""Getting in and out: sign-in with an API key, opening a portal link, signing out.

A portal link carries its token in the URL *fragment* (``/console/portal#token=…``),
which browsers never send to a server: no access log, proxy log or Referer ever holds
it. The portal page's script (``static/portal.js``, same origin, allowed by the CSP)
posts it once and drops it from the address bar; the answer is a session cookie and a
redirect. Every sign-in starts a new session id, so a session id planted before it
(session fixation) is worth nothing after.
"""

from __future__ import annotations

from aiohttp import web

from hookstream.api.console import session as sessions
from hookstream.api.console.context import KEY, api_of, console_of, form, page, see_other
from hookstream.api.console.session import SESSION
from hookstream.controlplane import portal, tokens


def home_of(s: tokens.Session) -> str:
    return "/console/ops" if s.operator else "/console/endpoints"


async def index(request: web.Request) -> web.Response:
    s = request[SESSION]
    raise see_other(home_of(s) if s.signed_in else "/console/login")


async def login_form(request: web.Request) -> web.Response:
    return page(request, "login.html", error=None)


async def login(request: web.Request) -> web.Response:
    data = await form(request)
    principal = await portal.sign_in(api_of(request), (data.get("api_key") or "").strip())
    if principal is None:
        return page(request, "login.html", 401, error="That API key is not valid or was revoked.")
    ttl = console_of(request).settings.console_session_ttl_s
    s = tokens.signed_in(key_id=principal.key_id, tenant=principal.tenant,
                         expires_at=int(sessions.now() + ttl))
    sessions.replace(request, s)
    raise see_other(home_of(s))


async def portal_page(request: web.Request) -> web.Response:
    return page(request, "portal.html", error=None)


async def portal_open(request: web.Request) -> web.Response:
    data = await form(request)
    try:
        grant = tokens.verify_grant(request[KEY], data.get("token", ""), sessions.now())
    except tokens.TokenRefused as exc:
        message = ("This portal link has expired: ask for a new one."
                   if exc.reason == "expired" else "This portal link is not valid.")
        return page(request, "portal.html", 401, error=message)
    s = tokens.signed_in(grant)
    if not await portal.session_valid(api_of(request), s):
        return page(request, "portal.html", 401, error="This portal link has been revoked.")
    sessions.replace(request, s)
    raise see_other("/console/endpoints")


async def logout(request: web.Request) -> web.Response:
    sessions.replace(request, tokens.anonymous(sessions.now(), sessions.ANONYMOUS_TTL_S))
    raise see_other("/console/login?done=signed-out")
