from __future__ import annotations

import base64

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hookstream.core.signing import (
    VerificationError,
    decode_secret,
    generate_secret,
    sign,
    signature_header,
    verify,
    webhook_headers,
)

# Official Standard Webhooks test vector.
SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
MSG_ID = "msg_p5jXN8AQM9LWM0D4loKWxJek"
TIMESTAMP = 1614265330
BODY = b'{"test": 2432232314}'
EXPECTED = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
OTHER_SECRET = "whsec_" + base64.b64encode(b"\x01" * 32).decode()


def headers(sig: str = EXPECTED, msg_id: str = MSG_ID, ts: str = str(TIMESTAMP)) -> dict[str, str]:
    return {"webhook-id": msg_id, "webhook-timestamp": ts, "webhook-signature": sig}


# --- signing ---------------------------------------------------------------


def test_official_vector() -> None:
    assert sign(SECRET, MSG_ID, TIMESTAMP, BODY) == EXPECTED


def test_secret_without_prefix_signs_the_same() -> None:
    assert sign(SECRET.removeprefix("whsec_"), MSG_ID, TIMESTAMP, BODY) == EXPECTED


def test_webhook_headers() -> None:
    assert webhook_headers([SECRET], MSG_ID, TIMESTAMP, BODY) == {
        "webhook-id": MSG_ID,
        "webhook-timestamp": "1614265330",
        "webhook-signature": EXPECTED,
    }


def test_rotation_emits_one_signature_per_secret_in_order() -> None:
    header = signature_header([SECRET, OTHER_SECRET], MSG_ID, TIMESTAMP, BODY)
    first, second = header.split(" ")
    assert first == EXPECTED
    assert second == sign(OTHER_SECRET, MSG_ID, TIMESTAMP, BODY)
    assert second != first


def test_signature_header_requires_a_secret() -> None:
    with pytest.raises(ValueError, match="at least one secret"):
        signature_header([], MSG_ID, TIMESTAMP, BODY)


def test_signature_header_refuses_a_bare_string() -> None:
    with pytest.raises(TypeError):
        signature_header(SECRET, MSG_ID, TIMESTAMP, BODY)


# --- secrets ---------------------------------------------------------------


def test_generate_secret_uses_the_given_random_source() -> None:
    secret = generate_secret(lambda n: bytes(range(n)))
    assert secret.startswith("whsec_")
    assert decode_secret(secret) == bytes(range(32))


@pytest.mark.parametrize("size", [24, 32, 64])
def test_generate_secret_sizes(size: int) -> None:
    assert len(decode_secret(generate_secret(size=size))) == size


@pytest.mark.parametrize("size", [0, 23, 65])
def test_generate_secret_refuses_weak_or_odd_sizes(size: int) -> None:
    with pytest.raises(ValueError, match="size"):
        generate_secret(size=size)


def test_generate_secret_refuses_short_random_read() -> None:
    with pytest.raises(ValueError, match="randbytes returned 3 bytes"):
        generate_secret(lambda n: b"abc")


def test_default_generated_secrets_differ() -> None:
    assert generate_secret() != generate_secret()


