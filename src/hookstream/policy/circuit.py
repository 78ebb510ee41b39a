"""An endpoint's circuit: closed → paused after N consecutive failures → probing after
the pause → closed on a success, or paused again for longer; disabled after failing
continuously for days. Pure: the state is a value, time comes in as an argument.

The state lives in the ``endpoints`` row (consecutive_failures, first_failure_at,
paused_until, status), so it survives restarts and rebalances.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum


@dataclass(frozen=True)
class CircuitPolicy:
    failure_threshold: int = 5
    base_pause_s: float = 30.0
    max_pause_s: float = 3600.0
    disable_after_s: float = 3 * 86_400.0

    def __post_init__(self) -> None:
        if self.failure_threshold < 1:
            raise ValueError("failure_threshold must be >= 1")
        if not 0 < self.base_pause_s <= self.max_pause_s:
            raise ValueError("need 0 < base_pause_s <= max_pause_s")
        if self.disable_after_s <= 0:
            raise ValueError("disable_after_s must be > 0")


@dataclass(frozen=True)
class CircuitState:
    consecutive_failures: int = 0
    first_failure_at: float | None = None  # epoch seconds
    paused_until: float | None = None  # epoch seconds


class Admission(StrEnum):
    CLOSED = "closed"  # normal traffic
    OPEN = "open"  # paused: send nothing, defer until paused_until
    PROBING = "probing"  # pause over, still failing: one request at a time


class Verdict(StrEnum):
    NONE = "none"
    PAUSE = "pause"
    DISABLE = "disable"


def admission(policy: CircuitPolicy, state: CircuitState, now: float) -> Admission:
    if state.paused_until is not None and now < state.paused_until:
        return Admission.OPEN
    if state.consecutive_failures >= policy.failure_threshold:
        return Admission.PROBING
    return Admission.CLOSED


def on_success(state: CircuitState) -> CircuitState:
    return CircuitState()


def on_failure(
    policy: CircuitPolicy, state: CircuitState, now: float
) -> tuple[CircuitState, Verdict]:
    if state.paused_until is not None and now < state.paused_until:
        # Requests already in flight when the circuit opened fail too; they say nothing
        # new and must not escalate the pause (only failed probes do).
        return state, Verdict.NONE
    failures = state.consecutive_failures + 1
    first = state.first_failure_at if state.first_failure_at is not None else now
    new = replace(state, consecutive_failures=failures, first_failure_at=first)
    if now - first >= policy.disable_after_s:
        return new, Verdict.DISABLE
    if failures >= policy.failure_threshold:
        # Each failed probe doubles the pause, up to the cap.
        pause = min(policy.max_pause_s,
                    policy.base_pause_s * 2 ** min(failures - policy.failure_threshold, 30))
        until = now + pause
        if state.paused_until is None or until > state.paused_until:
            return replace(new, paused_until=until), Verdict.PAUSE
    return new, Verdict.NONE
