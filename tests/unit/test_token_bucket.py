from __future__ import annotations

import math
from itertools import accumulate

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hookstream.policy.token_bucket import AdaptiveRate, TokenBucket

# --- TokenBucket -----------------------------------------------------------


def test_starts_full_and_empties() -> None:
    bucket = TokenBucket(rate_per_s=1.0, burst=3.0, now=0.0)
    assert bucket.tokens(0.0) == 3.0
    assert [bucket.try_take(0.0) for _ in range(4)] == [True, True, True, False]
    assert bucket.tokens(0.0) == 0.0


def test_refills_at_rate() -> None:
    bucket = TokenBucket(rate_per_s=2.0, burst=10.0, now=0.0)
    assert bucket.try_take(0.0, 10.0)
    assert bucket.tokens(1.5) == 3.0


def test_never_exceeds_burst_after_long_idle() -> None:
    bucket = TokenBucket(rate_per_s=100.0, burst=5.0, now=0.0)
    assert bucket.tokens(1e9) == 5.0


def test_wait_time() -> None:
    bucket = TokenBucket(rate_per_s=4.0, burst=2.0, now=0.0)
    assert bucket.wait_time(0.0) == 0.0
    assert bucket.try_take(0.0, 2.0)
    assert bucket.wait_time(0.0) == 0.25
    assert bucket.wait_time(0.0, 2.0) == 0.5
    assert bucket.wait_time(0.1) == pytest.approx(0.15)
    assert bucket.wait_time(0.25) == 0.0


def test_waiting_exactly_wait_time_is_enough_despite_float_error() -> None:
    bucket = TokenBucket(rate_per_s=3.0, burst=1.0, now=0.0)
    now = 0.0
    for _ in range(1000):
        assert bucket.try_take(now)
        now += bucket.wait_time(now)
        assert bucket.wait_time(now) == 0.0


def test_zero_rate_never_refills() -> None:
    bucket = TokenBucket(rate_per_s=0.0, burst=1.0, now=0.0)
    assert bucket.try_take(0.0)
    assert not bucket.try_take(1e6)
    assert bucket.wait_time(1e6) == math.inf


def test_fractional_takes() -> None:
    bucket = TokenBucket(rate_per_s=1.0, burst=1.0, now=0.0)
    assert bucket.try_take(0.0, 0.4)
    assert bucket.try_take(0.0, 0.6)
    assert not bucket.try_take(0.0, 0.1)


def test_refused_take_consumes_nothing() -> None:
    bucket = TokenBucket(rate_per_s=1.0, burst=2.0, now=0.0)
    assert bucket.try_take(0.0, 1.5)
    assert not bucket.try_take(0.0, 1.0)
    assert bucket.tokens(0.0) == 0.5


def test_clock_going_backwards_earns_nothing() -> None:
    bucket = TokenBucket(rate_per_s=1.0, burst=10.0, now=100.0)
    assert bucket.try_take(100.0, 10.0)
    assert bucket.tokens(50.0) == 0.0
    # Back to the latest time seen: the interval 50..100 was already "spent".
    assert bucket.tokens(100.0) == 0.0
    assert bucket.tokens(101.0) == 1.0


def test_set_rate_credits_elapsed_time_at_the_old_rate() -> None:
    bucket = TokenBucket(rate_per_s=1.0, burst=100.0, now=0.0)
    assert bucket.try_take(0.0, 100.0)
    bucket.set_rate(10.0, now=5.0)
    assert bucket.rate_per_s == 10.0
    assert bucket.tokens(5.0) == 5.0  # 5 s at 1/s, not at 10/s
    assert bucket.tokens(6.0) == 15.0


