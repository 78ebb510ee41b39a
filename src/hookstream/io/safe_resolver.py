"""An aiohttp resolver that refuses forbidden addresses at connect time.

Checking a URL at registration is not enough: the name can later resolve to
127.0.0.1 or a metadata address (DNS rebinding). aiohttp connects only to the
addresses its resolver returns, so filtering here is the last word.

aiohttp does not call the resolver for IP-literal hosts; those are covered by
``validate_endpoint_url``, which must therefore run before every request, not only
at registration.
"""

from __future__ import annotations

import socket
from collections.abc import Sequence
from ipaddress import ip_address

from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import ThreadedResolver

from hookstream.policy.urlsafety import forbidden_reason


class BlockedAddressError(OSError):
    """Every address ``host`` resolved to is forbidden.

    An OSError so aiohttp wraps it like any resolution failure
    (``ClientConnectorDNSError``); callers find it as that error's ``os_error`` and
    classify the attempt as ``ErrorClass.BLOCKED_ADDRESS``.
    """

    def __init__(self, host: str, reasons: Sequence[str]) -> None:
        self.host = host
        self.reasons = tuple(reasons)
        message = f"every address of {host} is forbidden: {'; '.join(self.reasons)}"
        # (errno, strerror) so aiohttp's "Cannot connect to host ... [strerror]" shows why.
        super().__init__(None, message)

    def __str__(self) -> str:
        return str(self.strerror)


class SafeResolver(AbstractResolver):
    """Wraps ``inner`` (a ThreadedResolver by default) and owns it: ``close`` closes it."""

    def __init__(
        self, inner: AbstractResolver | None = None, *, allow_private: bool = False
    ) -> None:
        # ThreadedResolver binds the running loop when built, so the default waits for
        # the first resolve instead of requiring construction inside a loop.
        self._inner = inner
        self._allow_private = allow_private

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        if self._inner is None:
            self._inner = ThreadedResolver()
        results = await self._inner.resolve(host, port, family=family)
        if self._allow_private or not results:
            return results
        allowed: list[ResolveResult] = []
        reasons: list[str] = []
        for result in results:
            reason = _reason(result["host"])
            if reason is None:
                allowed.append(result)
            else:
                reasons.append(f"{result['host']} ({reason})")
        if not allowed:
            raise BlockedAddressError(host, reasons)
        return allowed

    async def close(self) -> None:
        if self._inner is not None:
            await self._inner.close()


def _reason(address: str) -> str | None:
    try:
        ip = ip_address(address)
    except ValueError:
        # Only numeric answers can be checked; anything else is refused, not trusted.
        return "not a numeric address"
    return forbidden_reason(ip)
