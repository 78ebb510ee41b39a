"""Request parsing: JSON bodies, query strings, path ids and cursors into typed values.

Pure. Every refusal is an ``ApiError`` 400 naming the field, so a client always learns
which input was wrong. Unknown fields are refused too: a typo ("rate_per_sec") would
otherwise be silently ignored.
"""

from __future__ import annotations

import base64
import binascii
import math
import re
import uuid
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import orjson

from hookstream.controlplane.errors import invalid
from hookstream.endpoints import (
    DEFAULT_BURST,
    DEFAULT_MAX_IN_FLIGHT,
    DEFAULT_RATE_PER_S,
    event_type_pattern_error,
    event_types_error,
)
from hookstream.policy.urlsafety import UnsafeURL, validate_endpoint_url

MAX_RATE_PER_S = 100_000.0
MAX_BURST = 1_000_000
MAX_IN_FLIGHT = 10_000
MAX_DESCRIPTION = 1_000
MAX_REASON = 500
MAX_NAME = 200
DEFAULT_LIMIT = 100
MAX_LIMIT = 1_000
MAX_SECRET_OVERLAP_S = 30 * 86_400.0
MAX_REPLAY_EVENTS = 1_000
# Outside these years a timestamp is a mistake, and beyond 9999 Python cannot read it back.
MIN_YEAR, MAX_YEAR = 1970, 9000
_NIL = uuid.UUID(int=0)
# Same rule as the CHECK on tenants.id (0003_control_plane.sql).
_TENANT = re.compile(r"[a-z0-9][a-z0-9_.-]{0,62}")

DELIVERY_STATUSES = ("pending", "in_flight", "delivered", "failed", "dead", "superseded")
# A delivery already queued (pending) or being attempted cannot be replayed on top.
REPLAYABLE = ("delivered", "failed", "dead", "superseded")
RECOVERABLE = ("failed", "dead")
ENDPOINT_FIELDS = ("url", "description", "event_types", "rate_per_s", "burst",
                   "max_in_flight", "coalesce")