@pytest.mark.parametrize(
    ("rate", "burst", "field"),
    [
        (-1.0, 1.0, "rate_per_s"),
        (math.nan, 1.0, "rate_per_s"),
        (math.inf, 1.0, "rate_per_s"),
        (1.0, 0.0, "burst"),
        (1.0, -1.0, "burst"),
        (1.0, math.inf, "burst"),
    ],
)
def test_invalid_bucket(rate: float, burst: float, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        TokenBucket(rate, burst, now=0.0)


def test_set_rate_validates() -> None:
    bucket = TokenBucket(1.0, 1.0, now=0.0)
    with pytest.raises(ValueError, match="rate_per_s"):
        bucket.set_rate(-2.0, now=0.0)
    assert bucket.rate_per_s == 1.0


@pytest.mark.parametrize("n", [0.0, -1.0, 2.5])
def test_take_amount_must_be_grantable(n: float) -> None:
    bucket = TokenBucket(1.0, 2.0, now=0.0)
    with pytest.raises(ValueError, match="n must be"):
        bucket.try_take(0.0, n)
    with pytest.raises(ValueError, match="n must be"):
        bucket.wait_time(0.0, n)


# --- properties ------------------------------------------------------------

TOLERANCE = 1e-6


def assert_window_bound(takes: list[tuple[float, float]], burst: float, rate: float) -> None:
    """Granted amount in every window [t_i, t_j] is at most burst + rate * (t_j - t_i)."""
    for i, (start, _) in enumerate(takes):
        granted = 0.0
        for end, n in takes[i:]:
            granted += n
            assert granted <= burst + rate * (end - start) + TOLERANCE * (1 + len(takes))


ops = st.lists(
    st.tuples(
        st.floats(min_value=0.0, max_value=10.0),  # time step
        st.floats(min_value=0.01, max_value=1.0),  # share of the burst to take
    ),
    max_size=60,
)


@settings(max_examples=200, deadline=None)
@given(
    rate=st.floats(min_value=0.0, max_value=1000.0),
    burst=st.floats(min_value=0.1, max_value=100.0),
    steps=ops,
)
def test_takes_never_exceed_burst_plus_rate(
    rate: float, burst: float, steps: list[tuple[float, float]]
) -> None:
    bucket = TokenBucket(rate, burst, now=0.0)
    times = list(accumulate(step for step, _ in steps))
    granted: list[tuple[float, float]] = []
    for now, (_, share) in zip(times, steps, strict=True):
        n = share * burst
        if bucket.try_take(now, n):
            granted.append((now, n))
        assert 0.0 <= bucket.tokens(now) <= burst
    assert_window_bound(granted, burst, rate)


@settings(max_examples=200, deadline=None)
@given(
    rate=st.floats(min_value=0.0, max_value=100.0),
    burst=st.floats(min_value=0.1, max_value=100.0),
    times=st.lists(st.floats(min_value=-100.0, max_value=100.0), max_size=60),
    shares=st.lists(st.floats(min_value=0.01, max_value=1.0), min_size=60, max_size=60),
)
def test_backwards_clock_never_over_credits(
    rate: float, burst: float, times: list[float], shares: list[float]
) -> None:
    bucket = TokenBucket(rate, burst, now=0.0)
    granted: list[tuple[float, float]] = []
    latest = 0.0
    for now, share in zip(times, shares, strict=False):
        # The bound holds on the latest time seen, which is the bucket's notion of time.
        latest = max(latest, now)
        if bucket.try_take(now, share * burst):
            granted.append((latest, share * burst))
        assert 0.0 <= bucket.tokens(now) <= burst
    assert_window_bound(granted, burst, rate)


@settings(max_examples=200, deadline=None)
@given(
    burst=st.floats(min_value=0.1, max_value=100.0),
    rates=st.lists(st.floats(min_value=0.0, max_value=100.0), min_size=1, max_size=60),
    steps=st.lists(st.floats(min_value=0.0, max_value=5.0), min_size=60, max_size=60),
)
def test_rate_changes_stay_within_the_highest_rate(
    burst: float, rates: list[float], steps: list[float]
) -> None:
    bucket = TokenBucket(rates[0], burst, now=0.0)
    granted: list[tuple[float, float]] = []
    now = 0.0
    for rate, step in zip(rates, steps, strict=False):
        now += step
        bucket.set_rate(rate, now)
        while bucket.try_take(now, burst / 4):
            granted.append((now, burst / 4))
    assert_window_bound(granted, burst, max(rates))


@settings(max_examples=200, deadline=None)
@given(
    rate=st.floats(min_value=0.001, max_value=1000.0),
    burst=st.floats(min_value=0.1, max_value=100.0),
    start=st.floats(min_value=0.0, max_value=1e6),
    share=st.floats(min_value=0.01, max_value=1.0),
)
def test_wait_time_is_sufficient(rate: float, burst: float, start: float, share: float) -> None:
    bucket = TokenBucket(rate, burst, now=start)
    assert bucket.try_take(start, burst)
    n = share * burst
    wait = bucket.wait_time(start, n)
    assert wait > 0
    assert bucket.try_take(start + wait, n)


# --- AdaptiveRate ----------------------------------------------------------


def test_throttling_halves_down_to_the_floor() -> None:
    rate = AdaptiveRate(configured_rate=100.0, floor_rate=10.0)
    assert rate.effective == 100.0
    assert [rate.on_throttled() for _ in range(5)] == [50.0, 25.0, 12.5, 10.0, 10.0]
    assert rate.effective == 10.0


def test_success_recovers_additively_up_to_configured() -> None:
    rate = AdaptiveRate(configured_rate=10.0, floor_rate=1.0, increase_per_success=2.0)
    rate.on_throttled()
    rate.on_throttled()
    assert rate.effective == 2.5
    assert [rate.on_success() for _ in range(5)] == [4.5, 6.5, 8.5, 10.0, 10.0]


def test_default_recovery_is_gradual() -> None:
    rate = AdaptiveRate(configured_rate=100.0, floor_rate=1.0)
    rate.on_throttled()
    assert rate.on_success() == 52.0
    successes = 1
    while rate.effective < 100.0:
        rate.on_success()
        successes += 1
    assert successes == 25


def test_custom_decrease() -> None:
    rate = AdaptiveRate(configured_rate=100.0, floor_rate=1.0, decrease=0.9)
    assert rate.on_throttled() == pytest.approx(90.0)
    assert rate.configured == 100.0


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"configured_rate": 0.0, "floor_rate": 0.0}, "configured_rate"),
        ({"configured_rate": math.inf, "floor_rate": 1.0}, "configured_rate"),
        ({"configured_rate": 10.0, "floor_rate": 0.0}, "floor_rate"),
        ({"configured_rate": 10.0, "floor_rate": 11.0}, "floor_rate"),
        ({"configured_rate": 10.0, "floor_rate": 1.0, "decrease": 1.0}, "decrease"),
        ({"configured_rate": 10.0, "floor_rate": 1.0, "decrease": 0.0}, "decrease"),
        ({"configured_rate": 10.0, "floor_rate": 1.0, "increase_per_success": 0.0}, "increase"),
    ],
)
def test_invalid_adaptive_rate(kwargs: dict[str, float], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        AdaptiveRate(**kwargs)


@settings(max_examples=200, deadline=None)
@given(
    configured=st.floats(min_value=0.01, max_value=1e4),
    floor_share=st.floats(min_value=0.001, max_value=1.0),
    events=st.lists(st.booleans(), max_size=100),
)
def test_effective_rate_stays_between_floor_and_configured(
    configured: float, floor_share: float, events: list[bool]
) -> None:
    rate = AdaptiveRate(configured, configured * floor_share)
    for throttled in events:
        before = rate.effective
        after = rate.on_throttled() if throttled else rate.on_success()
        assert configured * floor_share <= after <= configured
        assert (after <= before) if throttled else (after >= before)


def test_a_new_burst_keeps_the_tokens_already_there() -> None:
    bucket = TokenBucket(rate_per_s=1.0, burst=10.0, now=0.0)
    for _ in range(8):
        assert bucket.try_take(0.0)
    bucket.set_burst(20.0, now=0.0)
    assert bucket.tokens(0.0) == pytest.approx(2.0)  # not a fresh full burst of 20
    bucket.set_burst(1.0, now=0.0)
    assert bucket.tokens(0.0) == pytest.approx(1.0)  # capped by the smaller burst
