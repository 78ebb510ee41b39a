"""Backlog deferral policy: drain rate, what stays in memory, the drain schedule. Pure:
every ``now`` is a number chosen by the test."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hookstream.policy.backlog import (
    CATCH_UP_RATIO,
    MIN_RATE_PER_S,
    MIN_SLOW_RATE_PER_S,
    catch_up,
    compressed,
    drain_rate,
    kept,
    schedule,
    smoothed_latency,
)

NOW = 1_700_000_000.0


@pytest.mark.parametrize(("rate", "cap", "latency", "expected"), [
    (50.0, 4, 0.0, 50.0),  # latency unknown yet: its configured rate
    (50.0, 4, 0.01, 50.0),  # fast answers: the rate is the limit
    (50.0, 4, 3.0, 4 / 3.0),  # seed 000: 4 connections at 3 s drain ~1.3/s
    (50.0, 1, 1000.0, MIN_SLOW_RATE_PER_S),  # however slow, it drains something
    (0.0, 4, 0.0, MIN_RATE_PER_S),  # a rate of 0 still gets a finite schedule
])
def test_drain_rate(rate: float, cap: int, latency: float, expected: float) -> None:
    assert drain_rate(rate, cap, latency) == pytest.approx(expected)


@pytest.mark.parametrize(("cap", "rate", "horizon", "latency", "expected"), [
    (4, 50.0, 5.0, 0.0, 250),  # what it drains in the horizon
    (4, 50.0, 5.0, 0.02, 249),  # ... less one latency: the oldest waits the horizon at most
    (4, 0.1, 5.0, 0.0, 4),  # never less than its cap: it never idles for want of work
    (10, 1.9, 5.0, 0.0, 10),
    (1, 3.3, 5.0, 0.0, 16),  # whole tasks, rounded down
    (2, 2 / 3, 5.0, 3.0, 2),  # seed 000's slow endpoint: its cap, not 3 (~6 s pinned, not 7.5)
    (4, 0.8, 5.0, 5.0, 4),  # as slow as the request timeout allows: its cap
])
def test_kept(cap: int, rate: float, horizon: float, latency: float, expected: int) -> None:
    assert kept(cap, rate, horizon, latency) == expected


def test_the_schedule_starts_after_the_kept_tasks_and_spaces_at_the_drain_rate() -> None:
    plan = schedule(3, kept=10, rate_per_s=2.0, now_s=NOW, cursor_s=0.0)
    assert plan.due_s == [NOW + 5.0, NOW + 5.5, NOW + 6.0]
    assert plan.cursor_s == NOW + 6.5


def test_the_schedule_never_starts_before_slots_already_handed_out() -> None:
    first = schedule(4, kept=10, rate_per_s=2.0, now_s=NOW, cursor_s=0.0)
    # A second round one second later: behind the first round, not interleaved with it.
    second = schedule(2, kept=10, rate_per_s=2.0, now_s=NOW + 1, cursor_s=first.cursor_s)
    assert second.due_s == [first.cursor_s, first.cursor_s + 0.5]


def test_an_empty_deferral_hands_out_no_slot() -> None:
    plan = schedule(0, kept=10, rate_per_s=2.0, now_s=NOW, cursor_s=NOW + 100)
    assert plan.due_s == [] and plan.cursor_s == NOW + 100


def test_smoothed_latency() -> None:
    assert smoothed_latency(0.0, 2.0) == 2.0  # the first sample is taken as it is
    assert smoothed_latency(1.0, 2.0) == pytest.approx(1.2)


# -- properties ----------------------------------------------------------------------------

rates = st.floats(min_value=0.0, max_value=10_000.0, allow_nan=False)
caps = st.integers(min_value=1, max_value=1000)
latencies = st.floats(min_value=0.0, max_value=300.0, allow_nan=False)


@settings(max_examples=300, deadline=None)
@given(rate=rates, cap=caps, latency=latencies)
def test_the_drain_rate_is_positive_and_never_above_what_the_endpoint_allows(
        rate: float, cap: int, latency: float) -> None:
    r = drain_rate(rate, cap, latency)
    assert r > 0
    assert r <= max(rate, MIN_RATE_PER_S)
    if latency > 0:
        assert r <= max(cap / latency, MIN_SLOW_RATE_PER_S)


@settings(max_examples=300, deadline=None)
@given(rate=rates, cap=caps, latency=latencies,
       horizon=st.floats(min_value=0.1, max_value=600.0))
def test_memory_keeps_the_cap_and_at_most_the_horizon_beyond_it(
        rate: float, cap: int, latency: float, horizon: float) -> None:
    r = drain_rate(rate, cap, latency)
    k = kept(cap, r, horizon, latency)
    assert k >= cap
    # Beyond the cap, the last one kept starts within the horizon less its own attempt:
    # what pins the commit point ends within the horizon.
    assert k == cap or k / r + latency <= horizon + 1e-9


@settings(max_examples=300, deadline=None)
@given(rounds=st.lists(st.tuples(st.integers(min_value=0, max_value=300),
                                 st.floats(min_value=0.0, max_value=600.0)),
                       min_size=1, max_size=20),
       rate=st.floats(min_value=0.01, max_value=1000.0), keep=st.integers(1, 500))
def test_successive_deferrals_queue_up_behind_each_other(
        rounds: list[tuple[int, float]], rate: float, keep: int) -> None:
    # Whatever the clock does between rounds (even backwards), every task deferred is due
    # after every task deferred before it, and after the kept ones: each round moves the
    # backlog toward being served instead of pushing older tasks behind newer ones.
    cursor, last_due = 0.0, float("-inf")
    for count, elapsed in rounds:
        now = NOW + elapsed
        plan = schedule(count, kept=keep, rate_per_s=rate, now_s=now, cursor_s=cursor)
        assert len(plan.due_s) == count
        for due in plan.due_s:
            assert due >= last_due
            assert due >= now + keep / rate - 1e-6
            last_due = due
        assert plan.cursor_s >= cursor
        assert plan.cursor_s >= last_due
        if count:
            # Spaced at the drain rate: the endpoint's bucket reaches them in turn.
            assert plan.cursor_s - plan.due_s[0] == pytest.approx(count / rate, abs=1e-5)
        cursor = plan.cursor_s


@settings(max_examples=200, deadline=None)
@given(samples=st.lists(st.floats(min_value=0.001, max_value=60.0), min_size=1, max_size=50))
def test_the_smoothed_latency_stays_within_the_samples(samples: list[float]) -> None:
    latency = 0.0
    for s in samples:
        latency = smoothed_latency(latency, s)
    assert min(samples) - 1e-9 <= latency <= max(samples) + 1e-9


# -- catching up: a parked schedule compressed when the endpoint speeds up ----------------
def test_catch_up_only_when_something_is_planned_ahead_and_the_pace_at_least_doubled() -> None:
    assert catch_up(0.0, 100.0, 200.0, 100.0) is None  # nothing planned by this process
    assert catch_up(1.0, 100.0, 100.0, 100.0) is None  # the schedule is used up
    assert catch_up(1.0, 1.9, 200.0, 100.0) is None  # not enough faster
    assert catch_up(1.0, 2.0, 200.0, 100.0) == 0.5
    assert catch_up(2.0, 1.0, 200.0, 100.0) is None  # slower: rows come back, re-parked


@given(planned=st.floats(0.01, 1000), rate=st.floats(0.01, 1000),
       now=st.floats(0, 1e9), ahead=st.floats(0.001, 1e6))
def test_a_catch_up_brings_the_schedule_forward_to_the_new_pace(
        planned: float, rate: float, now: float, ahead: float) -> None:
    factor = catch_up(planned, rate, now + ahead, now)
    if factor is None:
        assert rate < CATCH_UP_RATIO * planned
        return
    assert 0 < factor <= 1 / CATCH_UP_RATIO
    # Slots spaced at the planned pace end up spaced at the new one, in the same order,
    # none before now.
    slots = [now + ahead * k / 10 for k in range(11)]
    moved = [compressed(s, now, factor) for s in slots]
    assert moved == sorted(moved) and moved[0] == now
    for a, b, x, y in zip(slots, slots[1:], moved, moved[1:], strict=False):
        assert y - x == pytest.approx((b - a) * planned / rate, rel=1e-6, abs=1e-6)


@given(due=st.floats(0, 1e9), now=st.floats(0, 1e9), factor=st.floats(0.001, 1))
def test_a_slot_already_due_is_never_moved(due: float, now: float, factor: float) -> None:
    moved = compressed(due, now, factor)
    assert moved == due if due <= now else now <= moved <= due
