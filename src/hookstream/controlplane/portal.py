"""The tenant portal's sessions: portal links an operator's backend asks for, signing
in with an API key, and whether the key a session rests on is still valid.

The console's signing key is kept in PostgreSQL (``console_keys``, migration 0010) so
every API instance signs and verifies portal links, session cookies and CSRF tokens
alike without a setting to distribute; it is read once per process (``KeyHolder``).

A portal link is ``<base>/console/portal#token=<signed grant>``: the token rides in the
fragment, which browsers never send, so it reaches no log. It is valid until
``expires_at`` (``ttl_s``, 1 minute to 1 day) and only while the operator key that
asked for it is not revoked; ``read_only`` links show everything and change nothing.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from datetime import UTC, datetime
from typing import Any

from hookstream.controlplane import auth, console_store, store, tenants, tokens
from hookstream.controlplane import validation as v
from hookstream.controlplane.context import ControlPlane
from hookstream.controlplane.errors import ApiError, invalid
from hookstream.controlplane.store import Conn

KEY_BYTES = 32
DEFAULT_TTL_S = 3600
MIN_TTL_S = 60
MAX_TTL_S = 86_400


async def load_or_create(conn: Conn) -> bytes:
    key = await console_store.console_key(conn)
    if key is None:
        await console_store.create_console_key(conn, secrets.token_bytes(KEY_BYTES))
        key = await console_store.console_key(conn)
    assert key is not None
    return key


class KeyHolder:
    """The key, fetched on first use; concurrent first requests fetch it once."""

    def __init__(self) -> None:
        self._key: bytes | None = None
        self._lock = asyncio.Lock()

    async def get(self, connect: Callable[[], AbstractAsyncContextManager[Conn]]) -> bytes:
        if self._key is None:
            async with self._lock:
                if self._key is None:
                    async with connect() as conn:
                        self._key = await load_or_create(conn)
        return self._key


def portal_url(base: str, token: str) -> str:
    return f"{base}/console/portal#token={token}"


async def create_portal_session(cp: ControlPlane, keys: KeyHolder, principal: auth.Principal,
                                body: dict[str, Any], *, base: str) -> dict[str, Any]:
    """A signed link to the portal of ``body["tenant"]``, vouched for by ``principal``
    (an operator key)."""
    v.only(body, ("tenant", "ttl_s", "read_only"))
    if "tenant" not in body:
        raise invalid("tenant", "required")
    tenant = v.tenant_id(body["tenant"])
    ttl_s = v.integer(body.get("ttl_s", DEFAULT_TTL_S), "ttl_s", MIN_TTL_S, MAX_TTL_S)
    read_only = v.boolean(body.get("read_only", False), "read_only")
    async with cp.conn() as conn:
        await store.require_tenant(conn, tenant)
    key = await keys.get(cp.conn)
    grant = tokens.Grant(tenant, int(time.time()) + ttl_s, principal.key_id, read_only)
    token = tokens.sign_grant(key, grant)
    return {"url": portal_url(base, token), "token": token, "tenant": tenant,
            "read_only": read_only,
            "expires_at": datetime.fromtimestamp(grant.expires_at, UTC)}


async def sign_in(cp: ControlPlane, raw_key: str) -> auth.Principal | None:
    """Whose key was typed into the sign-in form (None: not a valid, active key)."""
    try:
        return await tenants.principal(cp, auth.bearer_token(f"Bearer {raw_key}"))
    except ApiError:
        return None


async def still_valid(conn: Conn, session: tokens.Session) -> bool:
    """The key the session rests on is active and still what it was: the tenant's own
    key (sign-in), or an operator key (a portal link)."""
    row = await console_store.active_key(conn, session.key_id)
    if row is None:
        return False
    if session.via == "portal":
        return row["tenant"] is None
    return row["tenant"] == session.tenant


async def session_valid(cp: ControlPlane, session: tokens.Session) -> bool:
    async with cp.conn() as conn:
        return await still_valid(conn, session)
