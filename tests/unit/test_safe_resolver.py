from __future__ import annotations

import socket
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web
from aiohttp.abc import AbstractResolver, ResolveResult

from hookstream.io.safe_resolver import BlockedAddressError, SafeResolver


def result(host: str, address: str, port: int = 443) -> ResolveResult:
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    return ResolveResult(hostname=host, host=address, port=port, family=family, proto=0, flags=0)


class FakeResolver(AbstractResolver):
    """Answers from a table, like a DNS server the attacker controls."""

    def __init__(self, answers: dict[str, list[str]]) -> None:
        self.answers = answers
        self.calls: list[tuple[str, int, socket.AddressFamily]] = []
        self.closed = False

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        self.calls.append((host, port, family))
        return [result(host, address, port) for address in self.answers[host]]

    async def close(self) -> None:
        self.closed = True


async def test_public_addresses_pass_through_unchanged() -> None:
    inner = FakeResolver({"hooks.example": ["93.184.216.34", "2606:2800:220:1::1"]})
    resolver = SafeResolver(inner)
    got = await resolver.resolve("hooks.example", 443, socket.AF_UNSPEC)
    assert [r["host"] for r in got] == ["93.184.216.34", "2606:2800:220:1::1"]
    assert got[0] == result("hooks.example", "93.184.216.34")
    assert inner.calls == [("hooks.example", 443, socket.AF_UNSPEC)]


async def test_forbidden_addresses_are_dropped() -> None:
    inner = FakeResolver({"mixed.example": ["127.0.0.1", "93.184.216.34", "169.254.169.254"]})
    got = await SafeResolver(inner).resolve("mixed.example", 443)
    assert [r["host"] for r in got] == ["93.184.216.34"]


@pytest.mark.parametrize(
    ("addresses", "fragment"),
    [
        (["127.0.0.1"], "loopback"),
        (["169.254.169.254"], "metadata"),
        (["10.0.0.1", "192.168.0.1"], "private"),
        (["::1"], "loopback"),
        (["::ffff:127.0.0.1"], "IPv4-mapped"),
        (["fe80::1%eth0"], "link-local"),
        (["fd00:ec2::254"], "metadata"),
        (["not-an-ip"], "not a numeric address"),
    ],
)
async def test_nothing_allowed_raises_blocked(addresses: list[str], fragment: str) -> None:
    resolver = SafeResolver(FakeResolver({"rebind.example": addresses}))
    with pytest.raises(BlockedAddressError) as info:
        await resolver.resolve("rebind.example", 443)
    error = info.value
    assert isinstance(error, OSError)
    assert error.host == "rebind.example"
    assert len(error.reasons) == len(addresses)
    assert fragment in " ".join(error.reasons)
    assert "rebind.example" in str(error)


async def test_rebinding_is_caught_on_every_resolve() -> None:
    inner = FakeResolver({"rebind.example": ["93.184.216.34"]})
    resolver = SafeResolver(inner)
    assert await resolver.resolve("rebind.example", 443)
    inner.answers["rebind.example"] = ["127.0.0.1"]
    with pytest.raises(BlockedAddressError):
        await resolver.resolve("rebind.example", 443)


async def test_allow_private_passes_everything() -> None:
    inner = FakeResolver({"dev.example": ["127.0.0.1", "10.0.0.1"]})
    got = await SafeResolver(inner, allow_private=True).resolve("dev.example", 80)
    assert [r["host"] for r in got] == ["127.0.0.1", "10.0.0.1"]


async def test_empty_answer_is_passed_through() -> None:
    assert await SafeResolver(FakeResolver({"none.example": []})).resolve("none.example") == []


async def test_close_closes_the_inner_resolver() -> None:
    inner = FakeResolver({})
    await SafeResolver(inner).close()
    assert inner.closed


async def test_default_inner_is_built_lazily_and_blocks_localhost() -> None:
    resolver = SafeResolver()  # built outside any resolve: must not need a loop yet
    with pytest.raises(BlockedAddressError):
        await resolver.resolve("localhost", 80, socket.AF_UNSPEC)
    await resolver.close()


# --- through a real aiohttp client, against a loopback server --------------


@pytest.fixture
async def loopback_url() -> AsyncIterator[str]:
    app = web.Application()

    async def hook(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    app.router.add_post("/hook", hook)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    # A public-looking name that "resolves" to loopback: what a rebinding attack does.
    yield f"http://receiver.example:{port}/hook"
    await runner.cleanup()


async def post(url: str, *, allow_private: bool) -> int:
    resolver = SafeResolver(
        FakeResolver({"receiver.example": ["127.0.0.1"]}), allow_private=allow_private
    )
    connector = aiohttp.TCPConnector(resolver=resolver, use_dns_cache=False)
    try:
        async with (
            aiohttp.ClientSession(connector=connector) as session,
            session.post(url, data=b"{}") as response,
        ):
            return response.status
    finally:
        await resolver.close()


async def test_real_client_refuses_loopback(loopback_url: str) -> None:
    with pytest.raises(aiohttp.ClientConnectorError) as info:
        await post(loopback_url, allow_private=False)
    assert isinstance(info.value.os_error, BlockedAddressError)
    assert "loopback" in str(info.value)


async def test_real_client_reaches_loopback_when_private_allowed(loopback_url: str) -> None:
    assert await post(loopback_url, allow_private=True) == 200
