"""EndpointTracker: bounded, stable per-endpoint series (pure; a fake clock)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from hookstream.core.endpoint_series import EndpointTracker, Ranked


def ranked(*names: str, held: bool = False, age: float = 30.0) -> list[Ranked]:
    return [Ranked(n, "acme", held, age) for n in names]


def test_a_recovered_endpoint_keeps_its_series_at_zero_until_keep_s() -> None:
    t = EndpointTracker(slots=2, keep_s=600)
    assert set(t.update(ranked("a", "b"), now=0)) == {"a", "b"}
    assert set(t.update(ranked("c"), now=10)) == {"a", "b", "c"}  # a, b still tracked
    assert set(t.update([], now=605)) == {"c"}  # a and b out of the list for > 600 s
    assert set(t.update([], now=611)) == set()


def test_held_and_unheld_endpoints_have_their_own_slots() -> None:
    # Endpoints held for days would otherwise fill the list and hide the live slow ones.
    t = EndpointTracker(slots=2)
    worst = ranked("d1", "d2", "d3", held=True, age=90_000) + ranked("s1", "s2", "s3")
    assert t.update(worst, now=0) == {"d1": ("acme", True), "d2": ("acme", True),
                                      "s1": ("acme", False), "s2": ("acme", False)}


def test_endpoints_with_nothing_waiting_are_not_taken_in() -> None:
    t = EndpointTracker(slots=3)
    assert set(t.update(ranked("a") + ranked("idle", age=0.0), now=0)) == {"a"}


def test_capacity_evicts_the_ones_out_of_the_list_the_longest() -> None:
    t = EndpointTracker(slots=1, capacity=2, keep_s=10_000)
    t.update(ranked("a"), now=0)
    t.update(ranked("b"), now=1)
    assert set(t.update(ranked("c"), now=2)) == {"b", "c"}


def test_deleted_endpoints_leave_at_once() -> None:
    t = EndpointTracker(slots=2)
    t.update(ranked("a", "b"), now=0)
    assert set(t.update([], now=1, gone=["a"])) == {"b"}


rankings = st.lists(st.lists(st.tuples(st.integers(0, 30), st.booleans(),
                                       st.floats(0, 1000)), max_size=12), max_size=30)


@settings(max_examples=300)
@given(rankings, st.integers(1, 5), st.integers(0, 5), st.floats(0, 50))
def test_bounded_and_the_current_worst_always_tracked(
        samples: list[list[tuple[int, bool, float]]], slots: int, extra: int,
        keep_s: float) -> None:
    t = EndpointTracker(slots=slots, capacity=slots + extra, keep_s=keep_s)
    for now, sample in enumerate(samples):
        # one entry per endpoint, in a fixed pool (a ranking never lists one twice)
        seen: dict[int, tuple[bool, float]] = {}
        for ep, held, age in sample:
            seen.setdefault(ep, (held if ep % 2 else not held, age))
        worst = sorted((Ranked(f"e{ep}", "t", held, age) for ep, (held, age) in seen.items()),
                       key=lambda r: -r.oldest_age_s)
        tracked = t.update(worst, now=float(now))
        for held in (False, True):
            pool = [ep for ep, (_t, h) in tracked.items() if h is held]
            assert len(pool) <= slots + extra
            top = [r.endpoint for r in worst if r.held is held and r.oldest_age_s > 0][:slots]
            assert set(top) <= set(pool)
