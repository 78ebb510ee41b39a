"""Authorisation and state rules of the control plane (pure)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from hookstream.controlplane import auth, rules
from hookstream.controlplane.errors import ApiError

NOW = datetime(2025, 6, 1, tzinfo=UTC)
OPERATOR = auth.Principal(uuid.uuid4(), None)
ACME = auth.Principal(uuid.uuid4(), "acme")


def test_scope_is_the_keys_tenant_or_everything_for_an_operator() -> None:
    assert auth.tenant_scope(ACME) == "acme" and auth.tenant_scope(OPERATOR) is None
    assert ACME.operator is False and OPERATOR.operator is True


def test_acting_tenant() -> None:
    assert auth.acting_tenant(ACME, None) == "acme"
    assert auth.acting_tenant(ACME, "acme") == "acme"
    assert auth.acting_tenant(OPERATOR, "globex") == "globex"
    for principal, requested in [(ACME, "globex"), (OPERATOR, None)]:
        with pytest.raises(ApiError) as info:
            auth.acting_tenant(principal, requested)
        assert (info.value.status, info.value.field) == (400, "tenant")
    assert auth.listing_tenant(OPERATOR, None) is None
    assert auth.listing_tenant(ACME, None) == "acme"


def test_operator_only() -> None:
    auth.require_operator(OPERATOR)
    with pytest.raises(ApiError) as info:
        auth.require_operator(ACME)
    assert info.value.status == 403


@pytest.mark.parametrize("header", [None, "", "Bearer", "Bearer ", "Basic hsk_x", "hsk_x",
                                    "Bearer nothsk", "Bearer hsk_" + "x" * 300])
def test_bad_authorization_headers_are_401(header: str | None) -> None:
    with pytest.raises(ApiError) as info:
        auth.bearer_token(header)
    assert info.value.status == 401


def test_tokens_are_random_and_only_their_hash_is_comparable() -> None:
    a, b = auth.new_token(), auth.new_token()
    assert a != b and a.startswith("hsk_") and len(a) >= 40
    assert auth.bearer_token(f"bearer  {a} ") == a
    assert auth.hash_token(a) != auth.hash_token(b) and len(auth.hash_token(a)) == 32
    assert auth.display_prefix(a) == a[:12]


@pytest.mark.parametrize(("current", "action", "target"), [
    ("active", "pause", "paused"), ("paused", "pause", "paused"),
    ("active", "disable", "disabled"), ("paused", "disable", "disabled"),
    ("disabled", "enable", "active"), ("paused", "enable", "active"),
])
def test_transitions(current: str, action: str, target: str) -> None:
    assert rules.next_status(current, action) == target


def test_a_disabled_endpoint_is_not_paused_without_enabling_first() -> None:
    with pytest.raises(ApiError) as info:
        rules.next_status("disabled", "pause")
    assert info.value.status == 409


@pytest.mark.parametrize(("delivery", "endpoint", "refused"), [
    ("dead", "active", False), ("failed", "paused", False), ("delivered", "active", False),
    ("superseded", "active", False), ("pending", "active", True), ("in_flight", "active", True),
    ("dead", "disabled", True),
])
def test_replay_refusals(delivery: str, endpoint: str, refused: bool) -> None:
    refusal = rules.replay_refusal(delivery, endpoint)
    assert (refusal is not None) == refused
    assert refusal is None or refusal.status == 409


def test_the_current_secret_cannot_be_revoked_only_rotated() -> None:
    assert rules.revoke_refusal(1, [1, 2]) is None
    refusal = rules.revoke_refusal(2, [1, 2])
    assert refusal is not None and refusal.status == 409
    assert rules.revoke_refusal(5, [1]) is None  # not active: the caller answers 404


@pytest.mark.parametrize(("status", "paused_until", "failures", "state"), [
    ("active", None, 0, "closed"),
    ("active", NOW + timedelta(minutes=1), 5, "open"),
    ("active", NOW - timedelta(minutes=1), 5, "half_open"),
    ("paused", None, 0, "paused"),
    ("paused", NOW + timedelta(hours=1), 0, "open"),
    ("disabled", None, 50, "disabled"),
])
def test_circuit_state(status: str, paused_until: datetime | None, failures: int,
                       state: str) -> None:
    assert rules.circuit_state(status, paused_until, failures, NOW) == state


def test_success_rate() -> None:
    assert rules.success_rate(0, 0) is None
    assert rules.success_rate(1, 3) == 0.3333
