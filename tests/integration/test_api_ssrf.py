"""SSRF at registration: the API checks the URL; it does not (and cannot usefully)
resolve the name, so a public-looking name its owner later points at 127.0.0.1 (DNS
rebinding) is accepted here. What refuses it is the dispatcher's resolver at connect
time, tested through the dispatcher process itself in tests/e2e/test_dispatcher_ssrf.py
(the address rules of that resolver: tests/unit/test_safe_resolver.py)."""

from __future__ import annotations

from tests.helpers import query
from tests.integration.test_api_support import ApiHarness, api_fixture  # noqa: F401

HOST = "hooks.rebind-attack.example"


async def test_a_public_looking_name_is_accepted_whatever_it_will_resolve_to(
        api: ApiHarness) -> None:
    url = f"https://{HOST}:8443/hooks/victim"
    created = await api.endpoint(url=url)
    assert created["url"] == url
    assert query(api.db_url, "SELECT url FROM endpoints") == [(url,)]
