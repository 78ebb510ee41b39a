"""The fanout's audience cache against a model of what it promises: a key is served from
the cache only if a query found it reaching someone less than ttl_s ago, with what that
query found; every other key is asked for, once per call, in first-seen order; memory
stays within max_keys."""

from __future__ import annotations

import uuid

from hookstream.fanout.audiences import AudienceCache, Key
from hookstream.fanout.plan import Audience
from hypothesis import given, settings
from hypothesis import strategies as st

KEYS = [("acme", "a"), ("acme", "b"), ("globex", "a"), ("initech", "c"), ("umbrella", "z")]


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _audience(rows: int) -> Audience:
    return Audience(rows, tuple(uuid.UUID(int=i + 1) for i in range(rows // 3)))


steps = st.lists(st.one_of(
    st.tuples(st.just("wait"), st.floats(0, 3)),
    st.tuples(st.just("ask"), st.lists(st.sampled_from(KEYS), max_size=8)),
    st.tuples(st.just("found"), st.dictionaries(st.sampled_from(KEYS), st.integers(0, 9),
                                                max_size=5)),
), max_size=40)


@settings(max_examples=300, deadline=None)
@given(ttl=st.sampled_from([0.0, 0.5, 1.0, 2.0]), max_keys=st.integers(1, 6), script=steps)
def test_the_cache_serves_only_fresh_audiences_of_someone(
        ttl: float, max_keys: int, script: list[tuple[str, object]]) -> None:
    clock = Clock()
    cache = AudienceCache(ttl, max_keys=max_keys, clock=clock)
    found_at: dict[Key, tuple[float, Audience]] = {}  # the model: last finding of each key
    for op, arg in script:
        if op == "wait":
            assert isinstance(arg, float)
            clock.now += arg
        elif op == "found":
            assert isinstance(arg, dict)
            found = {k: _audience(n) for k, n in arg.items()}
            cache.keep(found)
            for k, a in found.items():
                found_at[k] = (clock.now, a)
            assert len(cache) <= max_keys
        else:
            assert isinstance(arg, list)
            known, missing = cache.split(arg)
            assert list(missing) == list(dict.fromkeys(k for k in arg if k not in known))
            assert set(known) | set(missing) == set(arg)
            for k, a in known.items():
                at, latest = found_at[k]
                assert a == latest and a.rows > 0 and clock.now < at + ttl


def test_an_audience_of_nobody_is_asked_for_again() -> None:
    """A new subscription's first endpoint must be found by the next batch: 'nobody'
    is never kept."""
    clock = Clock()
    cache = AudienceCache(10.0, clock=clock)
    cache.keep({("acme", "a"): Audience(0), ("acme", "b"): _audience(4)})
    known, missing = cache.split([("acme", "a"), ("acme", "b"), ("acme", "a")])
    assert known == {("acme", "b"): _audience(4)} and missing == [("acme", "a")]
    clock.now = 10.0  # expired at its ttl
    assert cache.split([("acme", "b")]) == ({}, [("acme", "b")])


def test_a_ttl_of_zero_keeps_nothing() -> None:
    cache = AudienceCache(0.0, clock=Clock())
    cache.keep({("acme", "a"): _audience(5)})
    assert len(cache) == 0 and cache.split([("acme", "a")]) == ({}, [("acme", "a")])
