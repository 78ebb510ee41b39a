"""Which outbox rows may be published: pure rules, so they are tested without a server."""

from __future__ import annotations

import re

import orjson

SUPPORTED_SCHEMA_VERSIONS = frozenset({1})
# Event types are dotted names; the fanout's wildcard filters rely on the dots.
_TYPE = re.compile(r"^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$")
MAX_TYPE_LEN = 200


def rejection_reason(
    *, type: str, schema_version: int, payload: bytes, max_payload_bytes: int
) -> str | None:
    """Why a row must be quarantined instead of published, or None when it is fine."""
    if schema_version not in SUPPORTED_SCHEMA_VERSIONS:
        return f"unknown schema_version {schema_version}"
    if not type or len(type) > MAX_TYPE_LEN or not _TYPE.match(type):
        return f"invalid event type {type[:MAX_TYPE_LEN]!r}"
    if len(payload) > max_payload_bytes:
        return f"payload of {len(payload)} bytes exceeds the {max_payload_bytes}-byte limit"
    try:
        orjson.loads(payload)
    except orjson.JSONDecodeError as exc:
        return f"payload is not valid JSON: {exc}"
    return None
