"""Whatever bytes a receiver answers with become text PostgreSQL can store."""

from __future__ import annotations

from hookstream.dispatcher.attempt import storable
from hypothesis import given
from hypothesis import strategies as st


@given(st.binary(max_size=2048))
def test_any_bytes_decode_to_storable_text(raw: bytes) -> None:
    text = storable(raw.decode("utf-8", "replace"))
    assert "\x00" not in text
    assert all(ord(c) >= 32 or c in "\t\n\r" for c in text)
    text.encode("utf-8")  # valid UTF-8, no lone surrogates


@given(st.text(max_size=600), st.integers(min_value=0, max_value=600))
def test_storable_caps_and_keeps_printable_text(text: str, limit: int) -> None:
    out = storable(text, limit)
    assert len(out) == min(len(text), limit)
    printable = "".join(c for c in text[:limit] if ord(c) >= 32 or c in "\t\n\r")
    assert [c for c in out if c != "\ufffd"] == [c for c in printable if c != "\ufffd"]


def test_a_nul_in_an_answer_is_replaced_not_dropped() -> None:
    assert storable("accepted\x00ok") == "accepted\ufffdok"
