"""The console over HTTP against the real API app and PostgreSQL: tenant isolation on
every page and action, CSRF on every state change, read-only portal links, the headers
and cookie flags, portal links made and refused, sessions ended by revoking their key,
and the operator pages. (What a browser does with the pages: tests/e2e/
test_console_browser.py.)"""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from hookstream.api.console.mount import PAGES
from hookstream.controlplane import tokens
from hookstream.controlplane.portal import load_or_create
from tests.console_support import Visitor
from tests.helpers import query
from tests.integration.test_api_secrets import signing_secrets
from tests.integration.test_api_support import (
    ApiHarness,
    api_fixture,
    seed_delivery,
    seed_event,
)
from tests.integration.test_api_tenancy import acme_state, acme_world

__all__ = ["api_fixture"]

# Every console route with the path it is called with ({names} from acme_world).
PATHS = {
    "/": "/console/", "/login": "/console/login", "/portal": "/console/portal",
    "/logout": "/console/logout", "/endpoints": "/console/endpoints",
    "/endpoints/new": "/console/endpoints/new",
}
# What globex gets where the resource is acme's: routes that name no resource are fine.
NO_RESOURCE = {("GET", "/"), ("GET", "/login"), ("POST", "/login"), ("GET", "/portal"),
               ("POST", "/portal"), ("POST", "/logout"), ("GET", "/endpoints"),
               ("GET", "/endpoints/new"), ("POST", "/endpoints"), ("GET", "/deliveries"),
               ("GET", "/events")}


def console_path(route: str, ids: dict[str, str]) -> str:
    return "/console" + route.format(**ids) if route != "/" else "/console/"


@pytest.fixture
async def visitors(api: ApiHarness) -> AsyncIterator[list[Visitor]]:
    made: list[Visitor] = []
    yield made
    for v in made:
        await v.close()


async def visitor(api: ApiHarness, made: list[Visitor], key: str | None = None) -> Visitor:
    v = Visitor(api.client.server)
    made.append(v)
    if key is not None:
        await v.sign_in(api.keys[key])
    return v


async def portal_link(api: ApiHarness, tenant: str = "acme", **body: Any) -> dict[str, Any]:
    link: dict[str, Any] = await api.ok("POST", "/v1/portal-sessions", "operator",
                                        body={"tenant": tenant, **body}, status=201)
    return link


async def open_portal(v: Visitor, token: str) -> Any:
    await v.get("/console/portal")
    return await v.post("/console/portal", {"token": token}, follow=True)


async def test_every_console_route_hides_another_tenants_resources(
        api: ApiHarness, visitors: list[Visitor]) -> None:
    ids = await acme_world(api)
    before = acme_state(api.db_url)
    globex = await visitor(api, visitors, "globex")
    for method, route, _ in PAGES:
        if (method, route) in NO_RESOURCE:
            continue
        path = console_path(route, ids)
        answer = await (globex.get(path) if method == "GET" else globex.post(path, {}))
        assert answer.status == 404, (method, route, answer.status)
        assert answer.error_title() == "Not found"
        assert not any(ids[k] in answer.text.replace(path, "") for k in (
            "endpoint_id", "delivery_id", "event_id", "operation_id")), (method, route)
    for path in ("/console/endpoints", f"/console/deliveries?endpoint_id={ids['endpoint_id']}",
                 f"/console/events?endpoint_id={ids['endpoint_id']}", "/console/deliveries",
                 "/console/events", "/console/ops", "/console/ops/dead-letters"):
        answer = await globex.get(path)
        assert ids["endpoint_id"] not in answer.text.replace(path, ""), path
        assert ids["delivery_id"] not in answer.text, path
    assert acme_state(api.db_url) == before
    # acme's own session reaches every one of them (the 404s were about ownership)
    acme = await visitor(api, visitors, "acme")
    for method, route, _ in PAGES:
        if method == "GET" and (method, route) not in NO_RESOURCE and \
                not route.startswith("/ops"):
            answer = await acme.get(console_path(route, ids))
            assert answer.status == 200, (route, answer.status, answer.text[:500])


