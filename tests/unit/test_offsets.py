from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hookstream.core.offsets import PartitionOffsets


def tracked(*offsets: int) -> PartitionOffsets:
    book = PartitionOffsets()
    for offset in offsets:
        book.track(offset)
    return book


def test_nothing_tracked() -> None:
    book = PartitionOffsets()
    assert book.committable() is None
    assert book.pending_count() == 0


def test_lowest_unfinished_is_committable() -> None:
    book = tracked(10, 11, 12)
    assert book.committable() == 10
    book.complete(11)
    assert book.committable() == 10
    book.complete(10)
    assert book.committable() == 12
    book.complete(12)
    assert book.committable() == 13


def test_all_finished_commits_past_the_highest() -> None:
    book = tracked(0)
    book.complete(0)
    assert book.committable() == 1
    assert book.pending_count() == 0


def test_gaps_in_offsets() -> None:
    # Compaction and transaction markers leave holes; the commit jumps them.
    book = tracked(5, 9, 20)
    book.complete(5)
    assert book.committable() == 9
    book.complete(20)
    book.complete(9)
    assert book.committable() == 21


def test_tracking_after_everything_finished() -> None:
    book = tracked(1)
    book.complete(1)
    book.track(2)
    assert book.committable() == 2


def test_pending_count() -> None:
    book = tracked(1, 2, 3)
    book.complete(2)
    assert book.pending_count() == 2


@pytest.mark.parametrize("offset", [0, 4, 100])
def test_completing_unknown_offset_raises(offset: int) -> None:
    book = tracked(1, 2, 3)
    with pytest.raises(ValueError, match="not pending"):
        book.complete(offset)


def test_completing_twice_raises() -> None:
    book = tracked(1, 2)
    book.complete(2)
    with pytest.raises(ValueError, match="not pending"):
        book.complete(2)
    book.complete(1)
    with pytest.raises(ValueError, match="not pending"):
        book.complete(1)


@pytest.mark.parametrize("offset", [3, 2])
def test_tracking_must_increase(offset: int) -> None:
    book = tracked(1, 3)
    with pytest.raises(ValueError, match="increasing order"):
        book.track(offset)


def test_negative_offset_rejected() -> None:
    with pytest.raises(ValueError, match=">= 0"):
        PartitionOffsets().track(-1)


def test_completing_in_reverse_holds_the_commit_until_the_head_finishes() -> None:
    # How fast this is (per message, for 200,000 offsets in several orders) is measured
    # by benchmarks/offsets.py; here only what it computes.
    book = PartitionOffsets()
    n = 5_000
    for offset in range(n):
        book.track(offset)
    for offset in range(n - 1, 0, -1):
        book.complete(offset)
        assert book.committable() == 0
    assert book.pending_count() == 1
    book.complete(0)
    assert book.committable() == n and book.pending_count() == 0


@st.composite
def completion_plans(draw: st.DrawFn) -> tuple[list[int], list[int]]:
    gaps = draw(st.lists(st.integers(min_value=1, max_value=5), min_size=1, max_size=60))
    offsets: list[int] = []
    current = draw(st.integers(min_value=0, max_value=1000))
    for gap in gaps:
        offsets.append(current)
        current += gap
    order = draw(st.permutations(offsets))
    return offsets, list(order)


@settings(max_examples=300, deadline=None)
@given(completion_plans())
def test_commit_never_passes_unfinished_and_never_goes_back(
    plan: tuple[list[int], list[int]],
) -> None:
    offsets, order = plan
    book = tracked(*offsets)
    unfinished = set(offsets)
    previous = book.committable()
    assert previous == offsets[0]
    for offset in order:
        book.complete(offset)
        unfinished.discard(offset)
        commit = book.committable()
        assert commit is not None and previous is not None
        assert commit >= previous
        assert all(commit <= pending for pending in unfinished)
        expected = min(unfinished) if unfinished else offsets[-1] + 1
        assert commit == expected
        assert book.pending_count() == len(unfinished)
        previous = commit


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 10**6)), max_size=100))
def test_interleaved_track_and_complete(ops: list[tuple[bool, int]]) -> None:
    book = PartitionOffsets()
    next_offset = 0
    unfinished: list[int] = []
    previous: int | None = None
    for is_track, pick in ops:
        if is_track or not unfinished:
            book.track(next_offset)
            unfinished.append(next_offset)
            next_offset += 1
        else:
            book.complete(unfinished.pop(pick % len(unfinished)))
        commit = book.committable()
        assert commit is not None
        if previous is not None:
            assert commit >= previous
        assert commit == (min(unfinished) if unfinished else next_offset)
        previous = commit


def test_memory_follows_unfinished_offsets_not_the_distance_from_a_slow_head() -> None:
    # One slow message at the head, a hundred thousand finished behind it: the tracker
    # must not keep them all (the dispatcher defers a million tasks behind one endpoint).
    tracker = PartitionOffsets()
    for offset in range(100_000):
        tracker.track(offset)
        if offset:
            tracker.complete(offset)
    assert tracker.committable() == 0
    assert tracker.pending_count() == 1
    assert len(tracker._order) <= 2 * 1 + 1024 + 1
    tracker.complete(0)
    assert tracker.committable() == 100_000
