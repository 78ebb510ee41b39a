from __future__ import annotations

import math
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from email.utils import format_datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hookstream.policy.classify import (
    MAX_RETRY_AFTER_S,
    Decision,
    ErrorClass,
    Outcome,
    classify,
    parse_retry_after,
)

NOW = 1_700_000_000.0


def expected_for(status: int) -> tuple[Outcome, ErrorClass]:
    """The rules of DESIGN.md "Delivery policy", restated independently of the code."""
    if 200 <= status < 300:
        return Outcome.DELIVERED, ErrorClass.HTTP_2XX
    if 300 <= status < 400:
        return Outcome.FAILED, ErrorClass.HTTP_3XX
    if status in (408, 429):
        return Outcome.RETRY, ErrorClass.HTTP_4XX
    if status == 410:
        return Outcome.DISABLE, ErrorClass.HTTP_4XX
    if status == 413:
        return Outcome.DEAD, ErrorClass.HTTP_4XX
    if 400 <= status < 500:
        return Outcome.FAILED, ErrorClass.HTTP_4XX
    if 500 <= status < 600:
        return Outcome.RETRY, ErrorClass.HTTP_5XX
    return Outcome.RETRY, ErrorClass.PROTOCOL


@pytest.mark.parametrize("status", range(100, 600))
def test_every_status(status: int) -> None:
    outcome, error_class = expected_for(status)
    assert classify(status, None, {}, NOW) == Decision(outcome, error_class, None)


@pytest.mark.parametrize(
    ("status", "outcome"),
    [
        (200, Outcome.DELIVERED),
        (204, Outcome.DELIVERED),
        (299, Outcome.DELIVERED),
        (301, Outcome.FAILED),
        (302, Outcome.FAILED),
        (307, Outcome.FAILED),
        (400, Outcome.FAILED),
        (401, Outcome.FAILED),
        (404, Outcome.FAILED),
        (408, Outcome.RETRY),
        (410, Outcome.DISABLE),
        (413, Outcome.DEAD),
        (429, Outcome.RETRY),
        (500, Outcome.RETRY),
        (502, Outcome.RETRY),
        (503, Outcome.RETRY),
        (504, Outcome.RETRY),
        (100, Outcome.RETRY),
        (199, Outcome.RETRY),
    ],
)
def test_named_statuses(status: int, outcome: Outcome) -> None:
    assert classify(status, None, {}, NOW).outcome is outcome


@pytest.mark.parametrize("status", [-1, 0, 99, 600, 999, 10**9])
def test_out_of_range_status_is_a_protocol_retry(status: int) -> None:
    assert classify(status, None, {}, NOW) == Decision(Outcome.RETRY, ErrorClass.PROTOCOL)


@pytest.mark.parametrize(
    ("error", "outcome"),
    [
        (ErrorClass.TIMEOUT, Outcome.RETRY),
        (ErrorClass.CONNECT, Outcome.RETRY),
        (ErrorClass.DNS, Outcome.RETRY),
        (ErrorClass.TLS, Outcome.RETRY),
        (ErrorClass.PROTOCOL, Outcome.RETRY),
        (ErrorClass.BLOCKED_ADDRESS, Outcome.FAILED),
    ],
)
def test_transport_errors(error: ErrorClass, outcome: Outcome) -> None:
    assert classify(None, error, {}, NOW) == Decision(outcome, error, None)


def test_transport_error_wins_over_status() -> None:
    assert classify(200, ErrorClass.TIMEOUT, {}, NOW) == Decision(Outcome.RETRY, ErrorClass.TIMEOUT)


HTTP_CLASSES = [ErrorClass.HTTP_2XX, ErrorClass.HTTP_3XX, ErrorClass.HTTP_4XX, ErrorClass.HTTP_5XX]


@pytest.mark.parametrize("recording", HTTP_CLASSES)
def test_http_classes_passed_as_error_defer_to_status(recording: ErrorClass) -> None:
    assert classify(410, recording, {}, NOW).outcome is Outcome.DISABLE


def test_no_status_no_error_is_a_protocol_retry() -> None:
    assert classify(None, None, {}, NOW) == Decision(Outcome.RETRY, ErrorClass.PROTOCOL)


