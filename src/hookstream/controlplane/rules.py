"""Decisions of the control plane as pure functions: endpoint state changes, whether a
delivery may be replayed, whether a secret may be revoked, the circuit state shown in
the health view."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from hookstream.controlplane.errors import ApiError, conflict
from hookstream.controlplane.validation import REPLAYABLE

# action -> (statuses it may start from, status it leads to)
TRANSITIONS: dict[str, tuple[frozenset[str], str]] = {
    "pause": (frozenset({"active", "paused"}), "paused"),
    "disable": (frozenset({"active", "paused", "disabled"}), "disabled"),
    "enable": (frozenset({"active", "paused", "disabled"}), "active"),
}


def next_status(current: str, action: str) -> str:
    allowed_from, target = TRANSITIONS[action]
    if current not in allowed_from:
        raise conflict(f"cannot {action} an endpoint that is {current}; enable it first",
                       "status")
    return target


def replay_refusal(delivery_status: str, endpoint_status: str) -> ApiError | None:
    if endpoint_status == "disabled":
        return conflict("the endpoint is disabled; enable it before replaying")
    if delivery_status not in REPLAYABLE:
        return conflict(f"the delivery is {delivery_status}: it is already queued or being"
                        " attempted", "status")
    return None


def revoke_refusal(version: int, active_versions: Sequence[int]) -> ApiError | None:
    """The newest secret is the one being signed with: replace it by rotating (with
    ``overlap_s: 0`` for a compromised key), never leave an endpoint without a secret."""
    if version not in active_versions:
        return None  # handled as not found by the caller
    if version == max(active_versions):
        return conflict("this is the current secret; rotate with overlap_s 0 to replace it"
                        " at once", "version")
    return None


def circuit_state(status: str, paused_until: datetime | None, consecutive_failures: int,
                  now: datetime) -> str:
    """closed, open (paused by failures until a time), half_open (pause over, probing after
    failures), paused (by an operator, no end) or disabled."""
    if status == "disabled":
        return "disabled"
    if paused_until is not None and paused_until > now:
        return "open"
    if status == "paused":
        return "paused" if paused_until is None else "half_open"
    if consecutive_failures > 0 and paused_until is not None:
        return "half_open"
    return "closed"


def success_rate(delivered: int, finished: int) -> float | None:
    return None if finished == 0 else round(delivered / finished, 4)
