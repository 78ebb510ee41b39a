"""Per-endpoint rate limiting: a token bucket and an AIMD rate that adapts to throttling.

Time is passed in on every call (a monotonic clock in production), so the bucket holds
no clock and tests drive it with plain numbers.
"""

from __future__ import annotations

import math

# Float refills such as 3/s x (1/3) s, or now + wait - now at monotonic-clock magnitudes,
# land a hair under a whole token; without slack a caller that waited exactly wait_time()
# would be refused and spin on tiny waits. A millionth of a token per take is harmless.
_EPSILON = 1e-6
DEFAULT_DECREASE = 0.5
# Additive increase per success as a share of the configured rate: from half rate back
# to full in 25 successes, gradual enough that one good response does not re-trigger 429s.
DEFAULT_INCREASE_FRACTION = 0.02


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(message)


def _check_rate(rate_per_s: float) -> None:
    _require(
        math.isfinite(rate_per_s) and rate_per_s >= 0,
        f"rate_per_s must be finite and >= 0, got {rate_per_s}",
    )


class TokenBucket:
    """Starts full; holds at most ``burst`` tokens; refills at ``rate_per_s``."""

    def __init__(self, rate_per_s: float, burst: float, now: float) -> None:
        _check_rate(rate_per_s)
        _require(math.isfinite(burst) and burst > 0, f"burst must be finite and > 0, got {burst}")
        self._rate_per_s = float(rate_per_s)
        self._burst = float(burst)
        self._tokens = float(burst)
        self._updated_at = now

    @property
    def rate_per_s(self) -> float:
        return self._rate_per_s

    @property
    def burst(self) -> float:
        return self._burst

    def tokens(self, now: float) -> float:
        self._refill(now)
        return self._tokens

    def try_take(self, now: float, n: float = 1.0) -> bool:
        self._check_n(n)
        self._refill(now)
        if self._tokens + _EPSILON < n:
            return False
        self._tokens = max(self._tokens - n, 0.0)
        return True

    def wait_time(self, now: float, n: float = 1.0) -> float:
        """Seconds until ``n`` tokens are available; inf when the rate is zero."""
        self._check_n(n)
        self._refill(now)
        missing = n - self._tokens
        if missing <= _EPSILON:
            return 0.0
        if self._rate_per_s == 0:
            return math.inf
        return missing / self._rate_per_s

    def set_rate(self, rate_per_s: float, now: float) -> None:
        _check_rate(rate_per_s)
        # Time already elapsed was earned at the old rate; the new one applies from now.
        self._refill(now)
        self._rate_per_s = float(rate_per_s)

    def set_burst(self, burst: float, now: float) -> None:
        """A new burst keeps the tokens already there (capped): a configuration change
        must not hand out a fresh full burst."""
        _require(math.isfinite(burst) and burst > 0, f"burst must be finite and > 0, got {burst}")
        self._refill(now)
        self._burst = float(burst)
        self._tokens = min(self._tokens, self._burst)

    def _refill(self, now: float) -> None:
        # A clock that steps back earns nothing, and the anchor stays at the latest time
        # seen so the same interval is never credited twice.
        elapsed = now - self._updated_at
        if elapsed > 0:
            self._tokens = min(self._burst, self._tokens + elapsed * self._rate_per_s)
            self._updated_at = now

    def _check_n(self, n: float) -> None:
        # More than the burst could never be granted: a caller would wait forever.
        _require(0 < n <= self._burst, f"n must be in (0, burst={self._burst}], got {n}")


class AdaptiveRate:
    """Additive-increase, multiplicative-decrease rate for one endpoint.

    Repeated 429/503 halve the effective rate down to a floor; each success adds back a
    small step until the configured rate is reached again.
    """

    def __init__(
        self,
        configured_rate: float,
        floor_rate: float,
        decrease: float = DEFAULT_DECREASE,
        increase_per_success: float | None = None,
    ) -> None:
        _require(
            math.isfinite(configured_rate) and configured_rate > 0,
            f"configured_rate must be finite and > 0, got {configured_rate}",
        )
        _require(
            math.isfinite(floor_rate) and 0 < floor_rate <= configured_rate,
            f"floor_rate must be in (0, configured_rate={configured_rate}], got {floor_rate}",
        )
        _require(0 < decrease < 1, f"decrease must be in (0, 1), got {decrease}")
        if increase_per_success is None:
            increase_per_success = configured_rate * DEFAULT_INCREASE_FRACTION
        _require(
            math.isfinite(increase_per_success) and increase_per_success > 0,
            f"increase_per_success must be finite and > 0, got {increase_per_success}",
        )
        self._configured = float(configured_rate)
        self._floor = float(floor_rate)
        self._decrease = float(decrease)
        self._increase = float(increase_per_success)
        self._effective = float(configured_rate)

    @property
    def configured(self) -> float:
        return self._configured

    @property
    def effective(self) -> float:
        return self._effective

    def on_throttled(self) -> float:
        self._effective = max(self._floor, self._effective * self._decrease)
        return self._effective

    def on_success(self) -> float:
        self._effective = min(self._configured, self._effective + self._increase)
        return self._effective
