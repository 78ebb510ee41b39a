"""SSRF rules: which endpoint URLs and which resolved addresses may be called.

URL checks run at registration; address checks run again at connect time (see
``hookstream.io.safe_resolver``) because a name can resolve differently later.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network, ip_address
from urllib.parse import SplitResult, urlsplit

MAX_URL_LENGTH = 2048

IPAddress = IPv4Address | IPv6Address


class UnsafeURL(ValueError):
    """An endpoint URL the dispatcher must not call; ``reason`` is safe to show users."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _v4(table: Iterable[tuple[str, str]]) -> tuple[tuple[IPv4Network, str], ...]:
    return tuple((IPv4Network(net), reason) for net, reason in table)


def _v6(table: Iterable[tuple[str, str]]) -> tuple[tuple[IPv6Network, str], ...]:
    return tuple((IPv6Network(net), reason) for net, reason in table)


# Explicit tables instead of ipaddress.is_global: its answers changed across 3.11 patch
# releases (e.g. fec0::/10 and 3fff::/20 count as global in 3.11.7). Order matters only
# for which reason is reported: the most specific range comes first.
_IPV4_FORBIDDEN = _v4(
    [
        ("169.254.169.254/32", "cloud metadata service"),
        ("169.254.170.2/32", "cloud metadata service"),  # AWS ECS task credentials
        ("100.100.100.200/32", "cloud metadata service"),  # Alibaba Cloud
        ("168.63.129.16/32", "cloud metadata service"),  # Azure WireServer, publicly numbered
        ("255.255.255.255/32", "broadcast"),
        ("0.0.0.0/8", "'this network' (0.0.0.0/8)"),
        ("10.0.0.0/8", "private"),
        ("100.64.0.0/10", "carrier-grade NAT (shared address space)"),
        ("127.0.0.0/8", "loopback"),
        ("169.254.0.0/16", "link-local"),
        ("172.16.0.0/12", "private"),
        ("192.0.0.0/24", "IETF protocol assignments (reserved)"),
        ("192.0.2.0/24", "documentation"),
        ("192.88.99.0/24", "6to4 relay anycast (reserved)"),
        ("192.168.0.0/16", "private"),
        ("198.18.0.0/15", "benchmarking"),
        ("198.51.100.0/24", "documentation"),
        ("203.0.113.0/24", "documentation"),
        ("224.0.0.0/4", "multicast"),
        ("240.0.0.0/4", "reserved"),
    ]
)

_IPV6_FORBIDDEN = _v6(
    [
        ("::/128", "unspecified"),
        ("::1/128", "loopback"),
        ("fd00:ec2::254/128", "cloud metadata service"),  # AWS IMDS over IPv6
        ("64:ff9b:1::/48", "local-use NAT64 prefix"),
        ("100::/64", "discard-only (reserved)"),
        ("2001:2::/48", "benchmarking"),
        ("2001:db8::/32", "documentation"),
        ("3fff::/20", "documentation"),
        ("fc00::/7", "private (unique local)"),
        ("fe80::/10", "link-local"),
        ("fec0::/10", "site-local (deprecated)"),
        ("ff00::/8", "multicast"),
    ]
)
# Checked after Teredo (2001::/32) is unwrapped: ORCHID, AMT, AS112 and friends are
# infrastructure, never a customer's webhook receiver.
_IETF_PROTOCOL_ASSIGNMENTS = IPv6Network("2001::/23")
_GLOBAL_UNICAST = IPv6Network("2000::/3")
# Prefixes whose low 32 bits are an IPv4 address the packet really goes to.
_EMBEDDED_V4_PREFIXES = (
    (IPv6Network("::ffff:0:0/96"), "IPv4-mapped"),
    (IPv6Network("64:ff9b::/96"), "NAT64"),
)
# Deprecated by RFC 4291 and never routed; the embedded address only sharpens the reason.
_IPV4_COMPATIBLE = IPv6Network("::/96")


def forbidden_reason(ip: IPAddress) -> str | None:
    """Why ``ip`` must not be called, or None when it is a public unicast address."""
    if isinstance(ip, IPv4Address):
        return _lookup(ip, _IPV4_FORBIDDEN)
    return _ipv6_reason(ip)


def is_allowed_address(ip: IPAddress, *, allow_private: bool) -> bool:
    # allow_private is the development switch: local receivers on loopback or a LAN.
    return allow_private or forbidden_reason(ip) is None


def _lookup(ip: IPAddress, table: Iterable[tuple[IPv4Network | IPv6Network, str]]) -> str | None:
    for network, reason in table:
        if ip in network:
            return reason
    return None


