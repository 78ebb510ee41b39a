"""hookstream's signatures are Standard Webhooks signatures: the `standardwebhooks` package
(the specification's own Python library, which we did not write) verifies what the
dispatcher signs, through a secret rotation too; and our receiver helper accepts what that
library signs. The end-to-end proof, on requests the real dispatcher sent, is in
tests/e2e/test_cli_operator.py."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from hookstream.core.signing import generate_secret, webhook_headers
from hookstream.receiver_kit import verify

BODY = b'{"type": "invoice.paid", "amount_cents": 1250, "note": "caf\\u00e9"}'
ID = "3f1e0c9a-7d5b-4a55-9c1e-2f1e0c9a7d5b"


def test_the_library_verifies_what_the_dispatcher_signs() -> None:
    secret = generate_secret()
    headers = webhook_headers([secret], ID, int(time.time()), BODY)
    assert Webhook(secret).verify(BODY, headers)["amount_cents"] == 1250


def test_during_a_rotation_either_secret_verifies() -> None:
    old, new = generate_secret(), generate_secret()
    headers = webhook_headers([new, old], ID, int(time.time()), BODY)
    assert len(headers["webhook-signature"].split(" ")) == 2
    for secret in (old, new):
        Webhook(secret).verify(BODY, headers)
    with pytest.raises(WebhookVerificationError):
        Webhook(generate_secret()).verify(BODY, headers)


def test_the_library_refuses_what_it_should() -> None:
    secret = generate_secret()
    now = int(time.time())
    with pytest.raises(WebhookVerificationError):  # a changed body
        Webhook(secret).verify(BODY + b" ", webhook_headers([secret], ID, now, BODY))
    with pytest.raises(WebhookVerificationError, match="too old"):  # a replayed capture
        Webhook(secret).verify(BODY, webhook_headers([secret], ID, now - 600, BODY))


def test_our_helper_accepts_what_the_library_signs() -> None:
    secret = generate_secret()
    now = int(time.time())
    signature = Webhook(secret).sign(ID, datetime.fromtimestamp(now, UTC), BODY.decode())
    verify(secret, {"webhook-id": ID, "webhook-timestamp": str(now),
                    "webhook-signature": signature}, BODY, now=now)
