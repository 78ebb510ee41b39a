"""Signing-secret use cases: list an endpoint's versions (never their values), rotate
(the new secret is returned once; older ones stay valid for the overlap), revoke an
older version."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from hookstream.controlplane import store
from hookstream.controlplane.context import ControlPlane
from hookstream.controlplane.store import Row


async def list_secrets(cp: ControlPlane, endpoint_id: uuid.UUID,
                       scope: str | None) -> tuple[Row, list[Row]]:
    """The endpoint and its secret versions."""
    async with cp.conn() as conn:
        ep = await store.get_endpoint(conn, endpoint_id, scope)
        return ep, await store.list_secrets(conn, ep["id"])


@dataclass(frozen=True)
class Rotation:
    endpoint: Row
    version: int
    secret: str  # shown once, stored sealed
    overlap_s: float
    secrets: list[Row]  # every version after the rotation


async def rotate_secret(cp: ControlPlane, endpoint_id: uuid.UUID, scope: str | None,
                        overlap_s: float) -> Rotation:
    """A new secret; older ones stay valid ``overlap_s`` (``validation.rotation``)."""
    async with cp.conn() as conn:
        ep = await store.get_endpoint(conn, endpoint_id, scope, lock=True)
        row, secret = await store.rotate_secret(conn, ep["id"], overlap_s,
                                                cp.settings.secret_keys)
        every = await store.list_secrets(conn, ep["id"])
    return Rotation(ep, row["version"], secret, overlap_s, every)


async def revoke_secret(cp: ControlPlane, endpoint_id: uuid.UUID, scope: str | None,
                        version: int) -> Row:
    async with cp.conn() as conn:
        ep = await store.get_endpoint(conn, endpoint_id, scope, lock=True)
        return await store.revoke_secret(conn, ep["id"], version)
