"""API keys and who may touch what: pure rules, no I/O.

A key is ``hsk_`` + 32 random bytes (base64url). Only its SHA-256 is stored: with that
much entropy a slow password hash buys nothing, and a fast one keeps the per-request
lookup a single indexed equality. A key belongs to one tenant, or to nobody: an
operator key, which may act on every tenant.

Isolation is enforced in SQL: every tenant-scoped query takes ``tenant_scope(principal)``
(None for an operator) and filters on it, so another tenant's resource is simply not
found — 404, never 403, so a key cannot probe which ids exist.
"""

from __future__ import annotations

import hashlib
import secrets
import uuid
from dataclasses import dataclass

from hookstream.controlplane.errors import forbidden, invalid, unauthorized

TOKEN_PREFIX = "hsk_"
TOKEN_BYTES = 32
DISPLAY_PREFIX_LENGTH = 12  # "hsk_" + 8 characters: enough to tell keys apart in a list
MAX_TOKEN_LENGTH = 200


@dataclass(frozen=True)
class Principal:
    key_id: uuid.UUID
    tenant: str | None  # None: an operator key

    @property
    def operator(self) -> bool:
        return self.tenant is None


def new_token(randbytes: int = TOKEN_BYTES) -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(randbytes)


def hash_token(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()


def display_prefix(token: str) -> str:
    return token[:DISPLAY_PREFIX_LENGTH]


def bearer_token(header: str | None) -> str:
    """The token of an ``Authorization: Bearer <token>`` header, or 401."""
    if not header:
        raise unauthorized("missing Authorization: Bearer <api key> header")
    scheme, _, token = header.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise unauthorized("Authorization must be 'Bearer <api key>'")
    if len(token) > MAX_TOKEN_LENGTH or not token.startswith(TOKEN_PREFIX):
        raise unauthorized("invalid API key")
    return token


def tenant_scope(principal: Principal) -> str | None:
    """The tenant every query of this principal is limited to (None: all tenants)."""
    return principal.tenant


def acting_tenant(principal: Principal, requested: str | None, field: str = "tenant") -> str:
    """The tenant a new resource belongs to.

    A tenant key always acts for its own tenant (naming it is allowed, naming another is
    refused without saying whether it exists); an operator key must name one.
    """
    if principal.tenant is None:
        if requested is None:
            raise invalid(field, "required when using an operator key")
        return requested
    if requested is not None and requested != principal.tenant:
        raise invalid(field, "only an operator key may act for another tenant")
    return principal.tenant


def listing_tenant(principal: Principal, requested: str | None) -> str | None:
    """The tenant filter of a list query: a tenant key sees only its own."""
    if principal.tenant is None:
        return requested
    return acting_tenant(principal, requested)


def require_operator(principal: Principal) -> None:
    if not principal.operator:
        raise forbidden("this route needs an operator key")
