"""The real dispatcher signs with secrets sealed at rest: a row from before migration 0011
(still plaintext), a row sealed with a key that has since been rotated out of first
place, and a row of the current key all verify at a receiver; re-encryption while the
services run changes nothing a receiver sees."""

from __future__ import annotations

import base64

import psycopg

from hookstream.core.secretbox import KEY_BYTES, parse_keyring
from hookstream.core.signing import generate_secret
from hookstream.dev.receiver import Receiver
from hookstream.endpoints import create_endpoint
from hookstream.ops.secret_keys import reencrypt
from hookstream.outbox import write_event
from tests.e2e.conftest import StartPipeline
from tests.helpers import query, wait_until

OLD = "old:" + base64.b64encode(b"\x31" * KEY_BYTES).decode()
NEW = "new:" + base64.b64encode(b"\x32" * KEY_BYTES).decode()


def _legacy(db_url: str, receiver: Receiver) -> None:
    secret = generate_secret()
    with psycopg.connect(db_url) as conn:
        (endpoint_id,), = conn.execute(
            "INSERT INTO endpoints (tenant, url) VALUES ('acme', %s) RETURNING id",
            (receiver.url("legacy"),)).fetchall()
        conn.execute("INSERT INTO endpoint_secrets (endpoint_id, version, secret)"
                     " VALUES (%s, 1, %s)", (endpoint_id, secret))
    receiver.add("legacy", secret)


def _sealed(db_url: str, receiver: Receiver, name: str, keys: str) -> None:
    with psycopg.connect(db_url) as conn:
        ep = create_endpoint(conn, tenant="acme", url=receiver.url(name), allow_insecure=True,
                             keyring=parse_keyring(keys))
    receiver.add(name, ep.secret)


def _send(db_url: str, n: int) -> None:
    with psycopg.connect(db_url) as conn:
        for i in range(n):
            write_event(conn, tenant="acme", type="invoice.paid", payload={"i": i})


def test_plaintext_old_key_and_new_key_rows_all_verify(
        db_url: str, receiver: Receiver, start_pipeline: StartPipeline) -> None:
    _legacy(db_url, receiver)
    _sealed(db_url, receiver, "old-key", OLD)
    _sealed(db_url, receiver, "new-key", f"{NEW},{OLD}")
    start_pipeline(env={"HOOKSTREAM_SECRET_KEYS": f"{NEW},{OLD}"})
    _send(db_url, 2)
    wait_until(lambda: len(receiver.delivered_ids()) >= 6, 60, message="6 deliveries")
    assert reencrypt(db_url, parse_keyring(f"{NEW},{OLD}")) == 2  # legacy + old-key rows
    assert query(db_url, "SELECT DISTINCT secret_key_id, secret IS NULL"
                         " FROM endpoint_secrets") == [("new", True)]
    _send(db_url, 2)
    wait_until(lambda: len(receiver.delivered_ids()) >= 12, 60, message="12 deliveries")
    assert all(a.verified for a in receiver.arrivals)
    assert query(db_url, "SELECT status, count(*) FROM deliveries GROUP BY 1") == [
        ("delivered", 12)]
