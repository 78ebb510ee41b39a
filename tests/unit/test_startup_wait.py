"""The set-up commands' wait for their server: bounded, doubling, capped."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hookstream.policy.startup_wait import pauses

bounds = st.floats(min_value=0, max_value=600, allow_nan=False)
firsts = st.floats(min_value=0.1, max_value=10, allow_nan=False)


@given(bounds, firsts, st.floats(min_value=0, max_value=60, allow_nan=False))
def test_pauses_add_up_to_the_bound_exactly_and_stay_under_the_cap(
        bound: float, first: float, extra: float) -> None:
    cap = first + extra
    got = list(pauses(bound, first, cap))
    assert math.isclose(sum(got), bound, abs_tol=1e-6)
    assert all(0 < p <= cap for p in got)


@given(bounds, firsts)
def test_pauses_never_shrink_before_the_last_one(bound: float, first: float) -> None:
    got = list(pauses(bound, first, first * 8))
    assert got[:-1] == sorted(got[:-1])


def test_a_typical_wait_doubles_then_holds_at_the_cap() -> None:
    assert list(pauses(20, 0.5, 5)) == [0.5, 1, 2, 4, 5, 5, 2.5]


def test_no_wait_means_one_try_and_no_pause() -> None:
    assert list(pauses(0)) == []


@pytest.mark.parametrize("args", [(-1, 0.5, 5), (10, 0, 5), (10, 2, 1)])
def test_nonsense_is_refused(args: tuple[float, float, float]) -> None:
    with pytest.raises(ValueError):
        list(pauses(*args))
