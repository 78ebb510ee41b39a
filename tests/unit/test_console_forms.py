"""Form fields into the API's validation inputs."""

from __future__ import annotations

import pytest
from multidict import MultiDict

from hookstream.api.console import forms
from hookstream.controlplane import validation as v
from hookstream.controlplane.errors import ApiError


def test_an_endpoint_form_becomes_the_apis_body() -> None:
    form = MultiDict({"url": " https://hooks.example.com/in ", "description": "Billing",
                      "event_types": "invoice.*, order.paid\norder.refunded",
                      "rate_per_s": "12.5", "burst": "20", "max_in_flight": "",
                      "coalesce": "on", "tenant": "acme"})
    body = forms.endpoint_body(form, with_tenant=True)
    assert body == {"url": "https://hooks.example.com/in", "description": "Billing",
                    "event_types": ["invoice.*", "order.paid", "order.refunded"],
                    "rate_per_s": 12.5, "burst": 20, "coalesce": True, "tenant": "acme"}
    spec = v.endpoint_create(body, allow_insecure=False)
    assert spec.tenant == "acme" and spec.max_in_flight == 4
    assert "tenant" not in forms.endpoint_body(form, with_tenant=False)
    assert forms.endpoint_body(MultiDict({"url": "x"}), with_tenant=False)["coalesce"] is False


@pytest.mark.parametrize("field, value", [("rate_per_s", "fast"), ("burst", "1.5"),
                                          ("max_in_flight", "many")])
def test_a_number_that_is_not_one_names_its_field(field: str, value: str) -> None:
    with pytest.raises(ApiError) as refused:
        forms.endpoint_body(MultiDict({"url": "https://a.example.com", field: value}),
                            with_tenant=False)
    assert refused.value.status == 400 and refused.value.field == field


@pytest.mark.parametrize("raw, expected", [
    ("2026-01-02T03:04", "2026-01-02T03:04+00:00"),
    ("2026-01-02T03:04:05", "2026-01-02T03:04:05+00:00"),
    ("2026-01-02T03:04:05+02:00", "2026-01-02T03:04:05+02:00"),
    ("", None), ("  ", None), (None, None),
])
def test_times_without_an_offset_are_utc(raw: str | None, expected: str | None) -> None:
    assert forms.time_value(raw) == expected


def test_a_replay_form() -> None:
    form = MultiDict({"since": "2026-01-02T03:04", "until": ""})
    assert forms.replay_body(form, ["dead"]) == {"since": "2026-01-02T03:04+00:00",
                                                 "statuses": ["dead"]}


def test_the_values_an_endpoint_form_shows() -> None:
    row = {"url": "https://a.example.com", "description": "d", "event_types": ["a.*", "b"],
           "rate_per_s": 5.0, "burst": 10, "max_in_flight": 2, "coalesce": False}
    values = forms.endpoint_values(row)
    assert values["event_types"] == "a.*, b" and values["rate_per_s"] == "5.0"
    assert values["coalesce"] is False and values["tenant"] == ""
    assert forms.endpoint_values(None)["coalesce"] is True
    assert forms.endpoint_values(MultiDict({"coalesce": "on"}))["coalesce"] is True
