"""UUIDv7 ids: RFC 9562's layout, the time round trip, and order across milliseconds."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hookstream.core.ids import uuid7, uuid7_ms

MS = st.integers(0, (1 << 48) - 1)


@given(MS, st.binary(min_size=10, max_size=10))
def test_layout_and_time_round_trip(ms: int, rand: bytes) -> None:
    made = uuid7(ms, lambda n: rand[:n])
    assert made.version == 7 and made.variant == uuid.RFC_4122
    assert uuid7_ms(made) == ms
    assert uuid.UUID(str(made)) == made


@given(MS, MS)
def test_a_later_millisecond_sorts_after_whatever_the_random_bits(a: int, b: int) -> None:
    first, second = sorted((a, b))
    if first == second:
        return
    low, high = uuid7(first, lambda n: b"\xff" * n), uuid7(second, lambda n: b"\x00" * n)
    assert low < high and str(low) < str(high)  # also as text, as PostgreSQL sorts uuid


def test_without_a_clock_it_uses_now_and_differs_each_time() -> None:
    import time

    before = time.time_ns() // 1_000_000
    made = [uuid7() for _ in range(1000)]
    assert len(set(made)) == 1000
    assert all(before <= uuid7_ms(u) <= before + 60_000 for u in made)


def test_out_of_range_times_are_refused() -> None:
    for ms in (-1, 1 << 48):
        with pytest.raises(ValueError, match="out of UUIDv7 range"):
            uuid7(ms)
