"""Tenants and API keys: who may call the control plane. These run in the caller's
transaction (``conn``): the JSON API opens one per request, the bootstrap commands
(``hookstream tenants | apikeys``) one per command, straight to PostgreSQL, because the
first operator key cannot need a key. Tokens are returned once; only their hash is kept.
"""

from __future__ import annotations

import uuid

from hookstream.controlplane import auth, store
from hookstream.controlplane.context import ControlPlane
from hookstream.controlplane.errors import unauthorized
from hookstream.controlplane.store import Conn, Row


async def principal(cp: ControlPlane, token: str) -> auth.Principal | None:
    """Whose key this is (None: unknown or revoked)."""
    async with cp.conn() as conn:
        return await store.principal(conn, token)


async def authenticate(cp: ControlPlane, authorization: str | None) -> auth.Principal:
    """The caller of an ``Authorization: Bearer <key>`` header, or 401."""
    token = auth.bearer_token(authorization)
    found = await principal(cp, token)
    if found is None:
        raise unauthorized("invalid or revoked API key")
    return found


async def create_tenant(conn: Conn, tenant: str, name: str) -> Row:
    return await store.create_tenant(conn, tenant, name)


async def list_tenants(conn: Conn, after: str | None, limit: int) -> list[Row]:
    return await store.list_tenants(conn, after, limit)


async def issue_key(conn: Conn, tenant: str | None, name: str) -> tuple[Row, str]:
    """A new key of ``tenant`` (None: an operator key) and its token."""
    if tenant is not None:
        await store.require_tenant(conn, tenant)
    return await store.create_api_key(conn, tenant, name)


async def list_keys(conn: Conn, tenant: str | None, *, every: bool = False,
                    known_tenant: bool = False) -> list[Row]:
    """``known_tenant``: refuse (400) a tenant that does not exist, rather than list
    nothing."""
    if known_tenant and tenant is not None:
        await store.require_tenant(conn, tenant)
    return await store.list_api_keys(conn, tenant, every=every)


async def revoke_key(conn: Conn, key_id: uuid.UUID) -> Row:
    return await store.revoke_api_key(conn, key_id)
