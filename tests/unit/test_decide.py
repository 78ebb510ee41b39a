"""What an attempt's result does to its delivery and to its endpoint's circuit."""

from __future__ import annotations

import random

import pytest
from hookstream.dispatcher.decide import (
    DeliveryVerdict,
    RowStatus,
    circuit_after,
    counts_against_endpoint,
    delivery_verdict,
    is_throttle,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from hookstream.policy.backoff import BackoffPolicy
from hookstream.policy.circuit import CircuitPolicy, CircuitState, Verdict
from hookstream.policy.classify import Decision, ErrorClass, Outcome, classify

NOW = 1_700_000_000.0
BACKOFF = BackoffPolicy()  # 30 s base, 6 h cap, 5 s floor, 24 h window, 15 attempts
FRESH = NOW + BACKOFF.window_s  # first attempt just now
CIRCUIT = CircuitPolicy(failure_threshold=3, base_pause_s=10.0, max_pause_s=80.0,
                        disable_after_s=1000.0)


def verdict(decision: Decision, *, attempt_no: int = 1, manual: bool = False,
            expires_at_s: float = FRESH, now_s: float = NOW,
            policy: BackoffPolicy = BACKOFF, seed: int = 0) -> DeliveryVerdict:
    return delivery_verdict(decision, attempt_no=attempt_no, manual=manual,
                            expires_at_s=expires_at_s, now_s=now_s, policy=policy,
                            rng=random.Random(seed))


def http(status: int, headers: dict[str, str] | None = None) -> Decision:
    return classify(status, None, headers or {}, NOW)


def transport(error: ErrorClass) -> Decision:
    return classify(None, error, {}, NOW)


# --- delivery_verdict, table -------------------------------------------------------------

DONE = DeliveryVerdict(RowStatus.DELIVERED, None, False)
FAILED = DeliveryVerdict(RowStatus.FAILED, None, False)
DEAD = DeliveryVerdict(RowStatus.DEAD, None, True)


@pytest.mark.parametrize(("decision", "expected"), [
    (http(200), DONE),
    (http(204), DONE),
    (http(299), DONE),
    (http(413), DEAD),  # the stored body never shrinks: dead at once, dead-lettered
    (http(400), FAILED),
    (http(401), FAILED),
    (http(403), FAILED),
    (http(404), FAILED),
    (http(422), FAILED),
    (http(410), FAILED),  # the endpoint is disabled elsewhere; this delivery is replayable
    (http(301), FAILED),
    (transport(ErrorClass.BLOCKED_ADDRESS), FAILED),
])
@pytest.mark.parametrize("manual", [False, True])
def test_final_outcomes(decision: Decision, expected: DeliveryVerdict, manual: bool) -> None:
    assert verdict(decision, manual=manual) == expected


RETRYABLE = [
    http(500), http(502), http(503), http(504), http(408), http(429),
    http(503, {"Retry-After": "120"}), http(429, {"retry-after": "5"}),
    transport(ErrorClass.TIMEOUT), transport(ErrorClass.CONNECT), transport(ErrorClass.DNS),
    transport(ErrorClass.TLS), transport(ErrorClass.PROTOCOL),
]


@pytest.mark.parametrize("decision", RETRYABLE)
def test_retryable_is_pending_within_the_window(decision: Decision) -> None:
    v = verdict(decision)
    assert v.status is RowStatus.PENDING
    assert not v.dead_letter
    assert v.retry_due_s is not None
    assert NOW + BACKOFF.floor_s <= v.retry_due_s <= FRESH


@pytest.mark.parametrize("decision", RETRYABLE)
def test_manual_replay_never_schedules_a_retry(decision: Decision) -> None:
    assert verdict(decision, manual=True) == FAILED


def test_first_retry_is_never_immediate() -> None:
    # Jitter drawn at its lowest, a tiny base: the floor still applies.
    tiny = BackoffPolicy(base_s=0.001, floor_s=5.0, cap_s=60.0, jitter=1.0)
    dues = [verdict(http(500), policy=tiny, seed=s).retry_due_s for s in range(200)]
    assert all(d is not None and d >= NOW + 5.0 for d in dues)
    assert verdict(http(429, {"Retry-After": "0"}), policy=tiny).retry_due_s >= NOW + 5.0  # type: ignore[operator]


def test_retry_after_is_honoured() -> None:
    v = verdict(http(429, {"Retry-After": "600"}))
    assert v.retry_due_s is not None and v.retry_due_s >= NOW + 600.0


@pytest.mark.parametrize(("expires_at_s", "expected"), [
    (NOW + 60.0, RowStatus.PENDING),  # the jittered 30 s retry still fits
    (NOW + 29.0, RowStatus.DEAD),  # even the earliest possible retry is past the window
    (NOW + 4.0, RowStatus.DEAD),
    (NOW, RowStatus.DEAD),
    (NOW - 10.0, RowStatus.DEAD),  # the window closed while the attempt ran
])
def test_window(expires_at_s: float, expected: RowStatus) -> None:
    policy = BackoffPolicy(jitter=0.0)  # exactly 30 s after attempt 1
    v = verdict(http(503), expires_at_s=expires_at_s, policy=policy)
    assert v.status is expected
    assert v.dead_letter is (expected is RowStatus.DEAD)
    assert (v.retry_due_s is None) is (expected is RowStatus.DEAD)


def test_retry_after_beyond_the_window_is_dead() -> None:
    v = verdict(http(503, {"Retry-After": "3600"}), expires_at_s=NOW + 600.0)
    assert v == DEAD


@pytest.mark.parametrize(("attempt_no", "expected"), [
    (1, RowStatus.PENDING), (14, RowStatus.PENDING), (15, RowStatus.DEAD), (99, RowStatus.DEAD),
])
def test_max_attempts(attempt_no: int, expected: RowStatus) -> None:
    # Far from the window's end so only the attempt count decides.
    v = verdict(http(500), attempt_no=attempt_no, expires_at_s=NOW + 10 * BACKOFF.window_s,
                policy=BackoffPolicy(window_s=20 * BACKOFF.window_s))
    assert v.status is expected
    assert v.dead_letter is (expected is RowStatus.DEAD)


# --- delivery_verdict, properties --------------------------------------------------------

decisions = st.builds(
    Decision,
    outcome=st.sampled_from(Outcome),
    error_class=st.none() | st.sampled_from(ErrorClass),
    retry_after_s=st.none() | st.floats(0, 1e8),
)


@settings(max_examples=400, deadline=None)
@given(decisions, st.integers(1, 30), st.booleans(), st.floats(-1e5, 2e5),
       st.integers(0, 2**32))
def test_verdict_invariants(decision: Decision, attempt_no: int, manual: bool,
                            window_left_s: float, seed: int) -> None:
    expires = NOW + window_left_s
    v = verdict(decision, attempt_no=attempt_no, manual=manual, expires_at_s=expires, seed=seed)
    assert (v.retry_due_s is not None) is (v.status is RowStatus.PENDING)
    assert v.dead_letter is (v.status is RowStatus.DEAD)
    assert (v.status is RowStatus.DELIVERED) is (decision.outcome is Outcome.DELIVERED)
    if v.status is RowStatus.PENDING:
        assert v.retry_due_s is not None
        assert not manual
        assert decision.outcome is Outcome.RETRY
        assert attempt_no < BACKOFF.max_attempts
        assert NOW + BACKOFF.floor_s <= v.retry_due_s <= expires
        assert v.retry_due_s - NOW <= BACKOFF.cap_s
    if manual:
        assert v.retry_due_s is None
        assert v.status is not RowStatus.PENDING
    if decision.outcome is Outcome.RETRY and not manual:
        assert v.status in (RowStatus.PENDING, RowStatus.DEAD)
    if decision.outcome is Outcome.DEAD:
        assert v == DEAD


# --- counts_against_endpoint, is_throttle -----------------------------------------------


@pytest.mark.parametrize(("decision", "status", "counts"), [
    (http(500), 500, True),
    (http(503), 503, True),
    (http(408), 408, True),
    (http(404), 404, True),
    (http(401), 401, True),
    (http(301), 301, True),
    (transport(ErrorClass.TIMEOUT), None, True),
    (transport(ErrorClass.CONNECT), None, True),
    (http(429), 429, False),  # slow down, not broken: adaptive throttling answers it
    (http(429, {"Retry-After": "30"}), 429, False),
    (transport(ErrorClass.BLOCKED_ADDRESS), None, False),
    (http(413), 413, False),  # about one payload
    (http(410), 410, False),  # disables the endpoint by itself
    (http(200), 200, False),
])
def test_counts_against_endpoint(decision: Decision, status: int | None, counts: bool) -> None:
    assert counts_against_endpoint(decision, status) is counts


@settings(max_examples=200, deadline=None)
@given(decisions)
def test_429_and_blocked_addresses_never_count(decision: Decision) -> None:
    assert not counts_against_endpoint(decision, 429)
    blocked = Decision(decision.outcome, ErrorClass.BLOCKED_ADDRESS, decision.retry_after_s)
    for status in (None, 200, 500):
        assert not counts_against_endpoint(blocked, status)


@pytest.mark.parametrize(("status", "throttle"), [
    (429, True), (503, True), (500, False), (502, False), (200, False), (408, False),
    (None, False),
])
def test_is_throttle(status: int | None, throttle: bool) -> None:
    assert is_throttle(status) is throttle


# --- circuit_after ----------------------------------------------------------------------


def test_success_closes_the_circuit() -> None:
    state = CircuitState(consecutive_failures=7, first_failure_at=NOW - 50, paused_until=NOW)
    assert circuit_after(http(200), 200, state, CIRCUIT, NOW) == (CircuitState(), Verdict.NONE)


def test_server_errors_open_the_circuit() -> None:
    state, verdicts = CircuitState(), []
    for i in range(3):
        state, v = circuit_after(http(500), 500, state, CIRCUIT, NOW + i)
        verdicts.append(v)
    assert verdicts == [Verdict.NONE, Verdict.NONE, Verdict.PAUSE]
    assert state == CircuitState(3, NOW, NOW + 2 + 10.0)


@pytest.mark.parametrize(("decision", "status"), [
    (http(429), 429), (http(429, {"Retry-After": "1"}), 429),
    (transport(ErrorClass.BLOCKED_ADDRESS), None), (http(413), 413), (http(410), 410),
])
def test_results_that_leave_the_circuit_alone(decision: Decision, status: int | None) -> None:
    state = CircuitState(consecutive_failures=2, first_failure_at=NOW - 5000.0)
    for i in range(10):  # a 429 storm never pauses (nor disables) the endpoint
        assert circuit_after(decision, status, state, CIRCUIT, NOW + i) == (state, Verdict.NONE)


def test_continuous_failure_disables() -> None:
    state = CircuitState(consecutive_failures=9, first_failure_at=NOW - 1000.0,
                         paused_until=NOW - 1.0)
    assert circuit_after(http(502), 502, state, CIRCUIT, NOW)[1] is Verdict.DISABLE
