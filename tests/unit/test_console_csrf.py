"""CSRF tokens: bound to one session, compared in constant time."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from hookstream.api.console import csrf

KEY = b"s" * 32
sids = st.text(st.characters(codec="ascii", categories=["L", "N"]), min_size=1, max_size=40)


@given(sid=sids)
def test_the_token_of_the_session_is_valid(sid: str) -> None:
    assert csrf.valid(KEY, sid, csrf.token_for(KEY, sid))


@given(sid=sids, other=sids)
def test_another_sessions_token_is_not(sid: str, other: str) -> None:
    if sid != other:
        assert not csrf.valid(KEY, sid, csrf.token_for(KEY, other))


@given(presented=st.none() | st.text(max_size=300))
def test_anything_else_is_refused(presented: str | None) -> None:
    assert not csrf.valid(KEY, "sid", presented)


def test_another_key_gives_another_token() -> None:
    assert not csrf.valid(KEY, "sid", csrf.token_for(b"t" * 32, "sid"))


def test_cross_site_requests_are_told_apart() -> None:
    assert csrf.cross_site("cross-site")
    assert not any(csrf.cross_site(v) for v in ("same-origin", "same-site", "none", None))
