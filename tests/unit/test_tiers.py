"""Delay tiers: a record hops through fixed-delay topics and is never released early."""

from __future__ import annotations

import itertools
import math
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hookstream.policy.tiers import DEFAULT_DELAYS_S, Tiers

DEFAULT = Tiers()
# Kafka's legal topic names.
TOPIC = re.compile(r"[a-zA-Z0-9._-]{1,249}")


def hops(tiers: Tiers, requested_s: float) -> list[float]:
    """Follow a record: each hop waits exactly its tier's delay, then routes again."""
    remaining, out = requested_s, []
    limit = hop_bound(tiers, requested_s) + 10
    while (d := tiers.route(remaining)) is not None:
        out.append(d)
        remaining -= d
        assert len(out) <= limit, "no end to the hops"
    return out


def hop_bound(tiers: Tiers, requested_s: float) -> int:
    """Greedy over the tiers: whole largest tiers, then at most (next/this − 1) of each
    smaller one to cover a remainder below the next tier, then one smallest tier."""
    d = tiers.delays_s
    return (math.floor(requested_s / d[-1]) + 1
            + sum(math.ceil(b / a) - 1 for a, b in itertools.pairwise(d)) + 1)


# --- names -----------------------------------------------------------------------------


def test_default_topics() -> None:
    assert DEFAULT.delays_s == DEFAULT_DELAYS_S
    assert DEFAULT.topics == [f"hookstream.delay.{x}"
                              for x in ("1s", "5s", "30s", "2m", "10m", "1h", "4h")]
    assert Tiers("acme").topic(5.0) == "acme.delay.5s"


@pytest.mark.parametrize(("delay_s", "label"), [
    (0.5, "500ms"), (1.5, "1500ms"), (0.25, "250ms"), (1.001, "1001ms"), (0.7, "700ms"),
    (1.0, "1s"), (59.0, "59s"), (90.0, "90s"), (60.0, "1m"), (120.0, "2m"),
    (5400.0, "90m"), (3600.0, "1h"), (7200.0, "2h"), (86_400.0, "24h"),
])
def test_labels(delay_s: float, label: str) -> None:
    assert Tiers(delays_s=(delay_s,)).topics == [f"hookstream.delay.{label}"]


def test_delay_of_unknown_topic() -> None:
    with pytest.raises(KeyError):
        DEFAULT.delay_of("hookstream.delay.7s")
    with pytest.raises(KeyError):
        DEFAULT.delay_of("other.delay.5s")
    with pytest.raises(KeyError):
        DEFAULT.delay_of("hookstream.deliveries")


@st.composite
def tier_sets(draw: st.DrawFn) -> Tiers:
    """Strictly increasing delays, whole seconds or milliseconds, as configs would be."""
    ms = draw(st.lists(st.integers(1, 10**8), min_size=1, max_size=8, unique=True))
    whole = draw(st.booleans())
    delays = sorted({float(m // 1000 or 1) if whole else m / 1000 for m in ms})
    return Tiers(draw(st.sampled_from(["hookstream", "acme-prod", "t.x_1"])), tuple(delays))


@settings(max_examples=200, deadline=None)
@given(tier_sets())
def test_topics_are_unique_legal_and_map_back(tiers: Tiers) -> None:
    names = tiers.topics
    assert len(set(names)) == len(names)
    for d, name in zip(tiers.delays_s, names, strict=True):
        assert TOPIC.fullmatch(name)
        assert name.startswith(f"{tiers.prefix}.delay.")
        assert tiers.delay_of(name) == d
        assert tiers.delay_of(tiers.topic(d)) == d


# --- validation ------------------------------------------------------------------------


@pytest.mark.parametrize("delays", [
    (), (0.0,), (-1.0,), (1.0, 0.0), (5.0, 1.0), (1.0, 1.0), (1.0, 5.0, 5.0),
    (math.nan,), (1.0, math.nan), (math.inf,), (1.0, math.inf), (-math.inf, 1.0),
    # Same millisecond: two tiers would share a topic and delay_of would mix them up.
    (0.0011, 0.0012), (1.0001, 1.0002),
])
def test_invalid_tiers(delays: tuple[float, ...]) -> None:
    with pytest.raises(ValueError, match="tier delays"):
        Tiers(delays_s=delays)


# --- routing ---------------------------------------------------------------------------


@pytest.mark.parametrize(("remaining", "tier"), [
    (-5.0, None), (0.0, None), (-0.0, None), (1e-9, 1.0), (0.5, 1.0), (1.0, 1.0),
    (4.999, 1.0), (5.0, 5.0), (29.0, 5.0), (30.0, 30.0), (119.9, 30.0), (120.0, 120.0),
    (3599.0, 600.0), (3600.0, 3600.0), (14_399.0, 3600.0), (14_400.0, 14_400.0),
    (1e9, 14_400.0),
])
def test_route(remaining: float, tier: float | None) -> None:
    assert DEFAULT.route(remaining) == tier


@pytest.mark.parametrize(("requested", "path"), [
    (0.3, [1.0]),
    (6.0, [5.0, 1.0]),
    (36.5, [30.0, 5.0, 1.0, 1.0]),
    (4 * 3600.0 + 61.0, [14_400.0, 30.0, 30.0, 1.0]),
])
def test_hop_paths(requested: float, path: list[float]) -> None:
    assert hops(DEFAULT, requested) == path


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.just(DEFAULT), tier_sets()), st.floats(1e-6, 1e3))
def test_never_released_early_nor_late_by_more_than_the_smallest_tier(
    tiers: Tiers, scale: float
) -> None:
    requested = scale * tiers.delays_s[-1]  # up to a thousand of the largest tier
    path = hops(tiers, requested)
    assert path, "a record still to wait must wait"
    assert all(d in tiers.delays_s for d in path)
    total = math.fsum(path)
    tol = 1e-9 * max(1.0, requested)  # the remaining time is tracked in floats
    assert total >= requested - tol
    assert total <= requested + tiers.delays_s[0] + tol
    assert len(path) <= hop_bound(tiers, requested)
    # Only the last hop may overshoot what was left.
    assert math.fsum(path[:-1]) < requested + tol


@settings(max_examples=200, deadline=None)
@given(st.one_of(st.just(DEFAULT), tier_sets()), st.floats(-1e9, 1e9, allow_nan=False))
def test_route_picks_the_largest_tier_that_fits(tiers: Tiers, remaining: float) -> None:
    d = tiers.route(remaining)
    if remaining <= 0:
        assert d is None
        return
    assert d is not None
    fitting = [x for x in tiers.delays_s if x <= remaining]
    if fitting:
        assert d == max(fitting)
        assert d <= remaining
    else:
        assert d == tiers.delays_s[0]


def test_default_hop_counts() -> None:
    # A full default retry window (24 h) needs six 4 h hops and nothing else.
    assert hops(DEFAULT, 24 * 3600.0) == [14_400.0] * 6
    # The worst case just under the largest tier: 3+5+4+3+5+4 hops.
    assert len(hops(DEFAULT, 14_399.0)) == 24
    for s in range(1, 30_000, 7):
        assert len(hops(DEFAULT, float(s))) <= hop_bound(DEFAULT, float(s))
    assert hop_bound(DEFAULT, 14_399.0) == 26