def _ipv6_reason(ip: IPv6Address) -> str | None:
    # A zone id ("fe80::1%eth0") never changes which range the address is in.
    if ip.scope_id is not None:
        ip = IPv6Address(ip.packed)
    reason = _lookup(ip, _IPV6_FORBIDDEN)
    if reason is not None:
        return reason
    for network, label in _EMBEDDED_V4_PREFIXES:
        if ip in network:
            return _embedded(label, IPv4Address(ip.packed[-4:]))
    if ip in _IPV4_COMPATIBLE:
        inner = IPv4Address(ip.packed[-4:])
        return _embedded("IPv4-compatible", inner) or "IPv4-compatible (deprecated)"
    if ip.sixtofour is not None:
        return _embedded("6to4", ip.sixtofour)
    if ip.teredo is not None:
        server, client = ip.teredo
        return _embedded("Teredo server", server) or _embedded("Teredo client", client)
    if ip in _IETF_PROTOCOL_ASSIGNMENTS:
        return "IETF protocol assignments (reserved)"
    if ip not in _GLOBAL_UNICAST:
        return "not global unicast (reserved)"
    return None


def _embedded(label: str, inner: IPv4Address) -> str | None:
    reason = forbidden_reason(inner)
    return None if reason is None else f"{label} address embedding {inner}: {reason}"


# Names that only ever mean "this machine" or "this private network"; refusing them
# early gives a clear message, the connect-time check is what actually enforces it.
_FORBIDDEN_HOSTS = frozenset({"localhost", "metadata.google.internal", "instance-data"})
_FORBIDDEN_SUFFIXES = (".localhost", ".internal", ".local", ".home.arpa", ".localdomain")
_LABEL = re.compile(r"(?!-)[a-z0-9_-]{1,63}(?<!-)")
# Last label all digits or hex ("127.1", "0x7f.1", "2130706433"): getaddrinfo treats these
# as IPv4 addresses, so they would bypass the literal check below.
_NUMERIC_LABEL = re.compile(r"(0x[0-9a-f]*|[0-9]+)")
_CONTROL_OR_SPACE = re.compile(r"[\x00-\x20\x7f]")


def validate_endpoint_url(url: str, *, allow_insecure: bool) -> SplitResult:
    """The parsed URL, or UnsafeURL naming the first rule it breaks."""
    if len(url) > MAX_URL_LENGTH:
        raise UnsafeURL(f"URL is longer than {MAX_URL_LENGTH} characters")
    # urlsplit silently deletes tabs and newlines, so "exa\nmple" would be checked as one
    # host while logs and users see another.
    if _CONTROL_OR_SPACE.search(url):
        raise UnsafeURL("URL contains whitespace or control characters")
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        raise UnsafeURL(f"malformed URL: {exc}") from None
    try:
        port = parts.port
    except ValueError:
        raise UnsafeURL("port must be a number between 1 and 65535") from None
    _check_scheme(parts.scheme, allow_insecure)
    if "@" in parts.netloc:
        raise UnsafeURL("credentials in the URL are not allowed")
    if "#" in url:
        raise UnsafeURL("fragments are not allowed")
    if port == 0:
        raise UnsafeURL("port must be a number between 1 and 65535")
    _check_host(parts.hostname, allow_insecure)
    return parts


def _check_scheme(scheme: str, allow_insecure: bool) -> None:
    allowed = ("https", "http") if allow_insecure else ("https",)
    if scheme.lower() not in allowed:
        shown = scheme or "(none)"
        raise UnsafeURL(f"scheme must be {' or '.join(allowed)}, got {shown}")


def _check_host(hostname: str | None, allow_insecure: bool) -> None:
    if not hostname:
        raise UnsafeURL("URL has no host")
    # IDNA folds look-alikes ("127。0。0。1" becomes 127.0.0.1) after our checks would run.
    if not hostname.isascii():
        raise UnsafeURL("host must be ASCII; use the punycode (xn--) form")
    try:
        ip = ip_address(hostname)
    except ValueError:
        # One trailing dot is the fully qualified spelling of the same name.
        _check_host_name(hostname.removesuffix("."), allow_insecure)
        return
    if not allow_insecure and (reason := forbidden_reason(ip)) is not None:
        raise UnsafeURL(f"address {ip} is not allowed: {reason}")


def _check_host_name(name: str, allow_insecure: bool) -> None:
    labels = name.split(".")
    if len(name) > 253 or not all(_LABEL.fullmatch(label) for label in labels):
        raise UnsafeURL(f"invalid host name {name!r}")
    if _NUMERIC_LABEL.fullmatch(labels[-1]):
        raise UnsafeURL(f"host {name!r} looks like a non-canonical IPv4 address")
    if allow_insecure:
        return
    if name in _FORBIDDEN_HOSTS or name.endswith(_FORBIDDEN_SUFFIXES):
        raise UnsafeURL(f"host {name!r} names a local or internal service")
    # Single-label names only resolve through an internal search domain.
    if len(labels) < 2:
        raise UnsafeURL(f"host {name!r} must be a fully qualified domain name")
