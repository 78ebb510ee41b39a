"""For the people who receive hookstream's webhooks: verify a request in three lines.

    from hookstream.receiver_kit import verify, VerificationError
    verify(secret, request.headers, raw_body, now=int(time.time()))  # raises if not genuine

Standard Webhooks compatible (any of its libraries verifies our requests too). The
clock is an argument so a receiver's tests can pin it; the default tolerance is the
5 minutes the specification recommends. Deduplicate by the ``webhook-id`` header: it is
the delivery id, stable across retries and replays. See docs/receiving-webhooks.md.
"""

from hookstream.core.signing import DEFAULT_TOLERANCE_S, VerificationError, verify

__all__ = ["DEFAULT_TOLERANCE_S", "VerificationError", "verify"]
