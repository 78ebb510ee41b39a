"""Portal links and session cookies: signed, expiring, bound to their purpose."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hookstream.controlplane import tokens
from hookstream.controlplane.tokens import Grant, Session, TokenRefused

KEY = b"k" * 32
NOW = 1_800_000_000
tenants = st.from_regex(r"[a-z0-9][a-z0-9_.-]{0,62}", fullmatch=True)


@given(tenant=tenants, ttl=st.integers(1, 10**6), read_only=st.booleans(),
       key_id=st.uuids())
def test_a_grant_verifies_as_signed_until_it_expires(tenant: str, ttl: int, read_only: bool,
                                                      key_id: uuid.UUID) -> None:
    grant = Grant(tenant, NOW + ttl, key_id, read_only)
    token = tokens.sign_grant(KEY, grant)
    assert tokens.verify_grant(KEY, token, NOW) == grant
    assert tokens.verify_grant(KEY, token, NOW + ttl - 1) == grant
    with pytest.raises(TokenRefused) as refused:
        tokens.verify_grant(KEY, token, NOW + ttl)
    assert refused.value.reason == "expired"


@given(data=st.data())
def test_any_change_to_a_token_is_refused(data: st.DataObject) -> None:
    token = tokens.sign_grant(KEY, Grant("acme", NOW + 60, uuid.UUID(int=7)))
    i = data.draw(st.integers(0, len(token) - 1))
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_."
    replacement = data.draw(st.sampled_from(alphabet).filter(lambda c: c != token[i]))
    tampered = token[:i] + replacement + token[i + 1:]
    try:
        got = tokens.verify_grant(KEY, tampered, NOW)
    except TokenRefused as exc:
        assert exc.reason == "invalid"
    else:
        # base64's last character may carry unused bits: a change there can decode to the
        # same bytes, so the same grant (never another one) is all it may give
        assert got == tokens.verify_grant(KEY, token, NOW)


def test_another_key_or_purpose_is_refused() -> None:
    grant = Grant("acme", NOW + 60, uuid.uuid4())
    token = tokens.sign_grant(KEY, grant)
    with pytest.raises(TokenRefused):
        tokens.verify_grant(b"x" * 32, token, NOW)
    # a portal link is not a session cookie, nor the other way round
    with pytest.raises(TokenRefused):
        tokens.verify_session(KEY, token, NOW)
    cookie = tokens.sign_session(KEY, tokens.signed_in(grant))
    with pytest.raises(TokenRefused):
        tokens.verify_grant(KEY, cookie, NOW)


def test_a_token_with_a_grant_for_another_tenant_cannot_be_forged_by_editing_it() -> None:
    token = tokens.sign_grant(KEY, Grant("acme", NOW + 60, uuid.uuid4()))
    payload, _, signature = token.rpartition(".")
    other = tokens.sign_grant(KEY, Grant("globex", NOW + 60, uuid.uuid4()))
    forged = other.rpartition(".")[0] + "." + signature
    with pytest.raises(TokenRefused):
        tokens.verify_grant(KEY, forged, NOW)
    assert payload


@pytest.mark.parametrize("token", ["", "x", "a.b", "." * 10, "a" * 5000])
def test_garbage_is_refused(token: str) -> None:
    with pytest.raises(TokenRefused):
        tokens.verify_grant(KEY, token, NOW)
    with pytest.raises(TokenRefused):
        tokens.verify_session(KEY, token, NOW)


@given(tenant=st.none() | tenants, read_only=st.booleans(), key_id=st.none() | st.uuids(),
       via=st.sampled_from(["", "key", "portal"]))
def test_a_session_round_trips(tenant: str | None, read_only: bool, key_id: uuid.UUID | None,
                               via: str) -> None:
    s = Session(tokens.new_sid(), NOW + 10, key_id, tenant, read_only, via)
    assert tokens.verify_session(KEY, tokens.sign_session(KEY, s), NOW) == s


def test_signing_in_starts_a_new_session_id() -> None:
    before = tokens.anonymous(NOW, 60)
    grant = Grant("acme", NOW + 60, uuid.uuid4(), read_only=True)
    portal = tokens.signed_in(grant)
    assert portal.sid != before.sid and portal.tenant == "acme" and portal.read_only
    assert portal.via == "portal" and portal.expires_at == grant.expires_at
    keyed = tokens.signed_in(key_id=uuid.uuid4(), tenant=None, expires_at=NOW + 5)
    assert keyed.operator and keyed.via == "key" and not keyed.read_only
    assert not before.signed_in and not before.operator
