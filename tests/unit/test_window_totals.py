"""Sliding-window totals from incremental slices (hookstream.core.window_totals): the
sum the sampler reports is what one read of the whole window would have counted, at
slice granularity."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from hookstream.core.window_totals import Slice, WindowTotals


def test_slices_add_up_and_age_out_of_the_window() -> None:
    w = WindowTotals()
    assert w.totals(900.0) == (0, 0, 0) and w.upto is None
    w.add(Slice(1_000.0, 10, 1, 5))
    w.add(Slice(1_015.0, 2, 0, 2))
    assert w.totals(900.0) == (12, 1, 7) and w.upto == 1_015.0
    # after a pause longer than the window only the new slice counts
    w.add(Slice(5_000.0, 3, 0, 3))
    assert w.totals(900.0) == (3, 0, 3)


def test_a_slice_that_does_not_move_forward_changes_nothing() -> None:
    w = WindowTotals()
    w.add(Slice(10.0, 1, 0, 1))
    w.add(Slice(10.0, 5, 5, 5))
    w.add(Slice(9.0, 5, 5, 5))
    assert w.totals(100.0) == (1, 0, 1)


@given(st.lists(st.tuples(st.floats(0.1, 50.0), st.integers(0, 100), st.integers(0, 5),
                          st.integers(0, 100)), max_size=80),
       st.floats(10.0, 900.0))
def test_totals_are_the_sum_of_the_slices_ending_in_the_window(
        steps: list[tuple[float, int, int, int]], window_s: float) -> None:
    w, t, added = WindowTotals(), 1_000.0, []
    for dt, automatic, manual, first in steps:
        t += dt
        s = Slice(t, automatic, manual, first)
        w.add(s)
        added.append(s)
        inside = [x for x in added if x.upto > t - window_s]
        assert w.totals(window_s) == (sum(x.automatic for x in inside),
                                      sum(x.manual for x in inside),
                                      sum(x.first for x in inside))
