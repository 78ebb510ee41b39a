"""What an attempt's result does to its delivery: pure, so every branch is tested alone.

The dispatcher only carries these values out (row status, retry record, dead letter,
circuit update); it makes no decision of its own.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from enum import StrEnum

from hookstream.policy.backoff import BackoffPolicy, schedule_retry
from hookstream.policy.circuit import CircuitPolicy, CircuitState, Verdict, on_failure, on_success
from hookstream.policy.classify import Decision, ErrorClass, Outcome


class RowStatus(StrEnum):
    DELIVERED = "delivered"
    PENDING = "pending"  # a retry is scheduled
    FAILED = "failed"  # permanent for this endpoint configuration; replayable
    DEAD = "dead"  # retries exhausted (or 413); replayable


@dataclass(frozen=True)
class DeliveryVerdict:
    status: RowStatus
    retry_due_s: float | None  # epoch seconds of the next automatic attempt
    dead_letter: bool


def delivery_verdict(
    decision: Decision,
    *,
    attempt_no: int,
    manual: bool,
    expires_at_s: float,
    now_s: float,
    policy: BackoffPolicy,
    rng: random.Random,
) -> DeliveryVerdict:
    outcome = decision.outcome
    if outcome is Outcome.DELIVERED:
        return DeliveryVerdict(RowStatus.DELIVERED, None, False)
    if outcome is Outcome.DEAD:
        return DeliveryVerdict(RowStatus.DEAD, None, True)
    if outcome in (Outcome.FAILED, Outcome.DISABLE):
        return DeliveryVerdict(RowStatus.FAILED, None, False)
    # RETRY. A manual replay is one extra attempt: it never restarts the automatic
    # schedule, so a failed replay simply leaves the delivery replayable again.
    if manual:
        return DeliveryVerdict(RowStatus.FAILED, None, False)
    due = schedule_retry(policy, attempt_no, expires_at_s - policy.window_s, now_s, rng,
                         decision.retry_after_s)
    if due is None or due > expires_at_s:
        return DeliveryVerdict(RowStatus.DEAD, None, True)
    return DeliveryVerdict(RowStatus.PENDING, due, False)


def counts_against_endpoint(decision: Decision, status_code: int | None) -> bool:
    """Does this result say the endpoint is unhealthy (towards pausing its circuit)?

    429 is the endpoint asking us to slow down, which adaptive throttling answers; it
    must not open the circuit (seed 002's synchronized 429 storm). 413 is about one
    payload, not the endpoint. A refused (SSRF) address is a configuration problem.
    """
    if decision.outcome in (Outcome.DELIVERED, Outcome.DEAD, Outcome.DISABLE):
        return False
    if status_code == 429 or decision.error_class is ErrorClass.BLOCKED_ADDRESS:
        return False
    return True


def is_throttle(status_code: int | None) -> bool:
    return status_code in (429, 503)


def circuit_after(
    decision: Decision, status_code: int | None, state: CircuitState, policy: CircuitPolicy,
    now_s: float,
) -> tuple[CircuitState, Verdict]:
    if decision.outcome is Outcome.DELIVERED:
        return on_success(state), Verdict.NONE
    if counts_against_endpoint(decision, status_code):
        return on_failure(policy, state, now_s)
    return state, Verdict.NONE
