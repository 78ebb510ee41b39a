"""SSRF end to end: a URL that passes the registration check can still be pointed at
internal addresses later (DNS rebinding). The dispatcher's HTTP session resolves through
``SafeResolver``; here a resolver we control plays the attacker's DNS, and a real
receiver listens on loopback so that, were the guard missing, the request would land."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp.abc import AbstractResolver, ResolveResult

from hookstream.receiver import Receiver
from hookstream.safe_resolver import BlockedAddressError, SafeResolver
from hookstream.signing import webhook_headers
from tests.integration.test_api_support import ApiHarness, api_fixture  # noqa: F401

HOST = "hooks.rebind-attack.example"


class AttackerDNS(AbstractResolver):
    """Answers whatever the test says, like a DNS server the endpoint's owner controls."""

    def __init__(self, answers: list[str]) -> None:
        self.answers = answers
        self.asked = 0

    async def resolve(self, host: str, port: int = 0,
                      family: socket.AddressFamily = socket.AF_INET) -> list[ResolveResult]:
        self.asked += 1
        return [ResolveResult(hostname=host, host=a, port=port,
                              family=socket.AF_INET6 if ":" in a else socket.AF_INET,
                              proto=0, flags=0) for a in self.answers]

    async def close(self) -> None:
        pass


async def post_like_the_dispatcher(url: str, dns: AttackerDNS, *, allow_private: bool) -> int:
    # The dispatcher's connector: SafeResolver in front of the real resolution, a DNS
    # cache (filtered answers only), no redirects, a whole-call deadline.
    connector = aiohttp.TCPConnector(ttl_dns_cache=10, resolver=SafeResolver(
        dns, allow_private=allow_private))
    async with aiohttp.ClientSession(connector=connector) as session:
        headers = webhook_headers(["whsec_" + "A" * 43 + "="], "msg_1", 1, b"{}")
        async with session.post(url, data=b"{}", headers=headers, allow_redirects=False,
                                timeout=aiohttp.ClientTimeout(total=5)) as resp:
            return resp.status


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    r = Receiver()
    await r.start()
    yield r
    await r.stop()


@pytest.mark.parametrize("answers", [
    ["127.0.0.1"], ["169.254.169.254"], ["::ffff:127.0.0.1"], ["::1"],
    ["10.1.2.3", "127.0.0.1"],
])
async def test_a_registered_name_rebound_to_internal_addresses_is_refused_at_connect(
        api: ApiHarness, receiver: Receiver, answers: list[str]) -> None:
    url = f"https://{HOST}:{receiver.port}/hooks/victim"
    # Registration sees a public-looking name and accepts it: only connect time can tell.
    created = await api.endpoint(url=url)
    assert created["url"] == url
    dns = AttackerDNS(answers)
    with pytest.raises(aiohttp.ClientConnectorError) as info:
        await post_like_the_dispatcher(f"http://{HOST}:{receiver.port}/hooks/victim", dns,
                                       allow_private=False)
    assert isinstance(info.value.os_error, BlockedAddressError)
    assert dns.asked == 1
    assert receiver.arrivals == []


async def test_the_same_name_reaches_loopback_when_private_targets_are_allowed(
        receiver: Receiver) -> None:
    # The control: the resolver really is what decides; with the development flag the
    # very same request lands on the loopback receiver.
    receiver.add("victim", "whsec_" + "A" * 43 + "=")
    status = await post_like_the_dispatcher(
        f"http://{HOST}:{receiver.port}/hooks/victim", AttackerDNS(["127.0.0.1"]),
        allow_private=True)
    assert status in (200, 401)
    assert len(receiver.arrivals) == 1
