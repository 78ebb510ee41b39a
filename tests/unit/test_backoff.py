from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hookstream.policy.backoff import BackoffPolicy, base_delay, next_delay, schedule_retry

DEFAULT = BackoffPolicy()
NO_JITTER = BackoffPolicy(jitter=0.0)


class FixedRandom(random.Random):
    """random() returns a chosen value, so the jitter's ends are reachable exactly."""

    def __init__(self, value: float) -> None:
        super().__init__(0)
        self.value = value

    def random(self) -> float:
        return self.value


# --- validation ------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"base_s": 0.0}, "base_s"),
        ({"base_s": -1.0}, "base_s"),
        ({"multiplier": 0.5}, "multiplier"),
        ({"floor_s": 0.0}, "floor_s"),
        ({"cap_s": 1.0, "floor_s": 5.0}, "cap_s"),
        ({"jitter": -0.1}, "jitter"),
        ({"jitter": 1.5}, "jitter"),
        ({"window_s": 0.0}, "window_s"),
        ({"max_attempts": 0}, "max_attempts"),
        ({"max_attempts": 2.5}, "max_attempts"),
        ({"base_s": math.nan}, "base_s"),
        ({"cap_s": math.inf}, "cap_s"),
        ({"window_s": "1"}, "window_s"),
        ({"jitter": True}, "jitter"),
    ],
)
def test_invalid_policy_names_the_field(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        BackoffPolicy(**kwargs)  # type: ignore[arg-type]


def test_defaults_match_the_design() -> None:
    assert (
        BackoffPolicy(
            base_s=30.0,
            multiplier=2.0,
            cap_s=21600.0,
            floor_s=5.0,
            jitter=0.5,
            window_s=86400.0,
            max_attempts=15,
        )
        == DEFAULT
    )


# --- delays ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("attempt_no", "expected"),
    [(1, 30.0), (2, 60.0), (3, 120.0), (4, 240.0), (10, 15360.0), (11, 21600.0), (15, 21600.0)],
)
def test_base_delay_table(attempt_no: int, expected: float) -> None:
    assert base_delay(DEFAULT, attempt_no) == expected


def test_base_delay_huge_attempt_is_capped_not_overflowing() -> None:
    assert base_delay(DEFAULT, 100_000) == DEFAULT.cap_s


@pytest.mark.parametrize("attempt_no", [0, -1])
def test_attempt_numbers_start_at_one(attempt_no: int) -> None:
    with pytest.raises(ValueError, match="attempt_no"):
        next_delay(DEFAULT, attempt_no, random.Random(0))


@pytest.mark.parametrize(
    ("draw", "attempt_no", "expected"),
    [
        (0.0, 1, 15.0),  # lowest end: d * (1 - jitter)
        (0.999999, 1, 30.0 - 15.0 * 1e-6),
        (0.5, 3, 90.0),
        (0.0, 11, 10800.0),
    ],
)
def test_jitter_ends(draw: float, attempt_no: int, expected: float) -> None:
    assert next_delay(DEFAULT, attempt_no, FixedRandom(draw)) == pytest.approx(expected)


def test_floor_keeps_first_retry_from_being_immediate() -> None:
    policy = BackoffPolicy(base_s=1.0, jitter=1.0, floor_s=5.0)
    assert next_delay(policy, 1, FixedRandom(0.0)) == 5.0


def test_without_jitter_delay_is_the_base_delay() -> None:
    assert [next_delay(NO_JITTER, n, random.Random(1)) for n in (1, 2, 3)] == [30.0, 60.0, 120.0]


@pytest.mark.parametrize(
    ("retry_after_s", "expected"),
    [
        (None, 30.0),
        (0.0, 30.0),  # a shorter Retry-After never makes us retry sooner than planned
        (10.0, 30.0),
        (600.0, 600.0),
        (21600.0, 21600.0),
        (10**9, 21600.0),  # capped
        (math.inf, 21600.0),
        (-5.0, 30.0),  # nonsense is ignored
        (math.nan, 30.0),
    ],
)
def test_retry_after(retry_after_s: float | None, expected: float) -> None:
    assert next_delay(NO_JITTER, 1, random.Random(0), retry_after_s) == expected


def test_same_seed_same_delays() -> None:
    a = [next_delay(DEFAULT, n, random.Random(42)) for n in range(1, 15)]
    b = [next_delay(DEFAULT, n, random.Random(42)) for n in range(1, 15)]
    assert a == b


def test_jitter_actually_varies() -> None:
    rng = random.Random(7)
    assert len({next_delay(DEFAULT, 3, rng) for _ in range(20)}) > 1


# --- schedule --------------------------------------------------------------


def test_schedule_returns_absolute_due_time() -> None:
    assert schedule_retry(NO_JITTER, 1, 1000.0, 1005.0, random.Random(0)) == 1035.0


