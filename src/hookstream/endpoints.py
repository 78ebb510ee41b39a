"""Endpoint registration: the operations the control plane and the demo share."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import psycopg

from hookstream.policy.urlsafety import validate_endpoint_url
from hookstream.signing import generate_secret


@dataclass(frozen=True)
class NewEndpoint:
    endpoint_id: uuid.UUID
    secret: str  # returned once; only the receiver should keep it


def create_endpoint(
    conn: psycopg.Connection[Any],
    *,
    tenant: str,
    url: str,
    event_types: Sequence[str] = ("*",),
    rate_per_s: float = 50.0,
    burst: int = 100,
    max_in_flight: int = 4,
    description: str = "",
    allow_insecure: bool = False,
) -> NewEndpoint:
    """Register an endpoint and its first signing secret (in the caller's transaction).

    Raises ``UnsafeURL`` with a reason for a URL the SSRF rules refuse.
    """
    validate_endpoint_url(url, allow_insecure=allow_insecure)
    if not event_types:
        raise ValueError("event_types must name at least one type or '*'")
    secret = generate_secret()
    row = conn.execute(
        "INSERT INTO endpoints (tenant, url, description, event_types, rate_per_s, burst,"
        " max_in_flight) VALUES (%s, %s, %s, %s, %s, %s, %s) RETURNING id",
        (tenant, url, description, list(event_types), rate_per_s, burst, max_in_flight),
    ).fetchone()
    assert row is not None
    endpoint_id = row[0]
    conn.execute(
        "INSERT INTO endpoint_secrets (endpoint_id, version, secret) VALUES (%s, 1, %s)",
        (endpoint_id, secret),
    )
    return NewEndpoint(endpoint_id, secret)
