"""Endpoint registration: the operations the control plane and the demo share."""

from __future__ import annotations

import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import psycopg

from hookstream.controlplane import endpoint_store
from hookstream.core.secretbox import Keyring, seal
from hookstream.core.signing import generate_secret
from hookstream.policy.urlsafety import validate_endpoint_url

DEFAULT_RATE_PER_S = 50.0
DEFAULT_BURST = 100
DEFAULT_MAX_IN_FLIGHT = 4
MAX_EVENT_TYPES = 100
MAX_EVENT_TYPE_LENGTH = 200
STATUSES = ("active", "paused", "disabled")

# "invoice.paid", "invoice.*" or "*": the three forms the fanout matches (fanout.sql).
_EVENT_TYPE = re.compile(r"[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*")


def event_type_pattern_error(pattern: str) -> str | None:
    """Why ``pattern`` is not a valid event-type filter entry, or None when it is."""
    if pattern == "*":
        return None
    if len(pattern) > MAX_EVENT_TYPE_LENGTH:
        return f"longer than {MAX_EVENT_TYPE_LENGTH} characters"
    name = pattern.removesuffix(".*")
    if not _EVENT_TYPE.fullmatch(name):
        return (f"{pattern!r} is not an event type ('invoice.paid'), a prefix wildcard"
                " ('invoice.*') or '*'")
    return None


def event_types_error(patterns: Sequence[str]) -> str | None:
    if isinstance(patterns, str) or not patterns:
        return "must be a non-empty list of event types"
    if len(patterns) > MAX_EVENT_TYPES:
        return f"at most {MAX_EVENT_TYPES} entries"
    for pattern in patterns:
        if (reason := event_type_pattern_error(pattern)) is not None:
            return reason
    return None


def type_matches(pattern: str, event_type: str) -> bool:
    """The fanout's subscription rule, in Python (the SQL in fanout.sql is the one used)."""
    if pattern == "*" or pattern == event_type:
        return True
    return pattern.endswith(".*") and event_type.startswith(pattern[:-1])


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
    rate_per_s: float = DEFAULT_RATE_PER_S,
    burst: int = DEFAULT_BURST,
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
    description: str = "",
    allow_insecure: bool = False,
    keyring: Keyring | None = None,
) -> NewEndpoint:
    """Register an endpoint and its first signing secret (in the caller's transaction),
    sealed with ``keyring`` (None: the local stack's development key; the demo, tests and
    benchmarks are this function's callers, the API has its own); the SQL is
    ``hookstream.controlplane.endpoint_store``'s.

    Raises ``UnsafeURL`` with a reason for a URL the SSRF rules refuse.
    """
    validate_endpoint_url(url, allow_insecure=allow_insecure)
    if (reason := event_types_error(event_types)) is not None:
        raise ValueError(f"event_types: {reason}")
    secret = generate_secret()
    endpoint_id = endpoint_store.insert_endpoint(
        conn, tenant=tenant, url=url, description=description, event_types=event_types,
        rate_per_s=rate_per_s, burst=burst, max_in_flight=max_in_flight)
    if keyring is None:
        from hookstream.dev.localstack.devkeys import development_keyring

        keyring = development_keyring()
    key_id, sealed = seal(keyring, secret, endpoint_id.bytes)
    endpoint_store.insert_first_secret(conn, endpoint_id, key_id, sealed)
    return NewEndpoint(endpoint_id, secret)