def test_schedule_dead_after_max_attempts() -> None:
    policy = BackoffPolicy(jitter=0.0, max_attempts=3)
    assert schedule_retry(policy, 2, 0.0, 0.0, random.Random(0)) == 60.0
    assert schedule_retry(policy, 3, 0.0, 0.0, random.Random(0)) is None
    assert schedule_retry(policy, 4, 0.0, 0.0, random.Random(0)) is None


def test_single_attempt_policy_never_retries() -> None:
    assert schedule_retry(BackoffPolicy(max_attempts=1), 1, 0.0, 0.0, random.Random(0)) is None


def test_schedule_window_edge() -> None:
    policy = BackoffPolicy(jitter=0.0, window_s=100.0)
    assert schedule_retry(policy, 1, 0.0, 70.0, random.Random(0)) == 100.0  # exactly at the end
    assert schedule_retry(policy, 1, 0.0, 70.5, random.Random(0)) is None


def test_retry_after_past_window_kills_the_delivery() -> None:
    policy = BackoffPolicy(jitter=0.0, window_s=3600.0)
    assert schedule_retry(policy, 1, 0.0, 0.0, random.Random(0), retry_after_s=7200.0) is None


def test_default_schedule_lasts_about_the_window() -> None:
    rng = random.Random(3)
    first = now = 0.0
    attempts = 1
    while (due := schedule_retry(DEFAULT, attempts, first, now, rng)) is not None:
        now = due
        attempts += 1
    assert attempts <= DEFAULT.max_attempts
    assert now <= first + DEFAULT.window_s


# --- properties ------------------------------------------------------------

policies = st.builds(
    BackoffPolicy,
    base_s=st.floats(min_value=0.001, max_value=1e4),
    multiplier=st.floats(min_value=1.0, max_value=10.0),
    cap_s=st.floats(min_value=5.0, max_value=1e6),
    floor_s=st.floats(min_value=0.001, max_value=5.0),
    jitter=st.floats(min_value=0.0, max_value=1.0),
    window_s=st.floats(min_value=1.0, max_value=1e7),
    max_attempts=st.integers(min_value=1, max_value=50),
)
retry_afters = st.none() | st.floats(allow_nan=True, allow_infinity=True)


@settings(max_examples=200, deadline=None)
@given(
    policy=policies,
    attempt_no=st.integers(min_value=1, max_value=10_000),
    seed=st.integers(),
    retry_after_s=retry_afters,
)
def test_delay_within_floor_and_cap(
    policy: BackoffPolicy, attempt_no: int, seed: int, retry_after_s: float | None
) -> None:
    delay = next_delay(policy, attempt_no, random.Random(seed), retry_after_s)
    assert policy.floor_s <= delay <= policy.cap_s


@settings(max_examples=200, deadline=None)
@given(policy=policies, attempt_no=st.integers(min_value=1, max_value=60), seed=st.integers())
def test_jitter_stays_within_the_band(policy: BackoffPolicy, attempt_no: int, seed: int) -> None:
    d = base_delay(policy, attempt_no)
    delay = next_delay(policy, attempt_no, random.Random(seed))
    low = max(d * (1 - policy.jitter), policy.floor_s)
    high = max(d, policy.floor_s)
    assert low - 1e-9 * high <= delay <= high


@settings(max_examples=200, deadline=None)
@given(policy=policies, attempt_no=st.integers(min_value=1, max_value=200))
def test_unjittered_delay_is_monotone(policy: BackoffPolicy, attempt_no: int) -> None:
    assert base_delay(policy, attempt_no) <= base_delay(policy, attempt_no + 1)


@settings(max_examples=200, deadline=None)
@given(
    policy=policies,
    attempt_no=st.integers(min_value=1, max_value=60),
    first=st.floats(min_value=0, max_value=1e6),
    elapsed=st.floats(min_value=0, max_value=1e7),
    seed=st.integers(),
    retry_after_s=retry_afters,
)
def test_due_time_never_beyond_window(
    policy: BackoffPolicy,
    attempt_no: int,
    first: float,
    elapsed: float,
    seed: int,
    retry_after_s: float | None,
) -> None:
    now = first + elapsed
    due = schedule_retry(policy, attempt_no, first, now, random.Random(seed), retry_after_s)
    if attempt_no >= policy.max_attempts:
        assert due is None
    if due is not None:
        assert due <= first + policy.window_s
        assert due - now >= policy.floor_s - 1e-6


@settings(max_examples=100, deadline=None)
@given(policy=policies, seed=st.integers())
def test_full_schedule_is_bounded(policy: BackoffPolicy, seed: int) -> None:
    rng = random.Random(seed)
    now, attempts = 0.0, 1
    while (due := schedule_retry(policy, attempts, 0.0, now, rng)) is not None:
        assert due > now
        now, attempts = due, attempts + 1
    assert attempts <= policy.max_attempts
    assert now <= policy.window_s
