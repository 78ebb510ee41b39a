"""Standard Webhooks signing and verification (https://www.standardwebhooks.com/).

Pure: the clock comes in as ``now`` and the random source as ``randbytes``, so every
edge (tolerance, rotation, tampering) is testable without patching.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hmac
from collections.abc import Callable, Mapping, Sequence
from secrets import token_bytes

SECRET_PREFIX = "whsec_"
SIGNATURE_VERSION = "v1"
DEFAULT_TOLERANCE_S = 300
DEFAULT_SECRET_BYTES = 32
# The spec asks for 24 to 64 random bytes; fewer weakens the HMAC key, more buys nothing.
MIN_SECRET_BYTES = 24
MAX_SECRET_BYTES = 64

HEADER_ID = "webhook-id"
HEADER_TIMESTAMP = "webhook-timestamp"
HEADER_SIGNATURE = "webhook-signature"


class VerificationError(Exception):
    """A webhook failed verification; ``reason`` says which check refused it."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def generate_secret(
    randbytes: Callable[[int], bytes] = token_bytes, *, size: int = DEFAULT_SECRET_BYTES
) -> str:
    if not MIN_SECRET_BYTES <= size <= MAX_SECRET_BYTES:
        raise ValueError(
            f"size must be between {MIN_SECRET_BYTES} and {MAX_SECRET_BYTES} bytes, got {size}"
        )
    raw = randbytes(size)
    # A short read from a custom source would silently weaken every signature.
    if len(raw) != size:
        raise ValueError(f"randbytes returned {len(raw)} bytes, expected {size}")
    return SECRET_PREFIX + base64.b64encode(raw).decode("ascii")


def decode_secret(secret: str) -> bytes:
    encoded = secret.removeprefix(SECRET_PREFIX)
    if not encoded:
        raise ValueError("webhook secret is empty")
    try:
        key = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ValueError(f"webhook secret is not valid base64: {exc}") from None
    if not key:
        raise ValueError("webhook secret decodes to no bytes")
    return key


@functools.lru_cache(maxsize=16_384)
def _key(secret: str) -> bytes:
    # Every attempt signs with the same few secrets: decode each once. A malformed
    # secret raises and is not cached.
    return decode_secret(secret)


def sign(secret: str, msg_id: str, timestamp: int, body: bytes) -> str:
    signed = f"{msg_id}.{timestamp}.".encode() + body
    # hmac.digest is OpenSSL's one-shot HMAC: no Python HMAC object per signature.
    digest = hmac.digest(_key(secret), signed, "sha256")
    return f"{SIGNATURE_VERSION},{base64.b64encode(digest).decode('ascii')}"


def signature_header(secrets: Sequence[str], msg_id: str, timestamp: int, body: bytes) -> str:
    # A bare str is a Sequence[str] too; signing each character would be a silent disaster.
    if isinstance(secrets, str):
        raise TypeError("secrets must be a sequence of secrets, not a single str")
    if not secrets:
        raise ValueError("at least one secret is required to sign")
    return " ".join(sign(secret, msg_id, timestamp, body) for secret in secrets)


def webhook_headers(
    secrets: Sequence[str], msg_id: str, timestamp: int, body: bytes
) -> dict[str, str]:
    return {
        HEADER_ID: msg_id,
        HEADER_TIMESTAMP: str(timestamp),
        HEADER_SIGNATURE: signature_header(secrets, msg_id, timestamp, body),
    }


def verify(
    secret: str,
    headers: Mapping[str, str],
    body: bytes,
    *,
    now: int,
    tolerance_s: int = DEFAULT_TOLERANCE_S,
) -> None:
    if tolerance_s < 0:
        raise ValueError(f"tolerance_s must be >= 0, got {tolerance_s}")
    lowered = {name.lower(): value for name, value in headers.items()}
    msg_id = _required(lowered, HEADER_ID)
    raw_timestamp = _required(lowered, HEADER_TIMESTAMP)
    signatures = _required(lowered, HEADER_SIGNATURE)

    # ASCII digits only: int() would also take "+5", " 5" or Unicode digits, and would
    # raise on thousands of digits (int max str digits).
    if not (raw_timestamp.isascii() and raw_timestamp.isdigit() and len(raw_timestamp) <= 20):
        raise VerificationError(f"invalid {HEADER_TIMESTAMP} header")
    timestamp = int(raw_timestamp)
    if now - timestamp > tolerance_s:
        raise VerificationError("timestamp too old")
    if timestamp - now > tolerance_s:
        raise VerificationError("timestamp too new")

    expected = sign(secret, msg_id, timestamp, body).partition(",")[2].encode("ascii")
    for candidate in signatures.split(" "):
        version, sep, value = candidate.partition(",")
        # Other versions (e.g. v1a asymmetric) are for other verifiers; skipping them
        # keeps the header forward compatible.
        if (
            sep
            and version == SIGNATURE_VERSION
            and hmac.compare_digest(expected, value.encode("utf-8", "surrogatepass"))
        ):
            return
    raise VerificationError("no matching signature")


def _required(headers: Mapping[str, str], name: str) -> str:
    value = headers.get(name)
    if not value:
        raise VerificationError(f"missing {name} header")
    return value