def test_decode_secret_with_and_without_prefix() -> None:
    raw = base64.b64decode("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
    assert decode_secret(SECRET) == raw
    assert decode_secret("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw") == raw


@pytest.mark.parametrize(
    "bad",
    [
        "whsec_not base64!",
        "whsec_abc",
        "whsec_",
        "",
        "whsec_=====",
        # A stray character must not be silently dropped into a valid-looking key.
        "whsec_MfKQ9r8G*KYqrTwjUPD8ILPZIo2LaLaSw",
        "whsec_MfKQ9r8G KYqrTwjUPD8ILPZIo2LaLaSw",
    ],
)
def test_decode_secret_rejects_bad_base64(bad: str) -> None:
    with pytest.raises(ValueError, match="webhook secret"):
        decode_secret(bad)


# --- verification ----------------------------------------------------------


def test_verify_accepts_the_official_vector() -> None:
    verify(SECRET, headers(), BODY, now=TIMESTAMP)


def test_verify_header_names_are_case_insensitive() -> None:
    mixed = {
        "Webhook-Id": MSG_ID,
        "WEBHOOK-TIMESTAMP": str(TIMESTAMP),
        "webhook-Signature": EXPECTED,
    }
    verify(SECRET, mixed, BODY, now=TIMESTAMP)


@pytest.mark.parametrize("missing", ["webhook-id", "webhook-timestamp", "webhook-signature"])
def test_verify_missing_header(missing: str) -> None:
    h = headers()
    del h[missing]
    with pytest.raises(VerificationError) as info:
        verify(SECRET, h, BODY, now=TIMESTAMP)
    assert info.value.reason == f"missing {missing} header"


def test_verify_empty_header_counts_as_missing() -> None:
    with pytest.raises(VerificationError, match="missing webhook-signature"):
        verify(SECRET, headers(sig=""), BODY, now=TIMESTAMP)


@pytest.mark.parametrize(
    ("now", "ok"),
    [
        (TIMESTAMP, True),
        (TIMESTAMP + 300, True),
        (TIMESTAMP - 300, True),
        (TIMESTAMP + 301, False),
        (TIMESTAMP - 301, False),
    ],
)
def test_verify_tolerance_edges(now: int, ok: bool) -> None:
    if ok:
        verify(SECRET, headers(), BODY, now=now)
    else:
        with pytest.raises(VerificationError, match="timestamp too"):
            verify(SECRET, headers(), BODY, now=now)


def test_verify_reports_old_and_new_distinctly() -> None:
    with pytest.raises(VerificationError) as old:
        verify(SECRET, headers(), BODY, now=TIMESTAMP + 1000)
    with pytest.raises(VerificationError) as new:
        verify(SECRET, headers(), BODY, now=TIMESTAMP - 1000)
    assert old.value.reason == "timestamp too old"
    assert new.value.reason == "timestamp too new"


def test_verify_custom_tolerance() -> None:
    verify(SECRET, headers(), BODY, now=TIMESTAMP + 10, tolerance_s=10)
    with pytest.raises(VerificationError, match="too old"):
        verify(SECRET, headers(), BODY, now=TIMESTAMP + 11, tolerance_s=10)


def test_verify_rejects_negative_tolerance() -> None:
    with pytest.raises(ValueError, match="tolerance_s"):
        verify(SECRET, headers(), BODY, now=TIMESTAMP, tolerance_s=-1)


@pytest.mark.parametrize(
    "ts", ["abc", "-1614265330", "+1614265330", " 1614265330", "1.5", "٣", "9" * 5000]
)
def test_verify_invalid_timestamp(ts: str) -> None:
    with pytest.raises(VerificationError, match="invalid webhook-timestamp"):
        verify(SECRET, headers(ts=ts), BODY, now=TIMESTAMP)


def test_verify_rejects_tampered_body() -> None:
    with pytest.raises(VerificationError, match="no matching signature"):
        verify(SECRET, headers(), BODY + b" ", now=TIMESTAMP)


def test_verify_rejects_tampered_id() -> None:
    with pytest.raises(VerificationError, match="no matching signature"):
        verify(SECRET, headers(msg_id=MSG_ID + "x"), BODY, now=TIMESTAMP)


def test_verify_rejects_tampered_timestamp() -> None:
    with pytest.raises(VerificationError, match="no matching signature"):
        verify(SECRET, headers(ts=str(TIMESTAMP + 1)), BODY, now=TIMESTAMP)


def test_verify_rejects_wrong_secret() -> None:
    with pytest.raises(VerificationError, match="no matching signature"):
        verify(OTHER_SECRET, headers(), BODY, now=TIMESTAMP)


@pytest.mark.parametrize("secret", [SECRET, OTHER_SECRET])
def test_verify_accepts_either_secret_during_rotation(secret: str) -> None:
    h = webhook_headers([SECRET, OTHER_SECRET], MSG_ID, TIMESTAMP, BODY)
    verify(secret, h, BODY, now=TIMESTAMP)


def test_verify_accepts_any_matching_signature_among_garbage() -> None:
    sig = f"v1,bm9wZQ== v1a,{EXPECTED[3:]} junk v2,xyz {EXPECTED}"
    verify(SECRET, headers(sig=sig), BODY, now=TIMESTAMP)


@pytest.mark.parametrize(
    "sig",
    [
        EXPECTED[3:],  # no version prefix
        "v1a," + EXPECTED[3:],  # right digest, other version
        "v2," + EXPECTED[3:],
        "v1," + EXPECTED[3:-1],  # truncated
        "v1,ü" + EXPECTED[4:],  # non-ASCII must not crash compare_digest
    ],
)
def test_verify_ignores_other_versions_and_malformed(sig: str) -> None:
    with pytest.raises(VerificationError, match="no matching signature"):
        verify(SECRET, headers(sig=sig), BODY, now=TIMESTAMP)


@settings(max_examples=50, deadline=None)
@given(
    raw=st.binary(min_size=24, max_size=64),
    msg_id=st.text(min_size=1, max_size=40),
    timestamp=st.integers(min_value=0, max_value=2**40),
    body=st.binary(max_size=256),
    skew=st.integers(min_value=-300, max_value=300),
)
def test_round_trip(raw: bytes, msg_id: str, timestamp: int, body: bytes, skew: int) -> None:
    secret = generate_secret(lambda n: raw[:n], size=len(raw))
    h = webhook_headers([secret], msg_id, timestamp, body)
    verify(secret, h, body, now=timestamp + skew)


@settings(max_examples=50, deadline=None)
@given(body=st.binary(max_size=64), flip=st.integers(min_value=0, max_value=63))
def test_any_single_bit_flip_in_body_is_detected(body: bytes, flip: int) -> None:
    h = webhook_headers([SECRET], MSG_ID, TIMESTAMP, body)
    tampered = bytearray(body or b"\x00")
    tampered[flip % len(tampered)] ^= 0x01
    if bytes(tampered) == body:
        return
    with pytest.raises(VerificationError, match="no matching signature"):
        verify(SECRET, h, bytes(tampered), now=TIMESTAMP)