async def test_every_state_change_needs_the_csrf_token(
        api: ApiHarness, visitors: list[Visitor]) -> None:
    ids = await acme_world(api)
    before = acme_state(api.db_url)
    acme = await visitor(api, visitors, "acme")
    other = await visitor(api, visitors, "acme")
    for method, route, _ in PAGES:
        if method != "POST":
            continue
        path = console_path(route, ids)
        for csrf, headers in ((None, None), ("", None), (other.token, None),
                              (acme.token + "x", None),
                              (acme.token, {"Sec-Fetch-Site": "cross-site"})):
            answer = await acme.post(path, {"api_key": api.keys["globex"]}, csrf=csrf,
                                     headers=headers)
            assert answer.status == 403, (route, csrf, headers, answer.status)
            assert "Refused" in answer.text
    assert acme_state(api.db_url) == before
    # still signed in as acme (the refused logout and login changed nothing)
    assert "tenant acme" in (await acme.get("/console/endpoints")).text
    # and the same request with the token goes through
    answer = await acme.post(f"/console/endpoints/{ids['endpoint_id']}/pause", {})
    assert answer.status == 303
    assert query(api.db_url, "SELECT status FROM endpoints WHERE id = %s",
                 (ids["endpoint_id"],)) == [("paused",)]


async def test_a_read_only_portal_link_changes_nothing(
        api: ApiHarness, visitors: list[Visitor]) -> None:
    ids = await acme_world(api)
    before = acme_state(api.db_url)
    link = await portal_link(api, read_only=True)
    v = await visitor(api, visitors)
    page = await open_portal(v, link["token"])
    assert page.status == 200 and "read-only" in page.text and "New endpoint" not in page.text
    page = await v.get(f"/console/deliveries/{ids['delivery_id']}")
    assert page.status == 200 and 'id="replay"' not in page.text
    for method, route, _ in PAGES:
        if method != "POST" or route in ("/login", "/portal", "/logout"):
            continue
        answer = await v.post(console_path(route, ids), {"url": "https://a.example.com/x"})
        assert answer.status == 403 and "read-only" in answer.text, route
    assert acme_state(api.db_url) == before


async def test_headers_and_cookie_flags(api: ApiHarness, visitors: list[Visitor]) -> None:
    v = await visitor(api, visitors)
    page = await v.get("/console/login")
    csp = page.headers["Content-Security-Policy"]
    assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp
    assert "unsafe-inline" not in csp
    assert page.headers["X-Frame-Options"] == "DENY"
    assert page.headers["Cache-Control"] == "no-store"
    cookie = page.headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Lax" in cookie and "Path=/console" in cookie
    assert "Secure" not in cookie  # plain http here; https: see the next test
    signed = await v.sign_in(api.keys["acme"])
    assert signed.url.endswith("/console/endpoints")
    static = await v.get("/console/static/htmx.min.js")
    assert static.status == 200 and "immutable" in static.headers["Cache-Control"]
    assert static.headers["Content-Type"].startswith("text/javascript")
    # a post that carries no session (another site's form) is refused and sets no cookie:
    # it cannot replace anyone's session
    stranger = await visitor(api, visitors)
    refused = await stranger.post("/console/logout", {}, csrf=None)
    assert refused.status == 403 and "Set-Cookie" not in refused.headers
    root = await v.get("/", allow_redirects=False)
    assert root.status == 302 and root.headers["Location"] == "/console/"


async def test_frame_ancestors_and_secure_cookies_follow_the_settings(db_url: str,
                                                                      stack: Any) -> None:
    from tests.integration.test_api_support import api_settings, make_harness

    settings = api_settings(db_url, stack.bootstrap, f"c{uuid.uuid4().hex[:8]}",
                            console_frame_ancestors=("https://app.example.com",),
                            console_public_url="https://hooks.example.com")
    harness, client = await make_harness(db_url, settings)
    v = Visitor(client.server)
    try:
        page = await v.get("/console/login")
        assert "frame-ancestors https://app.example.com" in page.headers[
            "Content-Security-Policy"]
        assert "X-Frame-Options" not in page.headers
        assert "Secure" in page.headers["Set-Cookie"]
        assert "Strict-Transport-Security" in page.headers
        link = await harness.ok("POST", "/v1/portal-sessions", "operator",
                                body={"tenant": "acme"}, status=201)
        assert link["url"].startswith("https://hooks.example.com/console/portal#token=")
    finally:
        await v.close()
        await client.close()


