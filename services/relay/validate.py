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


# Broker errors about the record itself (librdkafka error names): sending it again can
# never succeed, so the row is quarantined like any malformed row instead of being
# retried at the head of the outbox forever. Everything else (timeouts, leader changes,
# a broker down) is transient: the row stays unpublished and a later round sends it.
PERMANENT_BROKER_ERRORS = frozenset({
    "MSG_SIZE_TOO_LARGE", "RECORD_LIST_TOO_LARGE", "INVALID_RECORD", "INVALID_MSG_SIZE",
})


def broker_rejection_reason(error_name: str, detail: str) -> str | None:
    """The quarantine reason for a record the broker (or client) refused for good."""
    if error_name in PERMANENT_BROKER_ERRORS:
        return f"rejected by the broker ({error_name}): {detail}"[:500]
    return None


_CATEGORY_OF = (("schema_version", "schema_version"),
                ("event type", "event_type"),
                ("exceeds", "too_large"),
                ("rejected by the broker", "broker_rejected"),
                ("JSON", "json"))
# Every value reason_category returns: the metric publishes each at 0 from the start.
REASON_CATEGORIES = (*(category for _, category in _CATEGORY_OF), "other")


def reason_category(reason: str) -> str:
    """A bounded label value for the quarantine metric; the full reason is on the row."""
    for fragment, category in _CATEGORY_OF:
        if fragment in reason:
            return category
    return "other"
