"""Endpoint circuit: pause after N consecutive failures, doubling per failed probe up to a
cap, disable after days of continuous failure, reset on success."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hookstream.policy.circuit import (
    Admission,
    CircuitPolicy,
    CircuitState,
    Verdict,
    admission,
    on_failure,
    on_success,
)

POLICY = CircuitPolicy(failure_threshold=3, base_pause_s=10.0, max_pause_s=80.0,
                       disable_after_s=1000.0)


def fail_at(times: list[float], policy: CircuitPolicy = POLICY,
            state: CircuitState | None = None) -> tuple[CircuitState, list[Verdict]]:
    state = state or CircuitState()
    verdicts = []
    for t in times:
        state, verdict = on_failure(policy, state, t)
        verdicts.append(verdict)
    return state, verdicts


# --- policy validation -----------------------------------------------------------------


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"failure_threshold": 0}, "failure_threshold"),
    ({"failure_threshold": -2}, "failure_threshold"),
    ({"base_pause_s": 0.0}, "base_pause_s"),
    ({"base_pause_s": -1.0}, "base_pause_s"),
    ({"base_pause_s": 100.0, "max_pause_s": 50.0}, "max_pause_s"),
    ({"disable_after_s": 0.0}, "disable_after_s"),
    ({"disable_after_s": -5.0}, "disable_after_s"),
])
def test_invalid_policy(kwargs: dict[str, float], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        CircuitPolicy(**kwargs)  # type: ignore[arg-type]


def test_defaults() -> None:
    p = CircuitPolicy()
    assert (p.failure_threshold, p.base_pause_s, p.max_pause_s, p.disable_after_s) == (
        5, 30.0, 3600.0, 3 * 86_400.0)
    assert CircuitPolicy(base_pause_s=60.0, max_pause_s=60.0).max_pause_s == 60.0


# --- admission -----------------------------------------------------------------------


@pytest.mark.parametrize(("state", "now", "expected"), [
    (CircuitState(), 0.0, Admission.CLOSED),
    (CircuitState(consecutive_failures=2, first_failure_at=0.0), 5.0, Admission.CLOSED),
    (CircuitState(3, 0.0, 20.0), 19.999, Admission.OPEN),
    (CircuitState(3, 0.0, 20.0), 20.0, Admission.PROBING),
    (CircuitState(7, 0.0, 20.0), 500.0, Admission.PROBING),
    (CircuitState(3, 0.0, None), 1.0, Admission.PROBING),
    # A pause set by hand (operator) holds traffic even below the threshold.
    (CircuitState(0, None, 50.0), 10.0, Admission.OPEN),
    (CircuitState(0, None, 50.0), 50.0, Admission.CLOSED),
])
def test_admission(state: CircuitState, now: float, expected: Admission) -> None:
    assert admission(POLICY, state, now) is expected


# --- failures, pauses, disable ----------------------------------------------------------


def test_below_threshold_nothing_happens() -> None:
    state, verdicts = fail_at([0.0, 1.0])
    assert verdicts == [Verdict.NONE, Verdict.NONE]
    assert state == CircuitState(consecutive_failures=2, first_failure_at=0.0)
    assert admission(POLICY, state, 1.0) is Admission.CLOSED


def test_pauses_at_threshold() -> None:
    state, verdicts = fail_at([0.0, 1.0, 2.0])
    assert verdicts == [Verdict.NONE, Verdict.NONE, Verdict.PAUSE]
    assert state == CircuitState(3, 0.0, 12.0)
    assert admission(POLICY, state, 11.9) is Admission.OPEN
    assert admission(POLICY, state, 12.0) is Admission.PROBING


@pytest.mark.parametrize("threshold", [1, 2, 5])
def test_threshold_is_the_failure_count_that_pauses(threshold: int) -> None:
    policy = CircuitPolicy(failure_threshold=threshold, base_pause_s=10.0, max_pause_s=80.0,
                           disable_after_s=1000.0)
    _, verdicts = fail_at([float(i) for i in range(threshold)], policy)
    assert verdicts == [Verdict.NONE] * (threshold - 1) + [Verdict.PAUSE]


def test_each_failed_probe_doubles_the_pause_up_to_the_cap() -> None:
    state, _ = fail_at([0.0, 1.0, 2.0])  # paused until 12
    pauses = []
    for _ in range(6):
        probe_at = state.paused_until
        assert probe_at is not None
        assert admission(POLICY, state, probe_at) is Admission.PROBING
        state, verdict = on_failure(POLICY, state, probe_at)
        assert verdict is Verdict.PAUSE
        assert state.paused_until is not None
        pauses.append(state.paused_until - probe_at)
    assert pauses == [20.0, 40.0, 80.0, 80.0, 80.0, 80.0]


def test_a_huge_failure_count_stays_at_the_cap() -> None:
    state = CircuitState(consecutive_failures=10_000, first_failure_at=0.0, paused_until=5.0)
    new, verdict = on_failure(POLICY, state, 6.0)
    assert verdict is Verdict.PAUSE
    assert new.paused_until == 86.0


@pytest.mark.parametrize("now", [15.0, 99.999])
def test_failure_while_open_changes_nothing(now: float) -> None:
    state = CircuitState(consecutive_failures=10, first_failure_at=0.0, paused_until=100.0)
    assert on_failure(POLICY, state, now) == (state, Verdict.NONE)


def test_success_resets_everything() -> None:
    state, _ = fail_at([0.0, 1.0, 2.0, 12.0])
    assert on_success(state) == CircuitState()
    assert admission(POLICY, on_success(state), 13.0) is Admission.CLOSED
    # The next streak starts from scratch: its own first failure, its own threshold.
    again, verdicts = fail_at([500.0, 501.0, 502.0], state=on_success(state))
    assert verdicts[-1] is Verdict.PAUSE
    assert again == CircuitState(3, 500.0, 512.0)


def test_disable_after_continuous_failure() -> None:
    state, _ = fail_at([0.0, 1.0, 2.0])
    t = 12.0
    while True:
        state, verdict = on_failure(POLICY, state, t)
        if verdict is Verdict.DISABLE:
            break
        assert t < 1000.0
        assert state.paused_until is not None
        t = state.paused_until
    assert t >= 1000.0
    assert state.first_failure_at == 0.0


@pytest.mark.parametrize(("now", "expected"), [
    (999.999, Verdict.PAUSE), (1000.0, Verdict.DISABLE), (5000.0, Verdict.DISABLE),
])
def test_disable_boundary(now: float, expected: Verdict) -> None:
    state = CircuitState(consecutive_failures=9, first_failure_at=0.0, paused_until=900.0)
    assert on_failure(POLICY, state, now)[1] is expected


def test_success_restarts_the_disable_clock() -> None:
    state, _ = fail_at([0.0, 1.0, 2.0])
    state = on_success(state)
    state, verdicts = fail_at([999.0, 1500.0, 1998.0], state=state)
    assert Verdict.DISABLE not in verdicts
    assert state.first_failure_at == 999.0
    assert state.paused_until == 2008.0
    assert on_failure(POLICY, state, 2008.0)[1] is Verdict.DISABLE


def test_failures_already_in_flight_when_the_circuit_opens_do_not_escalate() -> None:
    # Ten requests were in flight when the endpoint went down; they all time out together.
    state, verdicts = fail_at([100.0 + i * 0.001 for i in range(10)])
    assert verdicts == [Verdict.NONE, Verdict.NONE, Verdict.PAUSE] + [Verdict.NONE] * 7
    assert state == CircuitState(3, 100.0, 100.002 + 10.0)
    # Only the probe's failure doubles the pause.
    state, verdict = on_failure(POLICY, state, 110.002)
    assert verdict is Verdict.PAUSE
    assert state.paused_until == pytest.approx(110.002 + 20.0)


# --- properties ----------------------------------------------------------------------

@st.composite
def valid_policies(draw: st.DrawFn) -> CircuitPolicy:
    base = draw(st.floats(0.001, 1e4))
    return CircuitPolicy(
        failure_threshold=draw(st.integers(1, 8)),
        base_pause_s=base,
        max_pause_s=draw(st.floats(base, 1e5)),
        disable_after_s=draw(st.floats(1.0, 1e7)),
    )


events = st.lists(st.tuples(st.floats(0.0, 5e4), st.booleans()), max_size=60)


@settings(max_examples=300, deadline=None)
@given(valid_policies(), st.floats(0.0, 2e9), events)
def test_random_histories(policy: CircuitPolicy, start: float,
                          history: list[tuple[float, bool]]) -> None:
    state, now = CircuitState(), start
    for dt, ok in history:
        now += dt
        if ok:
            state = on_success(state)
            assert state == CircuitState()
            continue
        before = state
        state, verdict = on_failure(policy, state, now)
        if before.paused_until is not None and now < before.paused_until:
            assert (state, verdict) == (before, Verdict.NONE), "in flight when it opened"
            continue
        first = before.first_failure_at if before.first_failure_at is not None else now
        assert state.consecutive_failures == before.consecutive_failures + 1
        assert state.first_failure_at == first
        if verdict is Verdict.DISABLE:
            assert now - first >= policy.disable_after_s
            state = on_success(state)  # an operator re-enables it
            continue
        assert now - first < policy.disable_after_s
        if verdict is Verdict.PAUSE:
            assert state.consecutive_failures >= policy.failure_threshold
            assert state.paused_until is not None
            pause = state.paused_until - now
            slack = math.ulp(now)  # epoch seconds round the pause by up to one ulp
            assert 0 < pause <= policy.max_pause_s + slack
            assert admission(policy, state, now) is Admission.OPEN
            assert admission(policy, state, state.paused_until) is Admission.PROBING
            expected = min(policy.max_pause_s, policy.base_pause_s
                           * 2 ** (state.consecutive_failures - policy.failure_threshold))
            assert pause == pytest.approx(expected, rel=1e-9, abs=slack)
        else:
            assert state.paused_until == before.paused_until
        if state.paused_until is not None:
            assert state.paused_until - now <= policy.max_pause_s + math.ulp(now)
        if state.consecutive_failures < policy.failure_threshold:
            assert state.paused_until is None
            assert admission(policy, state, now) is Admission.CLOSED
        # The pause never shrinks while the streak lasts.
        if before.paused_until is not None and state.paused_until is not None:
            assert state.paused_until >= before.paused_until
