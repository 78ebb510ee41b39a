"""One HTTP attempt: signed POST, a whole-call deadline, no redirects, a capped body read.

Turns whatever happened on the wire into an ``AttemptResult`` value; deciding what
that means is ``hookstream.policy.classify``'s job.
"""

from __future__ import annotations

import asyncio
import functools
import ssl
import time
from dataclasses import dataclass
from typing import Any

import aiohttp
from yarl import URL

from hookstream.core.signing import webhook_headers
from hookstream.io.safe_resolver import BlockedAddressError
from hookstream.policy.classify import Decision, ErrorClass, classify
from hookstream.policy.urlsafety import UnsafeURL, validate_endpoint_url


# Not frozen: a frozen dataclass sets each field through object.__setattr__, ~0.7 µs
# more per object, and one of these is built per attempt.
@dataclass(slots=True)
class AttemptResult:
    started_at: float  # epoch seconds: turned into timestamptz by PostgreSQL, in bulk
    finished_at: float
    latency_ms: float
    status_code: int | None
    error_class: ErrorClass | None
    error: str | None
    excerpt: str | None
    decision: Decision


@functools.lru_cache(maxsize=65_536)
def _target(url: str, allow_private: bool) -> URL:
    # Pure and hot (every attempt): checked and parsed once per URL, and aiohttp takes the
    # parsed URL as it is. A refusal raises and is not cached.
    validate_endpoint_url(url, allow_insecure=allow_private)
    return URL(url)


# What a receiver sends is stored as text: PostgreSQL text cannot hold NUL, and a
# receiver's bytes are any bytes. Invalid UTF-8 is replaced on decoding; NULs and the
# other C0 controls except tab/newline are replaced here, so any answer is storable.
_UNSTORABLE = {c: "\ufffd" for c in range(32) if c not in (9, 10, 13)}


def storable(text: str, limit: int | None = None) -> str:
    """Text that PostgreSQL accepts whatever bytes it came from (capped at ``limit``)."""
    if limit is not None:
        text = text[:limit]
    return text.translate(_UNSTORABLE)


def _error_class(exc: BaseException) -> ErrorClass:
    # Order matters: aiohttp's exception classes inherit from one another.
    if isinstance(exc, asyncio.TimeoutError | aiohttp.ServerTimeoutError):
        return ErrorClass.TIMEOUT
    if isinstance(exc, BlockedAddressError | UnsafeURL):
        return ErrorClass.BLOCKED_ADDRESS
    if isinstance(exc, aiohttp.ClientConnectorError):
        cause = exc.os_error
        if isinstance(cause, BlockedAddressError):
            return ErrorClass.BLOCKED_ADDRESS
        if isinstance(exc, aiohttp.ClientConnectorCertificateError | aiohttp.ClientSSLError) or \
                isinstance(cause, ssl.SSLError):
            return ErrorClass.TLS
        if isinstance(exc, aiohttp.ClientConnectorDNSError):
            return ErrorClass.DNS
        return ErrorClass.CONNECT
    if isinstance(exc, aiohttp.ClientSSLError | ssl.SSLError):
        return ErrorClass.TLS
    if isinstance(exc, ConnectionError | OSError):
        return ErrorClass.CONNECT
    return ErrorClass.PROTOCOL


async def send(
    session: aiohttp.ClientSession,
    *,
    url: str,
    delivery_id: str,
    body: bytes,
    secrets: list[str],
    timeout_s: float,
    body_cap_bytes: int,
    user_agent: str,
    allow_private: bool,
) -> AttemptResult:
    started_at = time.time()
    t0 = time.monotonic()
    # A fresh timestamp and signature on every attempt; the body is the stored bytes.
    headers = webhook_headers(secrets, delivery_id, int(started_at), body)
    headers["content-type"] = "application/json"
    headers["user-agent"] = user_agent
    status: int | None = None
    error_class: ErrorClass | None = None
    error: str | None = None
    excerpt: str | None = None
    resp_headers: Any = {}
    try:
        # aiohttp never asks the resolver about IP-literal hosts, so the connect-time
        # guard cannot see them: the URL rules are applied again on every attempt.
        target = _target(url, allow_private)
        # asyncio.timeout bounds the whole call (DNS, connect, TLS, request, headers and the
        # capped body read); aiohttp's own total timeout is the same figure as a backstop.
        async with asyncio.timeout(timeout_s):
            async with session.post(target, data=body, headers=headers,
                                    allow_redirects=False) as resp:
                status = resp.status
                resp_headers = resp.headers
                raw = await resp.content.read(body_cap_bytes) if body_cap_bytes else b""
                excerpt = storable(raw.decode("utf-8", "replace"))
    except Exception as exc:  # every failure is an outcome to record, never a crash
        error_class = _error_class(exc)
        # An exception's text may quote the receiver's bytes (a broken status line).
        error = storable(f"{type(exc).__name__}: {exc}", 500) if str(exc) \
            else type(exc).__name__
    finished_at = time.time()
    decision = classify(status, error_class, resp_headers, finished_at)
    if status is not None and error is None and not 200 <= status < 300:
        error = f"HTTP {status}"
    return AttemptResult(
        started_at=started_at, finished_at=finished_at,
        latency_ms=(time.monotonic() - t0) * 1000.0, status_code=status,
        error_class=decision.error_class, error=error, excerpt=excerpt, decision=decision)
