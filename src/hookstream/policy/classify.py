"""What one delivery attempt's result means, as a value the dispatcher carries out."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC
from email.utils import parsedate_to_datetime
from enum import StrEnum


class Outcome(StrEnum):
    DELIVERED = "delivered"
    RETRY = "retry"
    # Permanent for this endpoint configuration: retrying the same request to the same
    # URL cannot succeed, but a fixed configuration (new URL, new version) may.
    FAILED = "failed"
    DEAD = "dead"
    DISABLE = "disable"


class ErrorClass(StrEnum):
    TIMEOUT = "timeout"
    CONNECT = "connect"
    DNS = "dns"
    TLS = "tls"
    BLOCKED_ADDRESS = "blocked_address"
    PROTOCOL = "protocol"
    HTTP_2XX = "http_2xx"
    HTTP_3XX = "http_3xx"
    HTTP_4XX = "http_4xx"
    HTTP_5XX = "http_5xx"


@dataclass(frozen=True)
class Decision:
    outcome: Outcome
    error_class: ErrorClass | None
    retry_after_s: float | None = None


# Transport failures the dispatcher observed before any status line arrived.
_TRANSPORT_OUTCOMES: Mapping[ErrorClass, Outcome] = {
    ErrorClass.TIMEOUT: Outcome.RETRY,
    ErrorClass.CONNECT: Outcome.RETRY,
    ErrorClass.DNS: Outcome.RETRY,
    ErrorClass.TLS: Outcome.RETRY,
    ErrorClass.PROTOCOL: Outcome.RETRY,
    # The address will not become public by waiting; retrying would only hammer the guard.
    ErrorClass.BLOCKED_ADDRESS: Outcome.FAILED,
}
_RETRY_AFTER_STATUSES = frozenset({429, 503})
_DELTA_SECONDS = re.compile(r"[0-9]+")
# A receiver asking for more than a year is asking for "never"; the backoff cap decides
# the real delay, this only keeps float conversion of absurd values finite.
MAX_RETRY_AFTER_S = 365 * 24 * 3600.0


def classify(
    status: int | None,
    error: ErrorClass | None,
    headers: Mapping[str, str],
    now_s: float,
) -> Decision:
    """Classify an attempt; ``error`` wins over ``status`` when it is a transport failure.

    The ``HTTP_*`` members are recording classes, not transport errors: passed as
    ``error`` they are ignored and the status decides.
    """
    if error is not None and error in _TRANSPORT_OUTCOMES:
        return Decision(_TRANSPORT_OUTCOMES[error], error)
    if status is None:
        # Neither a response nor a known failure: treat as a broken exchange.
        return Decision(Outcome.RETRY, ErrorClass.PROTOCOL)
    if 200 <= status <= 299:
        return Decision(Outcome.DELIVERED, ErrorClass.HTTP_2XX)
    if 300 <= status <= 399:
        # Redirects are never followed: the registered URL is the one that was vetted.
        return Decision(Outcome.FAILED, ErrorClass.HTTP_3XX)
    if 400 <= status <= 499:
        return _classify_4xx(status, headers, now_s)
    if 500 <= status <= 599:
        retry_after = _retry_after(status, headers, now_s)
        return Decision(Outcome.RETRY, ErrorClass.HTTP_5XX, retry_after)
    # 1xx as a final status, or a number outside HTTP's range: a malformed response.
    return Decision(Outcome.RETRY, ErrorClass.PROTOCOL)


def _classify_4xx(status: int, headers: Mapping[str, str], now_s: float) -> Decision:
    if status in (408, 429):
        return Decision(Outcome.RETRY, ErrorClass.HTTP_4XX, _retry_after(status, headers, now_s))
    if status == 410:
        return Decision(Outcome.DISABLE, ErrorClass.HTTP_4XX)
    if status == 413:
        # The stored body never shrinks, so every retry would be refused the same way.
        return Decision(Outcome.DEAD, ErrorClass.HTTP_4XX)
    return Decision(Outcome.FAILED, ErrorClass.HTTP_4XX)


def _retry_after(status: int, headers: Mapping[str, str], now_s: float) -> float | None:
    # Elsewhere Retry-After is ignored so a receiver cannot stretch or shrink backoff at will.
    if status not in _RETRY_AFTER_STATUSES:
        return None
    # A plain dict from a test or adapter is case-sensitive; HTTP header names are not.
    for name, value in headers.items():
        if name.lower() == "retry-after":
            return parse_retry_after(value, now_s)
    return None


def parse_retry_after(value: str | None, now_s: float) -> float | None:
    """Seconds to wait from ``now_s``; None when absent or unparseable. Never raises."""
    if value is None or not isinstance(value, str):
        return None
    text = value.strip()
    if _DELTA_SECONDS.fullmatch(text):
        # Compare lengths first so thousands of digits never reach int().
        if len(text) > 12:
            return MAX_RETRY_AFTER_S
        return min(float(int(text)), MAX_RETRY_AFTER_S)
    return _parse_http_date(text, now_s)


def _parse_http_date(text: str, now_s: float) -> float | None:
    if not text or not math.isfinite(now_s):
        return None
    try:
        when = parsedate_to_datetime(text)
        if when.tzinfo is None:
            # "-0000" yields a naive datetime; HTTP dates are always UTC.
            when = when.replace(tzinfo=UTC)
        delay_s = when.timestamp() - now_s
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    return min(max(delay_s, 0.0), MAX_RETRY_AFTER_S)
