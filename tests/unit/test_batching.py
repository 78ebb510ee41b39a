"""The fanout's wait for company (policy.batching): nothing at moderate load; above a
throughput, a wait growing with it; a small share of the downstream lag when the
dispatchers are behind; never above the caps."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hookstream.ops.lag import LagSnapshot, PartitionLag, smallest_lag_s
from hookstream.policy.batching import (
    DEAD_ZONE_S,
    FRACTION,
    Throughput,
    gather_s,
    load_gather_s,
)

lags = st.floats(min_value=0, max_value=1e6, allow_nan=False)
caps = st.floats(min_value=0, max_value=10, allow_nan=False)


@given(lags, caps)
def test_the_wait_is_bounded_by_the_cap_and_by_a_share_of_the_lag(lag: float, cap: float) -> None:
    wait = gather_s(lag, cap)
    assert 0 <= wait <= cap
    assert wait <= FRACTION * lag


@given(st.floats(min_value=0, max_value=DEAD_ZONE_S, exclude_max=True), caps)
def test_below_the_dead_zone_nothing_is_waited_for(lag: float, cap: float) -> None:
    # An idle group shows up to a commit interval of lag: not "behind".
    assert gather_s(lag, cap) == 0.0


@given(lags, lags, caps)
def test_more_lag_never_means_a_shorter_wait(a: float, b: float, cap: float) -> None:
    low, high = sorted((a, b))
    assert gather_s(low, cap) <= gather_s(high, cap)


@given(caps)
def test_unknown_lag_waits_for_nothing(cap: float) -> None:
    assert gather_s(None, cap) == 0.0


@given(lags)
def test_a_cap_of_zero_turns_it_off(lag: float) -> None:
    assert gather_s(lag, 0.0) == 0.0


def test_the_figures_the_settings_document() -> None:
    # 5 % of the least-behind partition's lag, capped at HOOKSTREAM_FANOUT_MAX_GATHER_S
    # (0.5 s by default), nothing below 2 s of lag
    assert gather_s(1.9, 0.5) == 0.0
    assert gather_s(5.0, 0.5) == pytest.approx(0.25)
    assert gather_s(60.0, 0.5) == 0.5


def _lag(group: str, topic: str, partition: int, lag: int,
         at: float | None) -> PartitionLag:
    return PartitionLag(group, topic, partition, 0, lag, lag, at)


def test_the_smallest_lag_is_the_least_behind_partition_of_that_group_and_topic() -> None:
    now = 1000.0
    snap = LagSnapshot((
        _lag("disp", "deliveries", 0, 10, now - 30),   # a slow customer pins this one
        _lag("disp", "deliveries", 1, 5, now - 4),
        _lag("disp", "deliveries", 2, 0, None),        # caught up: 0
        _lag("fanout", "deliveries", 3, 9, now - 99),  # another group: ignored
        _lag("disp", "delay.1s", 0, 9, now - 99),      # another topic: ignored
    ))
    assert smallest_lag_s(snap, "disp", "deliveries", now) == 0.0
    behind = LagSnapshot(snap.partitions[:2])
    assert smallest_lag_s(behind, "disp", "deliveries", now) == 4.0


def test_a_partition_whose_lag_in_time_is_unknown_makes_it_unknown() -> None:
    snap = LagSnapshot((_lag("disp", "d", 0, 3, None), _lag("disp", "d", 1, 3, 990.0)))
    assert smallest_lag_s(snap, "disp", "d", 1000.0) is None
    assert smallest_lag_s(LagSnapshot(()), "disp", "d", 1000.0) is None


rates = st.floats(min_value=0, max_value=1e7, allow_nan=False)
thresholds = st.floats(min_value=0, max_value=1e6, allow_nan=False)


@given(rates, thresholds, caps)
def test_the_load_wait_is_never_above_its_cap(per_s: float, from_per_s: float,
                                              cap: float) -> None:
    assert 0 <= load_gather_s(per_s, from_per_s, cap) <= cap


@given(rates, thresholds, caps)
def test_up_to_the_threshold_nothing_is_waited_for(per_s: float, from_per_s: float,
                                                   cap: float) -> None:
    # #15's 1,000/s with the default 1,500: latency stays the sum of the hops.
    if per_s <= from_per_s:
        assert load_gather_s(per_s, from_per_s, cap) == 0.0


@given(rates, rates, thresholds, caps)
def test_more_load_never_means_a_shorter_wait(a: float, b: float, from_per_s: float,
                                              cap: float) -> None:
    low, high = sorted((a, b))
    assert load_gather_s(low, from_per_s, cap) <= load_gather_s(high, from_per_s, cap)


@given(rates, caps)
def test_a_zero_threshold_or_cap_turns_the_load_wait_off(per_s: float, cap: float) -> None:
    assert load_gather_s(per_s, 0.0, cap) == 0.0
    assert load_gather_s(per_s, 1500.0, 0.0) == 0.0


@given(st.floats(min_value=1, max_value=1e5), caps,
       st.floats(min_value=1.0, max_value=2.0), st.floats(min_value=0, max_value=1e-3))
def test_the_load_wait_has_no_step(from_per_s: float, cap: float, x: float,
                                   dx: float) -> None:
    # A load hovering near the threshold must not flip between "no wait" and the cap:
    # the wait moves no faster than cap / from_per_s per delivery/s.
    a = load_gather_s(x * from_per_s, from_per_s, cap)
    b = load_gather_s((x + dx) * from_per_s, from_per_s, cap)
    assert abs(b - a) <= cap * dx + 1e-12


def test_the_load_figures_the_settings_document() -> None:
    # HOOKSTREAM_FANOUT_GATHER_FROM_PER_S 1,500 and HOOKSTREAM_FANOUT_LOAD_GATHER_S 0.1
    assert load_gather_s(1_000, 1_500, 0.1) == 0.0
    assert load_gather_s(1_500, 1_500, 0.1) == 0.0
    assert load_gather_s(2_400, 1_500, 0.1) == pytest.approx(0.06)
    assert load_gather_s(3_000, 1_500, 0.1) == pytest.approx(0.1)
    assert load_gather_s(9_000, 1_500, 0.1) == pytest.approx(0.1)


def test_throughput_counts_what_was_added_within_the_window() -> None:
    t = Throughput(window_s=1.0)
    assert t.per_s(100.0) == 0.0
    t.add(300, 100.0)
    t.add(200, 100.5)
    assert t.per_s(100.9) == 500.0
    assert t.per_s(101.2) == 200.0  # the first batch left the window
    assert t.per_s(101.5) == 0.0  # so did the second
    t.add(0, 102.0)  # an empty batch counts nothing
    assert t.per_s(102.0) == 0.0


def test_a_process_that_just_started_reads_low_not_high() -> None:
    # One batch 10 ms after the start is not a rate of 100× that batch per second.
    t = Throughput(window_s=1.0)
    t.add(40, 0.01)
    assert t.per_s(0.01) == 40.0


@given(st.lists(st.tuples(st.floats(min_value=0, max_value=0.2),
                          st.integers(min_value=0, max_value=1000)), max_size=60))
def test_throughput_is_the_sum_over_the_window(steps: list[tuple[float, int]]) -> None:
    t = Throughput(window_s=1.0)
    now, added = 0.0, []
    for dt, n in steps:
        now += dt
        t.add(n, now)
        added.append((now, n))
        assert t.per_s(now) == sum(k for at, k in added if at > now - 1.0)


def test_a_window_must_be_positive() -> None:
    with pytest.raises(ValueError, match="window_s"):
        Throughput(window_s=0)