# -- bodies ------------------------------------------------------------------------------
def json_object(raw: bytes, *, required: bool = True) -> dict[str, Any]:
    if not raw.strip():
        if required:
            raise invalid("body", "a JSON object is required")
        return {}
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise invalid("body", f"not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise invalid("body", "must be a JSON object")
    return data


def only(body: Mapping[str, Any], allowed: Collection[str], prefix: str = "") -> None:
    for name in body:
        if name not in allowed:
            if not name:
                raise invalid(prefix + "body" if not prefix else prefix.rstrip("."),
                              "a field has an empty name")
            raise invalid(prefix + str(name), "unknown field")


def text(value: Any, name: str, *, max_len: int, min_len: int = 0) -> str:
    if not isinstance(value, str):
        raise invalid(name, "must be a string")
    if not min_len <= len(value) <= max_len:
        raise invalid(name, f"must be {min_len} to {max_len} characters long")
    # PostgreSQL text cannot hold NUL; lone surrogates cannot be encoded to UTF-8.
    if "\x00" in value:
        raise invalid(name, "must not contain NUL characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise invalid(name, "must be valid Unicode") from None
    return value


def integer(value: Any, name: str, lo: int, hi: int) -> int:
    # bool is an int in Python, but true is not a count.
    if isinstance(value, bool) or not isinstance(value, int):
        raise invalid(name, "must be an integer")
    if not lo <= value <= hi:
        raise invalid(name, f"must be between {lo} and {hi}")
    return value


def number(value: Any, name: str, *, gt: float, le: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise invalid(name, "must be a number")
    value = float(value)
    if not math.isfinite(value) or not gt < value <= le:
        raise invalid(name, f"must be greater than {gt:g} and at most {le:g}")
    return value


def boolean(value: Any, name: str) -> bool:
    if not isinstance(value, bool):
        raise invalid(name, "must be true or false")
    return value


def timestamp(value: Any, name: str) -> datetime:
    """An ISO 8601 timestamp with an explicit offset, as an aware UTC datetime."""
    if not isinstance(value, str) or len(value) > 64:
        raise invalid(name, "must be an ISO 8601 timestamp with a UTC offset")
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise invalid(name, "must be an ISO 8601 timestamp with a UTC offset") from None
    if parsed.tzinfo is None:
        raise invalid(name, "needs a UTC offset (e.g. 2024-05-01T12:00:00Z)")
    try:
        parsed = parsed.astimezone(UTC)
    except OverflowError:
        raise invalid(name, "out of range") from None
    if not MIN_YEAR <= parsed.year <= MAX_YEAR:
        raise invalid(name, f"must be between the years {MIN_YEAR} and {MAX_YEAR}")
    return parsed


def event_types(value: Any, name: str = "event_types") -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise invalid(name, "must be a list of strings")
    if (reason := event_types_error(value)) is not None:
        raise invalid(name, reason)
    return list(dict.fromkeys(value))  # duplicates mean nothing more


def endpoint_url(value: Any, *, allow_insecure: bool, name: str = "url") -> str:
    url = text(value, name, max_len=2048, min_len=1)
    try:
        validate_endpoint_url(url, allow_insecure=allow_insecure)
    except UnsafeURL as exc:
        raise invalid(name, exc.reason + _development_hint(url, allow_insecure)) from None
    return url


def _development_hint(url: str, allow_insecure: bool) -> str:
    """Say so when the development setting would accept the URL (a local receiver)."""
    if allow_insecure:
        return ""
    try:
        validate_endpoint_url(url, allow_insecure=True)
    except UnsafeURL:
        return ""
    return ("; for a development receiver (http://, loopback or private addresses) set "
            "HOOKSTREAM_ALLOW_PRIVATE_TARGETS=true on the API and the dispatcher")


def tenant_id(value: Any, name: str = "tenant") -> str:
    tenant = text(value, name, max_len=63, min_len=1)
    if not _TENANT.fullmatch(tenant):
        raise invalid(name, "lower-case letters, digits, '_', '.' and '-', starting with a"
                            " letter or digit")
    return tenant


@dataclass(frozen=True)
class EndpointSpec:
    url: str
    tenant: str | None = None
    description: str = ""
    event_types: list[str] = field(default_factory=lambda: ["*"])
    rate_per_s: float = DEFAULT_RATE_PER_S
    burst: int = DEFAULT_BURST
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT
    coalesce: bool = True


def _endpoint_values(body: Mapping[str, Any], *, allow_insecure: bool,
                     prefix: str) -> dict[str, Any]:
    parsers: dict[str, Callable[[Any, str], Any]] = {
        "url": lambda v, n: endpoint_url(v, allow_insecure=allow_insecure, name=n),
        "description": lambda v, n: text(v, n, max_len=MAX_DESCRIPTION),
        "event_types": event_types,
        "rate_per_s": lambda v, n: number(v, n, gt=0, le=MAX_RATE_PER_S),
        "burst": lambda v, n: integer(v, n, 1, MAX_BURST),
        "max_in_flight": lambda v, n: integer(v, n, 1, MAX_IN_FLIGHT),
        "coalesce": boolean,
    }
    return {name: parsers[name](value, prefix + name) for name, value in body.items()
            if name in parsers}


def endpoint_create(body: Mapping[str, Any], *, allow_insecure: bool,
                    prefix: str = "") -> EndpointSpec:
    only(body, (*ENDPOINT_FIELDS, "tenant"), prefix)
    if "url" not in body:
        raise invalid(prefix + "url", "required")
    values = _endpoint_values(body, allow_insecure=allow_insecure, prefix=prefix)
    tenant = tenant_id(body["tenant"], prefix + "tenant") if "tenant" in body else None
    return EndpointSpec(tenant=tenant, **values)


def endpoint_patch(body: Mapping[str, Any], *, allow_insecure: bool) -> dict[str, Any]:
    only(body, ENDPOINT_FIELDS)
    if not body:
        raise invalid("body", f"name at least one of: {', '.join(ENDPOINT_FIELDS)}")
    return _endpoint_values(body, allow_insecure=allow_insecure, prefix="")


def endpoint_import(body: Mapping[str, Any], *, max_items: int) -> list[Any]:
    only(body, ("endpoints",))
    items = body.get("endpoints")
    if not isinstance(items, list) or not items:
        raise invalid("endpoints", "must be a non-empty list of endpoint objects")
    if len(items) > max_items:
        raise invalid("endpoints", f"at most {max_items} endpoints per import")
    return items


def pause(body: Mapping[str, Any], *, now: datetime) -> datetime | None:
    """None pauses until an operator enables the endpoint again."""
    only(body, ("until",))
    if body.get("until") is None:
        return None
    until = timestamp(body["until"], "until")
    if until <= now:
        raise invalid("until", "must be in the future")
    return until


def disable(body: Mapping[str, Any]) -> str:
    only(body, ("reason",))
    return text(body.get("reason", "disabled by API"), "reason", max_len=MAX_REASON)


def rotation(body: Mapping[str, Any], *, default_overlap_s: float) -> float:
    only(body, ("overlap_s",))
    if "overlap_s" not in body:
        return default_overlap_s
    value = body["overlap_s"]
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) \
            or not 0 <= value <= MAX_SECRET_OVERLAP_S:
        raise invalid("overlap_s",
                      f"must be a number of seconds from 0 to {MAX_SECRET_OVERLAP_S:g}")
    return float(value)


@dataclass(frozen=True)
class ReplayRange:
    since: datetime
    until: datetime
    statuses: tuple[str, ...]
    # Only the deliveries of these events (a bulk replay's "set of events" form).
    event_ids: tuple[uuid.UUID, ...] | None = None


def event_id_list(value: Any, name: str = "event_ids", *,
                  max_items: int = MAX_REPLAY_EVENTS) -> tuple[uuid.UUID, ...]:
    if not isinstance(value, list) or not value:
        raise invalid(name, "must be a non-empty list of event ids (UUIDs)")
    if len(value) > max_items:
        raise invalid(name, f"at most {max_items} event ids")
    ids: list[uuid.UUID] = []
    for i, raw in enumerate(value):
        if not isinstance(raw, str):
            raise invalid(f"{name}[{i}]", "must be a UUID")
        ids.append(uuid_value(raw, f"{name}[{i}]"))
    return tuple(dict.fromkeys(ids))  # duplicates mean nothing more


def replay_range(body: Mapping[str, Any], *, now: datetime, oldest: datetime,
                 default_statuses: tuple[str, ...], allowed: tuple[str, ...],
                 since_required: bool = True, default_since: datetime | None = None,
                 by_events: bool = False) -> ReplayRange:
    """``by_events``: ``event_ids`` is accepted too, and with it ``since`` is optional
    (default: the start of the history window); the filters combine with AND."""
    only(body, ("since", "until", "statuses", *(("event_ids",) if by_events else ())))
    event_ids = event_id_list(body["event_ids"]) if "event_ids" in body else None
    if event_ids is not None:
        since_required, default_since = False, default_since or oldest
    if "since" in body:
        since = timestamp(body["since"], "since")
    elif since_required or default_since is None:
        raise invalid("since", "required (or give event_ids)" if by_events else "required")
    else:
        since = default_since
    until = timestamp(body["until"], "until") if "until" in body else now
    if since < oldest:
        if "since" in body:
            raise invalid("since", f"history is kept from {oldest.isoformat()} on")
        since = oldest
    if until <= since:
        raise invalid("until", "must be after since")
    statuses = default_statuses
    if "statuses" in body:
        raw = body["statuses"]
        if not isinstance(raw, list) or not raw or not all(isinstance(s, str) for s in raw):
            raise invalid("statuses", "must be a non-empty list of statuses")
        for s in raw:
            if s not in allowed:
                raise invalid("statuses", f"{s!r} is not one of {', '.join(allowed)}")
        statuses = tuple(dict.fromkeys(raw))
    return ReplayRange(since, until, statuses, event_ids)


# -- query strings and paths -------------------------------------------------------------
def only_params(query: Mapping[str, str], allowed: Collection[str]) -> None:
    for name in query:
        if name not in allowed:
            raise invalid(name or "query", "unknown query parameter")


def single(query: Any, name: str) -> str | None:
    values = query.getall(name, [])
    if len(values) > 1:
        raise invalid(name, "given more than once")
    return values[0] if values else None


def integer_text(raw: str, name: str, lo: int, hi: int) -> int:
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 9):
        raise invalid(name, f"must be an integer from {lo} to {hi}")
    return integer(int(raw), name, lo, hi)


def limit_param(query: Any) -> int:
    raw = single(query, "limit")
    return DEFAULT_LIMIT if raw is None else integer_text(raw, "limit", 1, MAX_LIMIT)


def time_param(query: Any, name: str) -> datetime | None:
    raw = single(query, name)
    return None if raw is None else timestamp(raw, name)


def uuid_value(raw: str | None, name: str) -> uuid.UUID:
    if raw is None:
        raise invalid(name, "required")
    try:
        if len(raw) > 64:
            raise ValueError
        return uuid.UUID(raw)
    except ValueError:
        raise invalid(name, "must be a UUID") from None


def uuid_param(query: Any, name: str) -> uuid.UUID | None:
    raw = single(query, name)
    return None if raw is None else uuid_value(raw, name)


def choices_param(query: Any, name: str, allowed: tuple[str, ...]) -> list[str] | None:
    """``?status=a&status=b`` or ``?status=a,b``."""
    values = [v for raw in query.getall(name, []) for v in raw.split(",") if v]
    if not values:
        return None
    for v in values:
        if v not in allowed:
            raise invalid(name, f"must be one of {', '.join(allowed)}")
    return list(dict.fromkeys(values))


def type_patterns_param(query: Any, name: str = "type") -> list[str] | None:
    values = [v for raw in query.getall(name, []) for v in raw.split(",") if v]
    if not values:
        return None
    if len(values) > 100:
        raise invalid(name, "at most 100 types")
    for v in values:
        if (reason := event_type_pattern_error(v)) is not None:
            raise invalid(name, reason)
    return values


def tenant_param(query: Any) -> str | None:
    raw = single(query, "tenant")
    return None if raw is None else tenant_id(raw)


def secret_version(raw: str) -> int:
    return integer_text(raw, "version", 1, 2**31 - 1)


# -- cursors: opaque to clients, a keyset position to us ---------------------------------
def encode_cursor(at: datetime, ident: uuid.UUID | str) -> str:
    raw = orjson.dumps([at.isoformat(), str(ident)])
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def decode_cursor(raw: str | None) -> tuple[datetime, uuid.UUID] | None:
    if raw is None:
        return None
    try:
        if len(raw) > 200:
            raise ValueError
        data = orjson.loads(base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)))
        at, ident = data
        parsed = datetime.fromisoformat(at)
        if parsed.tzinfo is None:
            raise ValueError
        return parsed, uuid.UUID(ident)
    except (ValueError, TypeError, binascii.Error, orjson.JSONDecodeError):
        raise invalid("cursor", "not a cursor this API returned") from None


def cursor_param(query: Any) -> tuple[datetime, uuid.UUID] | None:
    return decode_cursor(single(query, "cursor"))


def nil_uuid() -> uuid.UUID:
    return _NIL
