"""Portal links and session cookies as signed, expiring tokens. Pure: the key and the
clock are arguments.

Signed with itsdangerous (HMAC-SHA256, the key derived per purpose through a salt), so a
session cookie can never be replayed as a portal link or the other way round. The
payload is readable (base64 JSON) but holds nothing secret: who, until when, which key
vouches for it. Expiry is checked here against ``now`` rather than by itsdangerous'
timestamp, because each token carries its own lifetime.
"""

from __future__ import annotations

import hashlib
import secrets
import uuid
from dataclasses import dataclass
from typing import Any

from itsdangerous import BadSignature, URLSafeSerializer

PORTAL = "hookstream.console.portal"
SESSION = "hookstream.console.session"
MAX_TOKEN_LENGTH = 2000


class TokenRefused(Exception):
    """A token that is not ours, was changed, or has expired (``reason`` says which)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class Grant:
    """What a portal link allows: one tenant, until ``expires_at`` (unix seconds),
    vouched for by the operator key that asked for it (revoking it ends the link)."""

    tenant: str
    expires_at: int
    key_id: uuid.UUID
    read_only: bool = False


@dataclass(frozen=True)
class Session:
    """A browser's console session. ``sid`` is random per sign-in (CSRF tokens are bound
    to it); without ``key_id`` it is anonymous (a visitor before signing in)."""

    sid: str
    expires_at: int
    key_id: uuid.UUID | None = None
    tenant: str | None = None  # None with a key: an operator
    read_only: bool = False
    via: str = ""  # "key" (signed in with an API key) or "portal" (opened a portal link)

    @property
    def signed_in(self) -> bool:
        return self.key_id is not None

    @property
    def operator(self) -> bool:
        return self.signed_in and self.tenant is None


def new_sid() -> str:
    return secrets.token_urlsafe(18)


def anonymous(now: float, ttl_s: float) -> Session:
    return Session(sid=new_sid(), expires_at=int(now + ttl_s))


def signed_in(grant: Grant | None = None, *, key_id: uuid.UUID | None = None,
              tenant: str | None = None, expires_at: int = 0) -> Session:
    """A fresh session (new sid: a session id known before sign-in is never kept)."""
    if grant is not None:
        return Session(new_sid(), grant.expires_at, grant.key_id, grant.tenant,
                       grant.read_only, "portal")
    assert key_id is not None
    return Session(new_sid(), expires_at, key_id, tenant, False, "key")


def _serializer(key: bytes, purpose: str) -> URLSafeSerializer:
    return URLSafeSerializer(key, salt=purpose, signer_kwargs={"digest_method": hashlib.sha256})


def _load(key: bytes, purpose: str, token: str, now: float) -> dict[str, Any]:
    if not token or len(token) > MAX_TOKEN_LENGTH:
        raise TokenRefused("invalid")
    try:
        data = _serializer(key, purpose).loads(token)
    except BadSignature:
        raise TokenRefused("invalid") from None
    if not isinstance(data, dict) or not isinstance(data.get("exp"), int):
        raise TokenRefused("invalid")
    if data["exp"] <= now:
        raise TokenRefused("expired")
    return data


def sign_grant(key: bytes, grant: Grant) -> str:
    return str(_serializer(key, PORTAL).dumps({
        "t": grant.tenant, "exp": grant.expires_at, "k": str(grant.key_id),
        "ro": grant.read_only}))


def verify_grant(key: bytes, token: str, now: float) -> Grant:
    data = _load(key, PORTAL, token, now)
    try:
        return Grant(str(data["t"]), data["exp"], uuid.UUID(data["k"]), bool(data["ro"]))
    except (KeyError, ValueError, TypeError):
        raise TokenRefused("invalid") from None


def sign_session(key: bytes, session: Session) -> str:
    return str(_serializer(key, SESSION).dumps({
        "s": session.sid, "exp": session.expires_at,
        "k": None if session.key_id is None else str(session.key_id),
        "t": session.tenant, "ro": session.read_only, "v": session.via}))


def verify_session(key: bytes, token: str, now: float) -> Session:
    data = _load(key, SESSION, token, now)
    try:
        key_id = None if data["k"] is None else uuid.UUID(data["k"])
        tenant = None if data["t"] is None else str(data["t"])
        return Session(str(data["s"]), data["exp"], key_id, tenant, bool(data["ro"]),
                       str(data["v"]))
    except (KeyError, ValueError, TypeError):
        raise TokenRefused("invalid") from None

