"""The history's partition plan (hookstream.policy.retention): what is created, what
expires, and that nothing younger than the history is ever offered for dropping."""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hookstream.policy.retention import MIN_HISTORY_DAYS, day_expired, plan

days = st.dates(min_value=date(2000, 1, 1), max_value=date(2100, 1, 1))


@st.composite
def history_and_days(draw: st.DrawFn) -> tuple[int, list[int]]:
    """A history and days before today (negative: ahead), many of them within a few days
    of that history's boundary, where an off-by-one would show."""
    h = draw(st.integers(MIN_HISTORY_DAYS, 400))
    near = st.integers(-3, 3).map(lambda k: h + k)
    return h, draw(st.lists(st.one_of(near, st.integers(-40, 450)), max_size=40))


def test_thirty_days_kept_the_thirty_first_day_back_goes() -> None:
    today = date(2026, 12, 2)
    existing = [today - timedelta(days=n) for n in range(40)]
    p = plan(existing, today, history_days=30, days_ahead=3)
    # 2026-11-01's newest row was committed before 2026-11-02 00:00, 30 days before
    # today's midnight: past 30 days at every instant of today. 2026-11-02's is not
    # (a row of 2026-11-02 23:00 is 29 days and a few hours old this morning).
    assert p.expired[-1] == date(2026, 11, 1)
    assert date(2026, 11, 2) not in p.expired
    assert p.expired == tuple(sorted(p.expired))
    assert (p.create_from, p.create_to) == (date(2026, 12, 1), date(2026, 12, 6))


@given(hd=history_and_days(), today=days, ahead=st.integers(1, 30), instant=st.times())
def test_no_row_younger_than_the_history_is_in_an_expired_day(
        hd: tuple[int, list[int]], today: date, ahead: int, instant: time) -> None:
    history_days, back = hd
    existing = [today - timedelta(days=n) for n in back]
    p = plan(existing, today, history_days, ahead)
    now = datetime.combine(today, instant, UTC)
    for day in p.expired:
        newest_row = datetime.combine(day + timedelta(days=1), time(), UTC) - timedelta(
            microseconds=1)
        assert now - newest_row > timedelta(days=history_days)
        assert day_expired(day, today, history_days)
    # ... and exactly the expired days are offered: none kept longer than needed
    assert set(p.expired) == {d for d in existing if day_expired(d, today, history_days)}


@given(day=days, today=days, history_days=st.integers(MIN_HISTORY_DAYS, 400))
def test_a_day_expires_exactly_when_its_newest_row_is_past_the_history_all_day(
        day: date, today: date, history_days: int) -> None:
    newest_row = datetime.combine(day + timedelta(days=1), time(), UTC) - timedelta(
        microseconds=1)
    first_instant = datetime.combine(today, time(), UTC)
    assert day_expired(day, today, history_days) == (
        first_instant - newest_row > timedelta(days=history_days))


@given(existing=st.lists(days, max_size=60), today=days,
       history_days=st.integers(MIN_HISTORY_DAYS, 400), ahead=st.integers(1, 30))
def test_today_and_the_days_ahead_are_always_created_and_never_expired(
        existing: list[date], today: date, history_days: int, ahead: int) -> None:
    p = plan(existing, today, history_days, ahead)
    assert p.create_from <= today < today + timedelta(days=ahead) < p.create_to
    assert all(d < p.create_from for d in p.expired)


def test_a_history_shorter_than_the_retry_window_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 2"):
        plan([], date(2026, 12, 2), history_days=1, days_ahead=3)
    with pytest.raises(ValueError, match="days_ahead"):
        plan([], date(2026, 12, 2), history_days=30, days_ahead=0)
