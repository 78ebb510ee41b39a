"""The harness-side reconciliation (receivers vs attempt rows) and the time parsing of
``hookstream reconcile``: pure, no database."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hookstream.ops.reconcile import parse_time, receiver_gaps

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def test_every_request_explained_by_an_attempt_row_is_no_gap() -> None:
    received = Counter({"a": 1, "b": 3})
    assert receiver_gaps(received, {"a": 1, "b": 3, "c": 2}, delivered=["a", "b"]) == []


def test_more_attempt_rows_than_requests_is_fine() -> None:
    # a timed-out or refused attempt may never reach the receiver
    assert receiver_gaps(Counter({"a": 1}), {"a": 4}) == []


def test_each_kind_of_receiver_gap_is_named() -> None:
    gaps = receiver_gaps(Counter({"dup": 2, "ghost": 1, "ok": 1}),
                         {"dup": 1, "ok": 1, "lost": 1}, delivered=["ok", "lost"])
    assert {(g.kind, tuple(g.sample)) for g in gaps} == {
        ("receiver_duplicate_unexplained", ("dup",)),
        ("receiver_unknown_webhook_id", ("ghost",)),
        ("delivered_never_received", ("lost",)),
    }


def test_samples_are_capped_but_totals_are_not() -> None:
    received = Counter({f"d{i}": 2 for i in range(50)})
    (gap,) = receiver_gaps(received, {f"d{i}": 1 for i in range(50)}, sample=5)
    assert gap.total == 50 and len(gap.sample) == 5


@given(st.dictionaries(st.text(min_size=1, max_size=4), st.integers(1, 5), max_size=30),
       st.integers(0, 3))
def test_enough_attempt_rows_always_explain_everything(received: dict[str, int],
                                                       extra: int) -> None:
    attempts = {k: n + extra for k, n in received.items()}
    assert receiver_gaps(Counter(received), attempts, delivered=list(received)) == []


@pytest.mark.parametrize(("raw", "expected"), [
    ("now", NOW),
    ("now-2h", NOW - timedelta(hours=2)),
    ("-90m", NOW - timedelta(minutes=90)),
    ("now-1d", NOW - timedelta(days=1)),
    ("now-30s", NOW - timedelta(seconds=30)),
    ("2026-11-30T10:00:00", datetime(2026, 11, 30, 10, tzinfo=UTC)),
    ("2026-11-30T10:00:00+01:00", datetime(2026, 11, 30, 9, tzinfo=UTC)),
])
def test_parse_time(raw: str, expected: datetime) -> None:
    assert parse_time(raw, NOW) == expected


def test_parse_time_refuses_garbage() -> None:
    with pytest.raises(ValueError):
        parse_time("yesterday", NOW)
