"""Request parsing rules of the API (pure): each refusal names its field."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st
from multidict import MultiDict

from hookstream.controlplane import validation as v
from hookstream.controlplane.errors import ApiError
from hookstream.endpoints import type_matches

NOW = datetime(2025, 6, 1, 12, tzinfo=UTC)


def field_of(fn, *args, **kwargs) -> str | None:  # type: ignore[no-untyped-def]
    with pytest.raises(ApiError) as info:
        fn(*args, **kwargs)
    assert info.value.status == 400
    return info.value.field


def test_endpoint_create_defaults_and_values() -> None:
    spec = v.endpoint_create({"url": "https://hooks.example.com/x"}, allow_insecure=False)
    assert (spec.event_types, spec.rate_per_s, spec.burst, spec.max_in_flight, spec.coalesce,
            spec.tenant) == (["*"], 50.0, 100, 4, True, None)
    spec = v.endpoint_create({"url": "http://127.0.0.1:9/x", "event_types": ["a.*", "a.*", "b"],
                              "rate_per_s": 2, "tenant": "acme"}, allow_insecure=True)
    assert spec.event_types == ["a.*", "b"] and spec.rate_per_s == 2.0 and spec.tenant == "acme"


@pytest.mark.parametrize(("body", "field"), [
    ({}, "url"),
    ({"url": "http://hooks.example.com/"}, "url"),
    ({"url": "https://hooks.example.com/", "rate_per_s": float("inf")}, "rate_per_s"),
    ({"url": "https://hooks.example.com/", "rate_per_s": -1}, "rate_per_s"),
    ({"url": "https://hooks.example.com/", "burst": 1.5}, "burst"),
    ({"url": "https://hooks.example.com/", "burst": False}, "burst"),
    ({"url": "https://hooks.example.com/", "max_in_flight": 0}, "max_in_flight"),
    ({"url": "https://hooks.example.com/", "event_types": ["a..b"]}, "event_types"),
    ({"url": "https://hooks.example.com/", "event_types": ["*.a"]}, "event_types"),
    ({"url": "https://hooks.example.com/", "event_types": [1]}, "event_types"),
    ({"url": "https://hooks.example.com/", "event_types": ["x"] * 101}, "event_types"),
    ({"url": "https://hooks.example.com/", "description": "x" * 1001}, "description"),
    ({"url": "https://hooks.example.com/", "description": "\ud800"}, "description"),
    ({"url": "https://hooks.example.com/", "tenant": "Acme"}, "tenant"),
    ({"url": "https://hooks.example.com/", "tenant": "acme\n"}, "tenant"),
    ({"url": "https://hooks.example.com/", "colour": "red"}, "colour"),
])
def test_endpoint_create_refusals_name_the_field(body: dict[str, object], field: str) -> None:
    assert field_of(v.endpoint_create, body, allow_insecure=False) == field


def test_import_item_fields_are_prefixed() -> None:
    assert field_of(v.endpoint_create, {"url": 1}, allow_insecure=False,
                    prefix="endpoints[3].") == "endpoints[3].url"


def test_patch_needs_something_and_refuses_status() -> None:
    assert field_of(v.endpoint_patch, {}, allow_insecure=False) == "body"
    assert field_of(v.endpoint_patch, {"status": "active"}, allow_insecure=False) == "status"
    assert v.endpoint_patch({"burst": 3}, allow_insecure=False) == {"burst": 3}


@pytest.mark.parametrize("raw", [
    "2024-01-01", "2024-01-01T00:00:00", "yesterday", 5, None, "0001-01-01T00:00:00+01:00",
    "1969-12-31T23:59:59Z", "9999-12-31T23:59:59-23:59", "x" * 100,
])
def test_timestamps_need_an_offset_and_a_sane_year(raw: object) -> None:
    assert field_of(v.timestamp, raw, "since") == "since"


def test_timestamps_are_normalised_to_utc() -> None:
    assert v.timestamp("2024-05-01T14:00:00+02:00", "t") == datetime(2024, 5, 1, 12, tzinfo=UTC)
    assert v.timestamp("2024-05-01T12:00:00Z", "t") == datetime(2024, 5, 1, 12, tzinfo=UTC)


def test_replay_range_defaults_bounds_and_statuses() -> None:
    oldest = NOW - timedelta(days=30)
    r = v.replay_range({"since": "2025-05-31T00:00:00Z"}, now=NOW, oldest=oldest,
                       default_statuses=v.REPLAYABLE, allowed=v.REPLAYABLE)
    assert (r.since, r.until, r.statuses) == (datetime(2025, 5, 31, tzinfo=UTC), NOW,
                                              v.REPLAYABLE)
    r = v.replay_range({}, now=NOW, oldest=oldest, default_statuses=v.RECOVERABLE,
                       allowed=v.REPLAYABLE, since_required=False,
                       default_since=NOW - timedelta(days=90))
    assert r.since == oldest  # a default older than the history is clamped, not refused
    for body, field in [({}, "since"), ({"since": "2025-01-01T00:00:00Z"}, "since"),
                        ({"since": "2025-05-31T00:00:00Z", "until": "2025-05-30T00:00:00Z"},
                         "until"),
                        ({"since": "2025-05-31T00:00:00Z", "statuses": []}, "statuses"),
                        ({"since": "2025-05-31T00:00:00Z", "statuses": ["in_flight"]},
                         "statuses")]:
        assert field_of(v.replay_range, body, now=NOW, oldest=oldest,
                        default_statuses=v.REPLAYABLE, allowed=v.REPLAYABLE) == field


E1, E2 = uuid.uuid4(), uuid.uuid4()


def replay(body: dict[str, object], *, by_events: bool = True,
           default_since: datetime | None = None) -> v.ReplayRange:
    return v.replay_range(body, now=NOW, oldest=NOW - timedelta(days=30),
                          default_statuses=v.REPLAYABLE, allowed=v.REPLAYABLE,
                          since_required=default_since is None, default_since=default_since,
                          by_events=by_events)


def test_replay_by_event_ids_makes_since_optional_and_combines_with_the_range() -> None:
    r = replay({"event_ids": [str(E1), str(E2).upper(), str(E1)]})
    assert r.event_ids == (E1, E2)  # parsed, duplicates dropped, order kept
    assert (r.since, r.until, r.statuses) == (NOW - timedelta(days=30), NOW, v.REPLAYABLE)
    r = replay({"event_ids": [str(E1)], "since": "2025-05-31T00:00:00Z",
                "until": "2025-05-31T06:00:00Z", "statuses": ["dead"]})
    assert (r.event_ids, r.since, r.until, r.statuses) == (
        (E1,), datetime(2025, 5, 31, tzinfo=UTC), datetime(2025, 5, 31, 6, tzinfo=UTC),
        ("dead",))
    assert replay({"since": "2025-05-31T00:00:00Z"}).event_ids is None
    assert len(replay({"event_ids": [str(uuid.uuid4()) for _ in range(1000)]}).event_ids
               or ()) == 1000


@pytest.mark.parametrize(("body", "field"), [
    ({}, "since"),
    ({"event_ids": []}, "event_ids"),
    ({"event_ids": None}, "event_ids"),
    ({"event_ids": str(E1)}, "event_ids"),
    ({"event_ids": {"0": str(E1)}}, "event_ids"),
    ({"event_ids": [str(uuid.uuid4()) for _ in range(1001)]}, "event_ids"),
    ({"event_ids": [str(E1), str(E2), str(E1), "not-a-uuid"]}, "event_ids[3]"),
    ({"event_ids": [str(E1), 7]}, "event_ids[1]"),
    ({"event_ids": [None]}, "event_ids[0]"),
    ({"event_ids": ["x" * 100]}, "event_ids[0]"),
    ({"event_ids": [str(E1)], "since": "2025-01-01T00:00:00Z"}, "since"),
    ({"event_ids": [str(E1)], "until": "2025-01-01T00:00:00Z"}, "until"),
    ({"event_ids": [str(E1)], "statuses": ["pending"]}, "statuses"),
    ({"event_ids": [str(E1)], "events": [str(E1)]}, "events"),
])
def test_replay_by_event_ids_refusals_name_the_field(body: dict[str, object],
                                                      field: str) -> None:
    assert field_of(replay, body) == field


def test_event_ids_are_only_for_the_bulk_replay() -> None:
    # Recovery (by_events=False) does not take them.
    assert field_of(replay, {"event_ids": [str(E1)]}, by_events=False,
                    default_since=NOW - timedelta(days=1)) == "event_ids"


def test_pause_until_must_be_in_the_future() -> None:
    assert v.pause({}, now=NOW) is None
    assert v.pause({"until": "2025-06-02T00:00:00Z"}, now=NOW) == datetime(2025, 6, 2,
                                                                           tzinfo=UTC)
    assert field_of(v.pause, {"until": "2025-06-01T00:00:00Z"}, now=NOW) == "until"


def test_query_parameters() -> None:
    q = MultiDict([("limit", "5"), ("status", "dead,failed"), ("status", "dead")])
    assert v.limit_param(q) == 5
    assert v.choices_param(q, "status", v.DELIVERY_STATUSES) == ["dead", "failed"]
    assert v.limit_param(MultiDict()) == v.DEFAULT_LIMIT
    for raw in ("0", "1001", "-1", "1.5", "١", "9" * 30):
        assert field_of(v.limit_param, MultiDict([("limit", raw)])) == "limit"
    assert field_of(v.limit_param, MultiDict([("limit", "1"), ("limit", "2")])) == "limit"
    assert field_of(v.only_params, MultiDict([("x", "1")]), ("limit",)) == "x"
    assert field_of(v.only_params, MultiDict([("", "1")]), ("limit",)) == "query"
    assert field_of(v.uuid_param, MultiDict([("endpoint_id", "nope")]), "endpoint_id") == \
        "endpoint_id"


@given(st.datetimes(min_value=datetime(1971, 1, 1), max_value=datetime(8999, 1, 1),
                    timezones=st.just(UTC)), st.uuids())
def test_cursors_round_trip(at: datetime, ident: uuid.UUID) -> None:
    assert v.decode_cursor(v.encode_cursor(at, ident)) == (at, ident)


@given(st.text(max_size=300))
def test_any_other_cursor_is_a_400_naming_cursor(raw: str) -> None:
    try:
        v.decode_cursor(raw)
    except ApiError as exc:
        assert exc.field == "cursor"


@given(st.text(alphabet="abc.*", max_size=8), st.text(alphabet="abc.", max_size=8))
def test_type_matching_follows_the_documented_forms(pattern: str, event_type: str) -> None:
    if pattern == "*":
        assert type_matches(pattern, event_type)
    elif not pattern.endswith(".*"):
        assert type_matches(pattern, event_type) == (pattern == event_type)
    else:
        assert type_matches(pattern, event_type) == event_type.startswith(pattern[:-1])


def test_a_url_only_the_development_setting_allows_names_that_setting() -> None:
    for url in ("http://127.0.0.1:8000/hook", "https://localhost/hook", "https://10.1.2.3/"):
        with pytest.raises(ApiError) as refused:
            v.endpoint_create({"url": url}, allow_insecure=False)
        assert "HOOKSTREAM_ALLOW_PRIVATE_TARGETS=true" in refused.value.message, url
    for url in ("ftp://example.com/", "https://user:pw@example.com/"):  # no setting helps
        with pytest.raises(ApiError) as refused:
            v.endpoint_create({"url": url}, allow_insecure=False)
        assert "HOOKSTREAM_ALLOW_PRIVATE_TARGETS" not in refused.value.message, url
