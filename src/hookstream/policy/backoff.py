"""Retry timing: exponential backoff with jitter, a floor, a cap, a window and a budget.

The random source and the clock come in as arguments, so schedules are reproducible.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, fields

DEFAULT_BASE_S = 30.0
DEFAULT_MULTIPLIER = 2.0
DEFAULT_CAP_S = 6 * 3600.0
DEFAULT_FLOOR_S = 5.0
DEFAULT_JITTER = 0.5
DEFAULT_WINDOW_S = 24 * 3600.0
DEFAULT_MAX_ATTEMPTS = 15


@dataclass(frozen=True)
class BackoffPolicy:
    base_s: float = DEFAULT_BASE_S
    multiplier: float = DEFAULT_MULTIPLIER
    cap_s: float = DEFAULT_CAP_S
    # Keeps the first retry from ever being immediate, whatever the jitter draws.
    floor_s: float = DEFAULT_FLOOR_S
    jitter: float = DEFAULT_JITTER
    window_s: float = DEFAULT_WINDOW_S
    max_attempts: int = DEFAULT_MAX_ATTEMPTS

    def __post_init__(self) -> None:
        for field in fields(self):
            value = getattr(self, field.name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError(f"{field.name} must be a number, got {value!r}")
            if not math.isfinite(value):
                raise ValueError(f"{field.name} must be finite, got {value!r}")
        if self.base_s <= 0:
            raise ValueError(f"base_s must be > 0, got {self.base_s}")
        if self.multiplier < 1:
            raise ValueError(f"multiplier must be >= 1, got {self.multiplier}")
        if self.floor_s <= 0:
            raise ValueError(f"floor_s must be > 0, got {self.floor_s}")
        if self.cap_s < self.floor_s:
            raise ValueError(f"cap_s ({self.cap_s}) must be >= floor_s ({self.floor_s})")
        if not 0 <= self.jitter <= 1:
            raise ValueError(f"jitter must be in [0, 1], got {self.jitter}")
        if self.window_s <= 0:
            raise ValueError(f"window_s must be > 0, got {self.window_s}")
        if not isinstance(self.max_attempts, int) or self.max_attempts < 1:
            raise ValueError(f"max_attempts must be an integer >= 1, got {self.max_attempts!r}")


def base_delay(policy: BackoffPolicy, attempt_no: int) -> float:
    """The un-jittered delay after attempt ``attempt_no`` (1-based), capped."""
    if attempt_no < 1:
        raise ValueError(f"attempt_no must be >= 1, got {attempt_no}")
    try:
        delay = policy.base_s * policy.multiplier ** (attempt_no - 1)
    except OverflowError:
        return policy.cap_s
    return min(delay, policy.cap_s)


def next_delay(
    policy: BackoffPolicy,
    attempt_no: int,
    rng: random.Random,
    retry_after_s: float | None = None,
) -> float:
    """Seconds to wait after attempt ``attempt_no`` failed; always in [floor_s, cap_s]."""
    ceiling = base_delay(policy, attempt_no)
    # Jitter spreads deliveries that failed together (one endpoint outage) so they do not
    # come back as one burst; drawing below the exponential value, never above, keeps
    # the cap and the window arithmetic exact.
    delay = rng.uniform(ceiling * (1 - policy.jitter), ceiling)
    delay = max(delay, policy.floor_s)
    # NaN fails the comparison and is ignored like any other nonsense value.
    if retry_after_s is not None and retry_after_s >= 0:
        # The receiver may ask us to wait longer, never to hammer it sooner than planned,
        # and never beyond the cap (a hostile header must not park a delivery forever).
        wanted = min(retry_after_s, policy.cap_s)
        if wanted > delay:
            # Endpoints answering 429 with the same Retry-After at the same moment (seed
            # 002's storm) must not all come back in the same second: spread the retries
            # above the requested time, never before it.
            delay = min(policy.cap_s, wanted + rng.uniform(0, wanted * policy.jitter * 0.5))
    # Every term is already <= cap_s: the ceiling is capped and floor_s <= cap_s.
    return delay


def schedule_retry(
    policy: BackoffPolicy,
    attempt_no: int,
    first_attempt_at_s: float,
    now_s: float,
    rng: random.Random,
    retry_after_s: float | None = None,
) -> float | None:
    """Absolute due time of the next attempt, or None when the delivery is dead."""
    if attempt_no >= policy.max_attempts:
        return None
    due_s = now_s + next_delay(policy, attempt_no, rng, retry_after_s)
    if due_s > first_attempt_at_s + policy.window_s:
        return None
    return due_s