async def test_portal_links(api: ApiHarness, visitors: list[Visitor],
                            caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    code, data, _ = await api.call("POST", "/v1/portal-sessions", "acme",
                                   body={"tenant": "acme"})
    assert code == 403  # operators only
    for body, field in (({"tenant": "nobody"}, "tenant"), ({"tenant": "acme", "ttl_s": 5},
                        "ttl_s"), ({"tenant": "acme", "ttl_s": 10**6}, "ttl_s"),
                        ({}, "tenant"), ({"tenant": "acme", "extra": 1}, "extra")):
        code, data, _ = await api.call("POST", "/v1/portal-sessions", "operator", body=body)
        assert code == 400 and data["error"]["field"] == field, (body, data)
    link = await portal_link(api, ttl_s=120)
    assert link["url"].endswith("/console/portal#token=" + link["token"])
    assert link["tenant"] == "acme" and link["read_only"] is False
    v = await visitor(api, visitors)
    page = await open_portal(v, link["token"])
    assert page.url.endswith("/console/endpoints") and "tenant acme" in page.text
    # revoking the operator key that made the link ends the session on its next request
    key_id = query(api.db_url, "SELECT id FROM api_keys WHERE tenant IS NULL")[0][0]
    await api.ok("DELETE", f"/v1/api-keys/{key_id}", "operator")
    page = await v.get("/console/endpoints")
    assert page.url.endswith("/console/login?done=ended")
    again = await visitor(api, visitors)
    refused = await open_portal(again, link["token"])
    assert refused.status == 401 and "revoked" in refused.text
    # nothing that was logged holds a token
    assert not any(link["token"] in r.getMessage() or link["token"] in str(r.__dict__)
                   for r in caplog.records)


async def test_expired_and_tampered_portal_tokens_are_refused(
        api: ApiHarness, visitors: list[Visitor]) -> None:
    async with api.api.pool.connection() as conn:
        key = await load_or_create(conn)
    key_id = query(api.db_url, "SELECT id FROM api_keys WHERE tenant IS NULL")[0][0]
    expired = tokens.sign_grant(key, tokens.Grant("acme", int(time.time()) - 1, key_id))
    v = await visitor(api, visitors)
    page = await open_portal(v, expired)
    assert page.status == 401 and "expired" in page.text
    good = (await portal_link(api))["token"]
    body, _, signature = good.rpartition(".")
    for tampered in (body + "x." + signature, body + "." + signature[::-1],
                     tokens.sign_grant(b"k" * 32, tokens.Grant("acme", 2**31, key_id))):
        page = await open_portal(v, tampered)
        assert page.status == 401 and "not valid" in page.text
    assert (await v.get("/console/endpoints")).url.endswith("/console/login")


async def test_api_key_sign_in_lasts_while_the_key_does(
        api: ApiHarness, visitors: list[Visitor]) -> None:
    v = await visitor(api, visitors)
    await v.get("/console/login")
    refused = await v.post("/console/login", {"api_key": "hsk_nope"}, follow=True)
    assert refused.status == 401 and "not valid" in refused.text
    await v.sign_in(api.keys["acme"])
    assert "tenant acme" in (await v.get("/console/endpoints")).text
    key_id = query(api.db_url, "SELECT id FROM api_keys WHERE tenant = 'acme'")[0][0]
    await api.ok("DELETE", f"/v1/api-keys/{key_id}", "operator")
    assert (await v.get("/console/endpoints")).url.endswith("/console/login?done=ended")
    ops = await visitor(api, visitors, "operator")
    assert ops.token and "operator" in (await ops.get("/console/ops")).text
    signed_out = await ops.post("/console/logout", follow=True)
    assert "Signed out" in signed_out.text
    assert (await ops.get("/console/ops")).url.endswith("/console/login")


async def test_operator_pages(api: ApiHarness, visitors: list[Visitor]) -> None:
    ep = await api.endpoint()
    dead = seed_delivery(api.db_url, ep["id"], "acme", "dead", attempts=[(500, "failed")])
    pending_event = seed_event(api.db_url, "acme")
    seed_delivery(api.db_url, ep["id"], "acme", "pending", event_id=pending_event)
    query(api.db_url, "INSERT INTO outbox (event_id, tenant, type, payload, quarantined_at,"
                      " quarantine_reason) VALUES (gen_random_uuid(), 'acme', 'bad.one',"
                      " '<script>x</script>', now(), 'not JSON: <b>bold</b>') RETURNING id")
    op_id = query(api.db_url, "INSERT INTO operations (tenant, kind, endpoint_id, params,"
                              " total) VALUES ('acme', 'replay', %s, '{\"since\": \"s\","
                              " \"until\": \"u\", \"statuses\": [\"dead\"]}', 9) RETURNING id",
                  (ep["id"],))[0][0]
    ops = await visitor(api, visitors, "operator")
    page = await ops.get("/console/ops")
    assert page.status == 200
    assert str(dead) in page.text and ep["id"] in page.text and str(op_id) in page.text
    assert "not JSON: &lt;b&gt;bold&lt;/b&gt;" in page.text and "<b>bold" not in page.text
    assert "HOOKSTREAM_CONSOLE_GRAFANA_URL" in page.text
    for path, expected in (("/console/ops/dead-letters", str(dead)),
                           ("/console/ops/quarantine", "bad.one"),
                           ("/console/ops/operations", str(op_id)),
                           ("/console/ops/tenants", "globex"),
                           ("/console/endpoints?tenant=acme", ep["id"]),
                           (f"/console/deliveries/{dead}", str(dead))):
        page = await ops.get(path)
        assert page.status == 200 and expected in page.text, path
    # tenants see none of it
    acme = await visitor(api, visitors, "acme")
    for path in ("/console/ops", "/console/ops/dead-letters", "/console/ops/quarantine",
                 "/console/ops/operations", "/console/ops/tenants"):
        page = await acme.get(path)
        assert page.status == 404, path


async def test_pages_are_keyset_paginated(api: ApiHarness, visitors: list[Visitor]) -> None:
    ep = await api.endpoint()
    made = {str(seed_delivery(api.db_url, ep["id"], "acme", "failed")) for _ in range(30)}
    acme = await visitor(api, visitors, "acme")
    seen: list[str] = []
    path: str | None = f"/console/deliveries?endpoint_id={ep['id']}&status=failed"
    import re
    while path is not None:
        page = await acme.get(path)
        seen += re.findall(r'data-delivery-id="([^"]+)"', page.text)
        found = re.search(r'<a href="([^"]+)" rel="next">', page.text)
        path = None if found is None else found.group(1).replace("&amp;", "&")
    assert len(seen) == len(made) and set(seen) == made


async def test_endpoint_forms_refuse_what_the_api_refuses(
        api: ApiHarness, visitors: list[Visitor]) -> None:
    acme = await visitor(api, visitors, "acme")
    await acme.get("/console/endpoints/new")
    refused = await acme.post("/console/endpoints", {"url": "https://10.0.0.1/in",
                                                     "description": "<i>x</i>"})
    assert refused.status == 400 and "url:" in refused.text
    assert "&lt;i&gt;x&lt;/i&gt;" in refused.text  # what was typed comes back, escaped
    made = await acme.post("/console/endpoints", {"url": "https://hooks.example.com/a",
                                                  "event_types": "invoice.*, order.paid",
                                                  "rate_per_s": "7", "coalesce": "on"})
    assert made.status == 201 and "whsec_" in made.text
    assert made.headers["Cache-Control"] == "no-store"
    (ep_id, types, rate), = query(api.db_url, "SELECT id, event_types, rate_per_s FROM endpoints")
    assert types == ["invoice.*", "order.paid"] and rate == 7
    await acme.get(f"/console/endpoints/{ep_id}/edit")
    saved = await acme.post(f"/console/endpoints/{ep_id}", {
        "url": "https://hooks.example.com/b", "description": "d", "event_types": "*",
        "rate_per_s": "3", "burst": "5", "max_in_flight": "2"})
    assert saved.status == 303
    assert query(api.db_url, "SELECT url, description, rate_per_s, burst, max_in_flight,"
                             " coalesce FROM endpoints") == [
        ("https://hooks.example.com/b", "d", 3.0, 5, 2, False)]


async def test_a_secret_rotated_in_the_console_is_stored_sealed_and_signs(
        api: ApiHarness, visitors: list[Visitor]) -> None:
    ep = await api.endpoint()
    acme = await visitor(api, visitors, "acme")
    answer = await acme.post(f"/console/endpoints/{ep['id']}/secrets/rotate",
                             {"overlap_s": "0"})
    assert answer.status == 201
    shown = re.findall(r"whsec_[A-Za-z0-9+/=]+", answer.text)
    assert len(set(shown)) == 1, shown  # shown once, on this answer
    assert shown[0] not in repr(query(api.db_url, "SELECT * FROM endpoint_secrets"))
    assert signing_secrets(api.db_url, ep["id"]) == [shown[0]]
