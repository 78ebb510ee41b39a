"""Endpoints through the API: create (secret once), read, list, update, state changes,
delete, bulk import (207)."""

from __future__ import annotations

import psycopg

from hookstream.core.signing import decode_secret
from hookstream.dev.localstack.devkeys import development_keyring
from tests.helpers import query
from tests.integration.test_api_secrets import signing_secrets
from tests.integration.test_api_support import ApiHarness, api_fixture  # noqa: F401


async def test_create_returns_the_secret_once_and_stores_the_endpoint(api: ApiHarness) -> None:
    created = await api.endpoint(url="https://hooks.example.com/a", event_types=["invoice.*"],
                                 rate_per_s=5, burst=10, max_in_flight=2, coalesce=False)
    assert created["secret"].startswith("whsec_") and len(decode_secret(created["secret"])) == 32
    assert created["tenant"] == "acme" and created["config_version"] == 1
    assert (created["event_types"], created["rate_per_s"], created["burst"],
            created["max_in_flight"], created["coalesce"]) == (["invoice.*"], 5.0, 10, 2, False)
    fetched = await api.ok("GET", f"/v1/endpoints/{created['id']}")
    assert "secret" not in fetched
    assert fetched == {k: v for k, v in created.items() if k != "secret"}
    # stored sealed: the row holds no plaintext, and opens to the secret shown once
    (plain, key_id, sealed), = query(
        api.db_url, "SELECT secret, secret_key_id, secret_sealed FROM endpoint_secrets"
                    " WHERE endpoint_id = %s", (created["id"],))
    assert plain is None and key_id == development_keyring().current_id
    assert created["secret"].encode() not in bytes(sealed)
    assert signing_secrets(api.db_url, created["id"]) == [created["secret"]]


async def test_update_bumps_config_version_only_when_something_changes(api: ApiHarness) -> None:
    ep = await api.endpoint()
    path = f"/v1/endpoints/{ep['id']}"
    changed = await api.ok("PATCH", path, body={"rate_per_s": 7.5, "event_types": ["a.b"]})
    assert (changed["config_version"], changed["rate_per_s"], changed["event_types"]) == (
        2, 7.5, ["a.b"])
    assert changed["url"] == ep["url"] and changed["burst"] == ep["burst"]
    same = await api.ok("PATCH", path, body={"rate_per_s": 7.5})
    assert same["config_version"] == 2
    code, err, _ = await api.call("PATCH", path, body={"rate_per_sec": 1})
    assert code == 400 and err["error"]["field"] == "rate_per_sec"
    code, err, _ = await api.call("PATCH", path, body={"url": "http://hooks.example.com/"})
    assert code == 400 and err["error"]["field"] == "url" and "https" in err["error"]["message"]


async def test_pause_disable_enable_and_the_circuit_reset(api: ApiHarness) -> None:
    ep = await api.endpoint()
    path = f"/v1/endpoints/{ep['id']}"
    paused = await api.ok("POST", path + "/pause", body={"until": "2999-01-01T00:00:00Z"})
    assert paused["status"] == "paused" and paused["paused_until"].startswith("2999-01-01")
    assert paused["config_version"] == 2
    disabled = await api.ok("POST", path + "/disable", body={"reason": "moving datacenter"})
    assert (disabled["status"], disabled["disabled_reason"]) == ("disabled", "moving datacenter")
    code, err, _ = await api.call("POST", path + "/pause")
    assert code == 409 and "disabled" in err["error"]["message"]
    query(api.db_url, "UPDATE endpoints SET consecutive_failures = 9,"
                      " first_failure_at = now() WHERE id = %s RETURNING id", (ep["id"],))
    enabled = await api.ok("POST", path + "/enable")
    assert (enabled["status"], enabled["consecutive_failures"], enabled["first_failure_at"],
            enabled["paused_until"], enabled["disabled_reason"]) == ("active", 0, None, None, None)
    code, err, _ = await api.call("POST", path + "/pause", body={"until": "2001-01-01T00:00:00Z"})
    assert code == 400 and err["error"]["field"] == "until"


async def test_delete_removes_the_endpoint_and_its_secrets(api: ApiHarness) -> None:
    # (202 and its background operation: tests/integration/test_endpoint_deletion.py)
    ep = await api.endpoint()
    code, op, _ = await api.call("DELETE", f"/v1/endpoints/{ep['id']}")
    assert code == 202 and op["kind"] == "delete"
    code, err, _ = await api.call("GET", f"/v1/endpoints/{ep['id']}")
    assert code == 404 and err["error"]["code"] == "not_found"
    await api.api.operations.wait_idle()
    assert query(api.db_url, "SELECT count(*) FROM endpoint_secrets")[0][0] == 0
    code, again, _ = await api.call("DELETE", f"/v1/endpoints/{ep['id']}")
    assert code == 202 and again["id"] == op["id"] and again["status"] == "succeeded"


