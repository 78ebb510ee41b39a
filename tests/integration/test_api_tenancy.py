"""Tenant isolation: every route, called with another tenant's key, answers as if the
resource did not exist (404, never 403), and changes nothing. The route list comes
from the app itself, so a new route without an entry here fails the test."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from hookstream.api.routes import ROUTES
from tests.helpers import query
from tests.integration.test_api_support import (  # noqa: F401
    ApiHarness,
    api_fixture,
    seed_delivery,
    seed_event,
)

SINCE = (datetime.now(UTC) - timedelta(days=1)).isoformat()

# (method, route) -> (path parameters to fill with acme's ids, body, query)
CALLS: dict[tuple[str, str], tuple[Any, Any]] = {
    ("GET", "/v1/me"): (None, None),
    ("POST", "/v1/endpoints"): ({"url": "https://x.example.com/", "tenant": "acme"}, None),
    ("GET", "/v1/endpoints"): (None, None),
    ("POST", "/v1/endpoints/import"): (
        {"endpoints": [{"url": "https://x.example.com/", "tenant": "acme"}]}, None),
    ("GET", "/v1/endpoints/{endpoint_id}"): (None, None),
    ("PATCH", "/v1/endpoints/{endpoint_id}"): ({"description": "pwned"}, None),
    ("DELETE", "/v1/endpoints/{endpoint_id}"): (None, None),
    ("POST", "/v1/endpoints/{endpoint_id}/pause"): ({}, None),
    ("POST", "/v1/endpoints/{endpoint_id}/disable"): ({}, None),
    ("POST", "/v1/endpoints/{endpoint_id}/enable"): ({}, None),
    ("GET", "/v1/endpoints/{endpoint_id}/health"): (None, None),
    ("GET", "/v1/endpoints/{endpoint_id}/secrets"): (None, None),
    ("POST", "/v1/endpoints/{endpoint_id}/secrets/rotate"): ({"overlap_s": 0}, None),
    ("DELETE", "/v1/endpoints/{endpoint_id}/secrets/{version}"): (None, None),
    ("POST", "/v1/endpoints/{endpoint_id}/replay"): ({"since": SINCE}, None),
    ("POST", "/v1/endpoints/{endpoint_id}/recover"): ({}, None),
    ("GET", "/v1/deliveries"): (None, {"endpoint_id": "{endpoint_id}"}),
    ("GET", "/v1/deliveries/{delivery_id}"): (None, None),
    ("POST", "/v1/deliveries/{delivery_id}/replay"): (None, None),
    ("GET", "/v1/operations/{operation_id}"): (None, None),
    ("GET", "/v1/events"): (None, {"endpoint_id": "{endpoint_id}"}),
    ("GET", "/v1/events/{event_id}"): (None, None),
    ("POST", "/v1/tenants"): ({"id": "newco"}, None),
    ("GET", "/v1/tenants"): (None, None),
    ("POST", "/v1/tenants/{tenant}/api-keys"): ({}, None),
    ("GET", "/v1/tenants/{tenant}/api-keys"): (None, None),
    ("DELETE", "/v1/api-keys/{key_id}"): (None, None),
    ("GET", "/v1/outbox/quarantined"): (None, None),
    ("GET", "/v1/outbox/{event_id}"): (None, None),
    ("POST", "/v1/outbox/{event_id}/requeue"): (None, None),
    ("GET", "/v1/dead-letters"): (None, None),
}

# Routes without an id of acme's: what globex gets instead of acme's data.
NOT_404 = {
    ("GET", "/v1/me"): 200,
    ("POST", "/v1/endpoints"): 400,  # may not act for another tenant
    ("GET", "/v1/endpoints"): 200,  # ... and acme's endpoint is not in the page
    ("POST", "/v1/endpoints/import"): 207,  # ... with the item refused
    ("GET", "/v1/outbox/quarantined"): 200,  # ... without acme's row
}


async def acme_world(api: ApiHarness) -> dict[str, str]:
    ep = await api.endpoint(event_types=["*"])
    await api.ok("POST", f"/v1/endpoints/{ep['id']}/secrets/rotate", status=201)
    event_id = seed_event(api.db_url, "acme")
    delivery_id = seed_delivery(api.db_url, ep["id"], "acme", "dead", event_id=event_id)
    op_id = query(api.db_url, "INSERT INTO operations (tenant, kind, endpoint_id, params, status)"
                              " VALUES ('acme', 'replay', %s, '{}', 'succeeded') RETURNING id",
                  (ep["id"],))[0][0]
    key_id = query(api.db_url, "SELECT id FROM api_keys WHERE tenant = 'acme'")[0][0]
    # the relay set one of acme's outbox rows aside (the same event id as acme's event)
    query(api.db_url, "INSERT INTO outbox (event_id, tenant, type, payload, quarantined_at,"
                      " quarantine_reason) VALUES (%s, 'acme', 'invoice.paid', 'x', now(),"
                      " 'payload is not valid JSON') RETURNING id", (event_id,))
    return {"endpoint_id": ep["id"], "delivery_id": str(delivery_id), "event_id": str(event_id),
            "operation_id": str(op_id), "version": "1", "tenant": "acme", "key_id": str(key_id)}


def acme_state(db_url: str) -> list[Any]:
    return [
        query(db_url, "SELECT id, url, description, status, config_version, event_types"
                      " FROM endpoints WHERE tenant = 'acme'"),
        query(db_url, "SELECT endpoint_id, version, secret_sealed, expires_at FROM endpoint_secrets"
                      " ORDER BY version"),
        query(db_url, "SELECT delivery_id, status, lease_version FROM deliveries"),
        query(db_url, "SELECT id, revoked_at FROM api_keys ORDER BY id"),
        query(db_url, "SELECT count(*) FROM operations"),
        query(db_url, "SELECT id FROM tenants ORDER BY id"),
        query(db_url, "SELECT event_id, quarantined_at, quarantine_reason FROM outbox"),
    ]


def fill(template: str, ids: dict[str, str]) -> str:
    return template.format(**ids)


async def test_every_route_hides_another_tenants_resources(api: ApiHarness) -> None:
    assert set(CALLS) == {(m, p) for m, p, _, _ in ROUTES}, "a route is missing here"
    ids = await acme_world(api)
    before = acme_state(api.db_url)
    operator_only = {(m, p) for m, p, _, operator in ROUTES if operator}
    for (method, route), (body, params) in CALLS.items():
        path = fill(route, ids)
        q = None if params is None else {k: fill(v, ids) for k, v in params.items()}
        code, data, _ = await api.call(method, path, "globex", body=body, params=q)
        expected = 403 if (method, route) in operator_only else NOT_404.get((method, route), 404)
        assert code == expected, (method, route, code, data)
        if code == 404:  # the same answer as for an id that never existed
            assert data["error"]["code"] == "not_found" and set(data["error"]) == {
                "code", "message"}
            assert not any(ids[k] in data["error"]["message"] for k in ids if k != "version")
        else:  # nothing of acme's in whatever globex does get back
            text = str(data)
            assert not any(ids[k] in text for k in (
                "endpoint_id", "delivery_id", "event_id", "operation_id")), (method, route, data)
    assert acme_state(api.db_url) == before
    # The same calls with acme's own key do reach the resources (so the 404s above were
    # about ownership, not about broken requests).
    assert (await api.ok("GET", fill("/v1/endpoints/{endpoint_id}", ids)))["id"] == ids[
        "endpoint_id"]
    page = await api.ok("GET", "/v1/deliveries", params={"endpoint_id": ids["endpoint_id"]})
    assert [d["id"] for d in page["data"]] == [ids["delivery_id"]]
    page = await api.ok("GET", "/v1/events", params={"endpoint_id": ids["endpoint_id"]})
    assert [e["id"] for e in page["data"]] == [ids["event_id"]]
    assert (await api.ok("GET", fill("/v1/operations/{operation_id}", ids)))["id"] == ids[
        "operation_id"]


async def test_globex_lists_never_include_acme(api: ApiHarness) -> None:
    await acme_world(api)
    assert (await api.ok("GET", "/v1/endpoints", "globex"))["data"] == []
    assert (await api.ok("GET", "/v1/deliveries", "globex"))["data"] == []
    assert (await api.ok("GET", "/v1/events", "globex"))["data"] == []
    assert (await api.ok("GET", "/v1/outbox/quarantined", "globex"))["data"] == []
    mine = await api.ok("GET", "/v1/outbox/quarantined")  # acme sees its own
    assert [r["reason"] for r in mine["data"]] == ["payload is not valid JSON"]
    code, data, _ = await api.call("GET", "/v1/endpoints", "globex", params={"tenant": "acme"})
    assert code == 400 and data["error"]["field"] == "tenant"


async def test_every_route_needs_a_valid_key(api: ApiHarness) -> None:
    ids = await acme_world(api)
    revoked = api.keys["globex"]
    (globex_key,), = query(api.db_url, "SELECT id FROM api_keys WHERE tenant = 'globex'")
    await api.ok("DELETE", f"/v1/api-keys/{globex_key}", "operator")
    for method, route, _, _ in ROUTES:
        path = fill(route, ids)
        for key in (None, "hsk_not-a-real-key", revoked, "not-even-our-format"):
            code, data, _ = await api.call(method, path, key)
            assert code == 401, (method, route, key, code)
            assert data["error"]["code"] == "unauthorized"
    async with api.client.get("/v1/me", headers={
            "Authorization": f"Basic {api.keys['acme']}"}) as resp:
        assert resp.status == 401
    code, _, _ = await api.call("GET", "/v1/me", None)
    assert code == 401
    code, doc, _ = await api.call("GET", "/openapi.json", None)
    assert code == 200 and doc["openapi"].startswith("3.1")


async def test_operator_routes_work_for_the_operator_only(api: ApiHarness) -> None:
    created = await api.ok("POST", "/v1/tenants", "operator", body={"id": "initech"},
                           status=201)
    assert created["id"] == "initech"
    code, err, _ = await api.call("POST", "/v1/tenants", "operator", body={"id": "initech"})
    assert code == 409 and err["error"]["field"] == "id"
    key = await api.ok("POST", "/v1/tenants/initech/api-keys", "operator",
                       body={"name": "ci"}, status=201)
    assert key["token"].startswith("hsk_") and key["prefix"] == key["token"][:12]
    stored = query(api.db_url, "SELECT key_sha256 FROM api_keys WHERE id = %s", (key["id"],))
    assert key["token"].encode() not in bytes(stored[0][0])  # only the hash is kept
    me = await api.ok("GET", "/v1/me", key["token"])
    assert (me["tenant"], me["operator"]) == ("initech", False)
    listed = await api.ok("GET", "/v1/tenants/initech/api-keys", "operator")
    assert [k["id"] for k in listed["data"]] == [key["id"]] and "token" not in listed["data"][0]
    await api.ok("DELETE", f"/v1/api-keys/{key['id']}", "operator")
    code, _, _ = await api.call("GET", "/v1/me", key["token"])
    assert code == 401
    tenants = await api.ok("GET", "/v1/tenants", "operator", params={"limit": "2"})
    rest = await api.ok("GET", "/v1/tenants", "operator",
                        params={"cursor": tenants["next_cursor"]})
    assert [t["id"] for t in tenants["data"] + rest["data"]] == ["acme", "globex", "initech"]
