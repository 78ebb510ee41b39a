"""Sealing signing secrets at rest: round trips, key rotation, wrong or missing keys, and
that neither a key nor a secret ever shows in a repr or an error."""

from __future__ import annotations

import base64
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hookstream.core.secretbox import (
    KEY_BYTES,
    NONCE_BYTES,
    Keyring,
    OpenedSecrets,
    SecretKeyError,
    new_key_entry,
    open_sealed,
    parse_keyring,
    seal,
)
from hookstream.core.settings import ApiSettings, DispatcherSettings, SettingsError, from_env

K1 = "k1:" + base64.b64encode(b"\x01" * KEY_BYTES).decode()
K2 = "k2:" + base64.b64encode(b"\x02" * KEY_BYTES).decode()
EP = uuid.UUID("00000000-0000-4000-8000-000000000001").bytes


@given(st.text(), st.binary(max_size=32))
def test_seal_then_open_round_trips(secret: str, context: bytes) -> None:
    ring = parse_keyring(K1)
    key_id, blob = seal(ring, secret, context)
    assert key_id == "k1" and len(blob) == NONCE_BYTES + len(secret.encode()) + 16
    assert open_sealed(ring, key_id, blob, context) == secret


@given(st.text(min_size=8))
def test_the_sealed_bytes_never_contain_the_secret(secret: str) -> None:
    _, blob = seal(parse_keyring(K1), secret, EP)
    assert secret.encode() not in blob


def test_each_seal_draws_a_fresh_nonce() -> None:
    ring = parse_keyring(K1)
    assert seal(ring, "whsec_x", EP)[1] != seal(ring, "whsec_x", EP)[1]


def test_after_key_rotation_old_rows_still_open_and_new_ones_use_the_new_key() -> None:
    old_id, old_blob = seal(parse_keyring(K1), "whsec_old", EP)
    rotated = parse_keyring(f"{K2},{K1}")  # the new key first: it seals; both open
    assert open_sealed(rotated, old_id, old_blob, EP) == "whsec_old"
    new_id, new_blob = seal(rotated, "whsec_new", EP)
    assert new_id == "k2" and open_sealed(parse_keyring(K2), new_id, new_blob, EP) == "whsec_new"


def test_a_dropped_key_is_named_in_the_error() -> None:
    key_id, blob = seal(parse_keyring(K1), "whsec_x", EP)
    with pytest.raises(SecretKeyError, match=r"key id 'k1'.*holds k2"):
        open_sealed(parse_keyring(K2), key_id, blob, EP)


def test_a_wrong_key_under_the_same_id_is_refused_clearly() -> None:
    key_id, blob = seal(parse_keyring(K1), "whsec_x", EP)
    impostor = parse_keyring("k1:" + K2.partition(":")[2])
    with pytest.raises(SecretKeyError, match="does not open") as refused:
        open_sealed(impostor, key_id, blob, EP)
    assert K2.partition(":")[2] not in str(refused.value)


def test_a_sealed_secret_is_bound_to_its_endpoint() -> None:
    ring = parse_keyring(K1)
    key_id, blob = seal(ring, "whsec_x", EP)
    with pytest.raises(SecretKeyError):
        open_sealed(ring, key_id, blob, uuid.uuid4().bytes)


@pytest.mark.parametrize("raw, message", [
    ("k1", "not id:base64key"),
    ("bad id:AAAA", "not id:base64key"),
    ("k1:not base64!", "not valid base64"),
    ("k1:" + base64.b64encode(b"short").decode(), "5 bytes, expected 32"),
    (f"{K1},{K1}", "appears twice"),
])
def test_malformed_keyrings_are_refused_without_echoing_keys(raw: str, message: str) -> None:
    with pytest.raises(SecretKeyError, match=message) as refused:
        parse_keyring(raw)
    assert K1.partition(":")[2] not in str(refused.value)


def test_an_empty_keyring_cannot_seal() -> None:
    assert parse_keyring("  ") == Keyring()
    with pytest.raises(SecretKeyError, match="empty"):
        seal(Keyring(), "whsec_x", EP)


def test_new_key_entries_parse() -> None:
    ring = parse_keyring(new_key_entry("2026-12"))
    assert ring.ids == ("2026-12",) and len(ring.key("2026-12")) == KEY_BYTES


def test_settings_never_show_the_key() -> None:
    for cls in (ApiSettings, DispatcherSettings):
        settings = from_env(cls, {"HOOKSTREAM_SECRET_KEYS": f"{K2} {K1}"})
        assert settings.secret_keys.ids == ("k2", "k1")
        assert K1.partition(":")[2] not in repr(settings)
    bad = "k1:" + base64.b64encode(b"sixteen bytes!!!").decode()
    with pytest.raises(SettingsError, match="HOOKSTREAM_SECRET_KEYS=<hidden> is invalid") as e:
        from_env(ApiSettings, {"HOOKSTREAM_SECRET_KEYS": bad})
    assert bad.partition(":")[2] not in str(e.value)


def test_opened_secrets_opens_each_version_once_and_accepts_legacy_plaintext() -> None:
    ring = parse_keyring(K1)
    endpoint = uuid.UUID(bytes=EP)
    _, blob = seal(ring, "whsec_new", EP)
    opened = OpenedSecrets(ring)
    assert opened.secrets(endpoint, [2, 1], ["k1", None], [blob, b"whsec_legacy"]) == [
        "whsec_new", "whsec_legacy"]
    # cached: a later claim with garbage bytes for the same versions is not re-opened
    assert opened.secrets(endpoint, [2], ["k1"], [b"x"]) == ["whsec_new"]
    assert opened.secrets(endpoint, None, None, None) == []