async def test_list_pages_with_a_cursor_and_filters_by_status(api: ApiHarness) -> None:
    ids = [(await api.endpoint(description=str(i)))["id"] for i in range(5)]
    await api.endpoint("globex")
    await api.ok("POST", f"/v1/endpoints/{ids[1]}/disable")
    seen: list[str] = []
    cursor = None
    while True:
        params = {"limit": "2", **({"cursor": cursor} if cursor else {})}
        page = await api.ok("GET", "/v1/endpoints", params=params)
        assert len(page["data"]) <= 2
        seen += [e["id"] for e in page["data"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == ids  # oldest first, nothing twice, nothing of globex
    page = await api.ok("GET", "/v1/endpoints", params={"status": "disabled"})
    assert [e["id"] for e in page["data"]] == [ids[1]]
    everyone = await api.ok("GET", "/v1/endpoints", "operator")
    assert len(everyone["data"]) == 6
    only_globex = await api.ok("GET", "/v1/endpoints", "operator", params={"tenant": "globex"})
    assert {e["tenant"] for e in only_globex["data"]} == {"globex"}
    code, err, _ = await api.call("GET", "/v1/endpoints", params={"cursor": "garbage"})
    assert code == 400 and err["error"]["field"] == "cursor"


async def test_operator_must_name_an_existing_tenant(api: ApiHarness) -> None:
    code, err, _ = await api.call("POST", "/v1/endpoints", "operator",
                                  body={"url": "https://hooks.example.com/"})
    assert code == 400 and err["error"]["field"] == "tenant"
    code, err, _ = await api.call("POST", "/v1/endpoints", "operator",
                                  body={"url": "https://hooks.example.com/", "tenant": "nope"})
    assert code == 400 and err["error"]["field"] == "tenant"
    made = await api.endpoint("operator", tenant="globex")
    assert made["tenant"] == "globex"
    code, err, _ = await api.call("POST", "/v1/endpoints", "acme",
                                  body={"url": "https://hooks.example.com/", "tenant": "globex"})
    assert code == 400 and err["error"]["field"] == "tenant"


async def test_registration_refuses_unsafe_urls_naming_the_field(api: ApiHarness) -> None:
    for url, fragment in [
        ("http://hooks.example.com/", "https"),
        ("https://169.254.169.254/latest/meta-data", "metadata"),
        ("https://127.0.0.1/", "loopback"),
        ("https://[::ffff:10.0.0.1]/", "private"),
        ("https://user:pw@hooks.example.com/", "credentials"),
        ("https://localhost/", "local"),
        ("https://0x7f.1/", "IPv4"),
    ]:
        code, err, _ = await api.call("POST", "/v1/endpoints", body={"url": url})
        assert code == 400, url
        assert err["error"]["field"] == "url" and fragment in err["error"]["message"], (url, err)
    assert query(api.db_url, "SELECT count(*) FROM endpoints")[0][0] == 0


async def test_bulk_import_keeps_good_items_and_explains_bad_ones(api: ApiHarness) -> None:
    items = [
        {"url": "https://a.example.com/"},
        {"url": "http://b.example.com/"},
        {"url": "https://c.example.com/", "event_types": ["bad type!"]},
        "not an object",
        {"url": "https://d.example.com/", "burst": 0},
        {"url": "https://e.example.com/", "event_types": ["order.*"]},
    ]
    code, data, _ = await api.call("POST", "/v1/endpoints/import", body={"endpoints": items})
    assert code == 207
    results = data["results"]
    assert [r["status"] for r in results] == [201, 400, 400, 400, 400, 201]
    assert [r["index"] for r in results] == list(range(6))
    assert [r["error"]["field"] for r in results if r["status"] == 400] == [
        "endpoints[1].url", "endpoints[2].event_types", "endpoints[3]", "endpoints[4].burst"]
    assert all(r["secret"].startswith("whsec_") for r in results if r["status"] == 201)
    stored = query(api.db_url, "SELECT url FROM endpoints ORDER BY url")
    assert stored == [("https://a.example.com/",), ("https://e.example.com/",)]
    code, err, _ = await api.call("POST", "/v1/endpoints/import", body={"endpoints": []})
    assert code == 400 and err["error"]["field"] == "endpoints"


async def test_operator_import_checks_each_items_tenant(api: ApiHarness) -> None:
    code, data, _ = await api.call("POST", "/v1/endpoints/import", "operator", body={
        "endpoints": [{"url": "https://a.example.com/", "tenant": "acme"},
                      {"url": "https://b.example.com/", "tenant": "ghost"},
                      {"url": "https://c.example.com/"}]})
    assert code == 207
    assert [r["status"] for r in data["results"]] == [201, 400, 400]
    assert data["results"][1]["error"]["field"] == "endpoints[1].tenant"
    assert query(api.db_url, "SELECT tenant, url FROM endpoints") == [
        ("acme", "https://a.example.com/")]


async def test_a_value_postgresql_refuses_is_a_400_and_nothing_is_stored(api: ApiHarness) -> None:
    # Validation catches every refusal it knows of; one it does not (here a CHECK the
    # database has and the API's validation lacks) must still be the caller's 400, not a
    # 500, with the database's own words kept out of the answer, and the API goes on.
    with psycopg.connect(api.db_url, autocommit=True) as conn:
        conn.execute("ALTER TABLE endpoints ADD CONSTRAINT test_refused_description"
                     " CHECK (description NOT LIKE '%%refused%%')")
    code, err, _ = await api.call("POST", "/v1/endpoints", body={
        "url": "https://hooks.example.com/r", "description": "this is refused"})
    assert code == 400 and err["error"]["code"] == "invalid_request"
    assert "test_refused_description" not in err["error"]["message"]
    assert query(api.db_url, "SELECT count(*) FROM endpoints WHERE url LIKE '%%/r'") == [(0,)]
    assert (await api.endpoint(url="https://hooks.example.com/ok"))["url"].endswith("/ok")
