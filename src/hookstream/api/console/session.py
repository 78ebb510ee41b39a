"""Who is looking at a console page: the session cookie, and the check that the API key
behind it is still valid.

The cookie is a signed ``tokens.Session`` (nothing server-side to store or expire). It
is HttpOnly (no script reads it), SameSite=Lax (a cross-site page's POST does not carry
it) and Secure when the console is served over https. Every page re-checks the key it
rests on, so revoking the tenant's key, or the operator key that made a portal link,
ends the session on its next request (``hookstream.controlplane.portal.still_valid``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from aiohttp import web

from hookstream.controlplane import auth, tokens
from hookstream.controlplane.tokens import Session

COOKIE = "hookstream_console"
COOKIE_PATH = "/console"
ANONYMOUS_TTL_S = 3600.0
SESSION = web.RequestKey("console_session", Session)
# set when a handler replaced the session (sign-in, sign-out): the cookie is rewritten
CHANGED = web.RequestKey("console_session_changed", bool)


def read(request: web.Request, key: bytes, now: float) -> tuple[Session, bool]:
    """The request's session, or a new anonymous one (True: it must be set)."""
    raw = request.cookies.get(COOKIE)
    if raw:
        try:
            return tokens.verify_session(key, raw, now), False
        except tokens.TokenRefused:
            pass
    return tokens.anonymous(now, ANONYMOUS_TTL_S), True


def replace(request: web.Request, session: Session) -> None:
    request[SESSION] = session
    request[CHANGED] = True


def write(response: web.StreamResponse, key: bytes, session: Session, *, secure: bool,
          now: float) -> None:
    response.set_cookie(COOKIE, tokens.sign_session(key, session), path=COOKIE_PATH,
                        max_age=max(0, int(session.expires_at - now)), httponly=True,
                        samesite="Lax", secure=secure)


@dataclass(frozen=True)
class Viewer:
    session: Session

    @property
    def tenant(self) -> str | None:
        return self.session.tenant

    @property
    def operator(self) -> bool:
        return self.session.operator

    @property
    def read_only(self) -> bool:
        return self.session.read_only

    @property
    def scope(self) -> str | None:
        """The tenant every query is limited to, None for an operator (as ``auth``)."""
        return self.session.tenant

    @property
    def principal(self) -> auth.Principal:
        assert self.session.key_id is not None
        return auth.Principal(self.session.key_id, self.session.tenant)


def now() -> float:
    return time.time()
