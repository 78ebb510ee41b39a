"""Hypothesis against the running API: whatever a client sends, the answer is never a
5xx, and every refusal is JSON naming what was wrong (a 400 always names the field).

Inputs mix well-formed requests (real ids, the OpenAPI field names, plausible values)
with garbage (wrong types, huge numbers, odd Unicode, broken JSON, unknown fields),
on every route the app serves.
"""

from __future__ import annotations

import string
from typing import Any
from urllib.parse import quote

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hookstream.api.routes import ROUTES
from tests.integration.test_api_support import (  # noqa: F401
    ApiHarness,
    kapi_fixture,
    seed_delivery,
    seed_event,
)

FIELDS = ["url", "tenant", "description", "event_types", "rate_per_s", "burst",
          "max_in_flight", "coalesce", "until", "reason", "overlap_s", "since", "statuses",
          "endpoints", "id", "name"]
PARAMS = ["tenant", "endpoint_id", "status", "since", "until", "cursor", "limit", "type",
          "window_s"]

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-2**63, max_value=2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=30),
    st.sampled_from(["https://hooks.example.com/x", "http://127.0.0.1:1/", "*", "invoice.*",
                     "2024-01-01T00:00:00Z", "9999-12-31T23:59:59-23:59",
                     "0001-01-01T00:00:00+01:00",
                     "dead", "delivered", "pending", "acme", "globex", "", "\x00", "-1", "1e309",
                     "hsk_x", "00000000-0000-0000-0000-000000000000"]))
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.sampled_from(FIELDS) | st.text(max_size=8),
                                                 inner, max_size=4)), max_leaves=12)
bodies = st.one_of(
    st.none(),
    st.dictionaries(st.sampled_from(FIELDS), values, max_size=5).map(orjson.dumps),
    values.map(orjson.dumps),
    st.binary(max_size=40),
    st.sampled_from([b"{", b'{"url": "\\ud800"}', b"\xff\xfe", b"[]", b"null",
                     b'{"endpoints": [{"url": 1}, null, {"url": "https://a.example.com/"}]}',
                     b'{"since": "2024-13-45T99:00:00Z"}', b'{"burst": 1e400}',
                     b'{"burst": 99999999999999999999999}']))
param_values = st.one_of(st.text(max_size=20), st.sampled_from(
    ["1", "0", "1001", "-1", "abc", "dead,pending", "2024-01-01T00:00:00Z", "invoice.*",
     "00000000-0000-0000-0000-000000000000", "acme", "globex", "\x00", "99999999999999999999"]))
queries = st.dictionaries(st.sampled_from(PARAMS) | st.text(string.ascii_letters, max_size=5),
                          param_values, max_size=3)
path_values = st.one_of(st.text(max_size=12), st.uuids().map(str), st.sampled_from(
    ["1", "0", "-1", "99999999999", "acme", "ACME", "a" * 70, "..", "%00"]))


@settings(max_examples=250, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
async def test_no_request_produces_a_5xx(kapi: ApiHarness, data: st.DataObject) -> None:
    if "ids" not in kapi.keys:  # real resources to aim at, made once per test
        ep = await kapi.endpoint()
        event_id = seed_event(kapi.db_url, "acme")
        delivery = seed_delivery(kapi.db_url, ep["id"], "acme", "dead", event_id=event_id)
        kapi.keys["ids"] = orjson.dumps({"endpoint_id": ep["id"], "delivery_id": str(delivery),
                                         "event_id": str(event_id), "version": "1",
                                         "tenant": "acme"}).decode()
    real: dict[str, str] = orjson.loads(kapi.keys["ids"])
    method, route, _, _ = data.draw(st.sampled_from(ROUTES))
    parts: dict[str, str] = {}
    for name in ("endpoint_id", "delivery_id", "event_id", "operation_id", "version", "tenant",
                 "key_id"):
        if "{" + name + "}" in route:
            choice = data.draw(st.one_of(st.just(real.get(name, "x")), path_values))
            parts[name] = quote(choice, safe="")
    path = route.format(**parts)
    key = data.draw(st.sampled_from(["acme", "acme", "operator", "globex"]))
    body = data.draw(bodies)
    params = data.draw(queries)
    code, reply, _ = await kapi.call(method, path, key, raw=body, params=params or None)
    assert code < 500, (method, path, params, body, code, reply)
    if code >= 400:
        assert isinstance(reply, dict) and reply["error"]["code"] and reply["error"]["message"]
        if code == 400:
            assert reply["error"].get("field"), reply


async def test_bad_inputs_name_their_field(kapi: ApiHarness) -> None:
    ep = await kapi.endpoint()
    cases: list[tuple[str, str, Any, Any, str]] = [
        ("POST", "/v1/endpoints", {}, None, "url"),
        ("POST", "/v1/endpoints", {"url": 5}, None, "url"),
        ("POST", "/v1/endpoints", {"url": "https://a.example.com/", "burst": True}, None, "burst"),
        ("POST", "/v1/endpoints", {"url": "https://a.example.com/", "burst": 2**40}, None,
         "burst"),
        ("POST", "/v1/endpoints", {"url": "https://a.example.com/", "rate_per_s": 0}, None,
         "rate_per_s"),
        ("POST", "/v1/endpoints", {"url": "https://a.example.com/", "event_types": []}, None,
         "event_types"),
        ("POST", "/v1/endpoints", {"url": "https://a.example.com/", "event_types": "*"}, None,
         "event_types"),
        ("POST", "/v1/endpoints", {"url": "https://a.example.com/", "description": "a\x00b"},
         None, "description"),
        ("POST", "/v1/endpoints", {"url": "https://a.example.com/", "coalesce": "yes"}, None,
         "coalesce"),
        ("POST", "/v1/endpoints", {"url": "https://a.example.com/", "extra": 1}, None, "extra"),
        ("GET", "/v1/endpoints", None, {"limit": "0"}, "limit"),
        ("GET", "/v1/endpoints", None, {"status": "sleeping"}, "status"),
        ("GET", "/v1/endpoints", None, {"bogus": "1"}, "bogus"),
        ("GET", "/v1/endpoints/not-a-uuid", None, None, "endpoint_id"),
        ("GET", "/v1/deliveries", None, {"since": "2024-01-01"}, "since"),
        ("GET", "/v1/deliveries", None, {"endpoint_id": "nope"}, "endpoint_id"),
        ("GET", "/v1/events", None, {"type": "bad type"}, "type"),
        ("POST", f"/v1/endpoints/{ep['id']}/pause", {"until": 5}, None, "until"),
    ]
    for method, path, body, params, field in cases:
        code, reply, _ = await kapi.call(method, path, body=body, params=params)
        assert (code, reply["error"]["field"]) == (400, field), (method, path, body, reply)
    for raw in (b"{", b"[1]", b"\xff"):
        code, reply, _ = await kapi.call("POST", "/v1/endpoints", raw=raw)
        assert (code, reply["error"]["field"]) == (400, "body")
    code, reply, _ = await kapi.call("POST", "/v1/endpoints", raw=b"x" * (2 * 1024 * 1024))
    assert code == 413 and reply["error"]["code"] == "request_too_large"
    code, reply, headers = await kapi.call("PUT", "/v1/endpoints")
    assert code == 405 and reply["error"]["code"] == "method_not_allowed" and headers["Allow"]
    code, reply, _ = await kapi.call("GET", "/v2/nothing")
    assert code == 404 and reply["error"]["code"] == "not_found"