@pytest.mark.parametrize("status", [429, 503])
@pytest.mark.parametrize("name", ["Retry-After", "retry-after", "RETRY-AFTER"])
def test_retry_after_honoured_on_429_and_503(status: int, name: str) -> None:
    decision = classify(status, None, {name: "120"}, NOW)
    assert decision.outcome is Outcome.RETRY
    assert decision.retry_after_s == 120.0


@pytest.mark.parametrize("status", [408, 500, 502, 504, 200, 301, 400, 410, 413])
def test_retry_after_ignored_elsewhere(status: int) -> None:
    assert classify(status, None, {"Retry-After": "120"}, NOW).retry_after_s is None


def test_retry_after_http_date_on_503() -> None:
    when = format_datetime(datetime.fromtimestamp(NOW + 90, UTC), usegmt=True)
    assert classify(503, None, {"Retry-After": when}, NOW).retry_after_s == 90.0


def test_garbage_retry_after_on_429_still_retries() -> None:
    assert classify(429, None, {"Retry-After": "soon"}, NOW) == Decision(
        Outcome.RETRY, ErrorClass.HTTP_4XX, None
    )


# --- parse_retry_after -----------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, None),
        ("0", 0.0),
        ("1", 1.0),
        ("120", 120.0),
        ("  45  ", 45.0),
        ("007", 7.0),
        ("-5", None),
        ("1.5", None),
        ("+5", None),
        ("", None),
        ("   ", None),
        ("soon", None),
        ("١٢", None),  # Arabic-Indic digits are not delta-seconds
        ("²", None),
        ("9" * 5000, MAX_RETRY_AFTER_S),
        ("99999999999", MAX_RETRY_AFTER_S),
    ],
)
def test_parse_retry_after_table(value: str | None, expected: float | None) -> None:
    assert parse_retry_after(value, NOW) == expected


def test_parse_retry_after_future_date() -> None:
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", 1445412000.0) == 480.0


def test_parse_retry_after_past_date_is_zero() -> None:
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", NOW) == 0.0


@pytest.fixture
def non_utc_local_time(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    # A naive datetime's timestamp() uses local time; a POSIX TZ needs no tz database.
    monkeypatch.setenv("TZ", "EST+5")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.mark.usefixtures("non_utc_local_time")
def test_parse_retry_after_minus_zero_zone_is_utc() -> None:
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 -0000", 1445412000.0) == 480.0


def test_parse_retry_after_offset_zone() -> None:
    assert parse_retry_after("Wed, 21 Oct 2015 09:28:00 +0200", 1445412000.0) == 480.0


@pytest.mark.parametrize(
    "value",
    ["Wed, 21 Oct 99999 07:28:00 GMT", "21 Oct 2015", "Wed, 32 Oct 2015 07:28:00 GMT"],
)
def test_parse_retry_after_bad_dates(value: str) -> None:
    assert parse_retry_after(value, NOW) is None


def test_parse_retry_after_non_finite_now() -> None:
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", math.nan) is None
    assert parse_retry_after("30", math.nan) == 30.0


@settings(max_examples=300, deadline=None)
@given(value=st.text(max_size=60), now=st.floats(allow_nan=True, allow_infinity=True))
def test_parse_retry_after_never_raises(value: str, now: float) -> None:
    result = parse_retry_after(value, now)
    assert result is None or 0.0 <= result <= MAX_RETRY_AFTER_S


@settings(max_examples=300, deadline=None)
@given(
    status=st.one_of(st.none(), st.integers()),
    error=st.one_of(st.none(), st.sampled_from(ErrorClass)),
    headers=st.dictionaries(
        st.sampled_from(["Retry-After", "retry-after", "X-Other"]) | st.text(max_size=10),
        st.text(max_size=40),
        max_size=4,
    ),
    now=st.floats(allow_nan=False),
)
def test_classify_never_raises(
    status: int | None, error: ErrorClass | None, headers: dict[str, str], now: float
) -> None:
    decision = classify(status, error, headers, now)
    assert decision.outcome in Outcome
    if decision.retry_after_s is not None:
        assert status in (429, 503)
        assert 0.0 <= decision.retry_after_s <= MAX_RETRY_AFTER_S
