"""The fanout's wait for company (policy.batching): nothing at moderate load, a small
share of the downstream lag when the dispatchers are behind, never above the cap."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hookstream.ops.lag import LagSnapshot, PartitionLag, smallest_lag_s
from hookstream.policy.batching import DEAD_ZONE_S, FRACTION, gather_s

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
