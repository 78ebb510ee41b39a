"""Signing secrets at rest (migration 0011): what a dump of endpoint_secrets shows, the
re-encryption of rows from before the migration, a master-key rotation, and the start-up
refusal of a missing or wrong key."""

from __future__ import annotations

import base64
import os
import subprocess
import sys
import uuid

import psycopg

from hookstream.core.secretbox import KEY_BYTES, OpenedSecrets, parse_keyring
from hookstream.core.signing import generate_secret, verify, webhook_headers
from hookstream.endpoints import create_endpoint
from hookstream.ops.secret_keys import reencrypt, startup_check
from tests.helpers import query

OLD = "old:" + base64.b64encode(b"\x11" * KEY_BYTES).decode()
NEW = "new:" + base64.b64encode(b"\x22" * KEY_BYTES).decode()


def _dump(db_url: str) -> str:
    """Every column of every row, as a backup or a replica would hold it."""
    return repr(query(db_url, "SELECT * FROM endpoint_secrets"))


def _signing(db_url: str, endpoint_id: uuid.UUID, keys: str) -> list[str]:
    rows = query(db_url, "SELECT version, secret_key_id,"
                         " coalesce(secret_sealed, convert_to(secret, 'UTF8'))"
                         " FROM endpoint_secrets WHERE endpoint_id = %s ORDER BY version DESC",
                 (endpoint_id,))
    return OpenedSecrets(parse_keyring(keys)).secrets(
        endpoint_id, [r[0] for r in rows], [r[1] for r in rows], [bytes(r[2]) for r in rows])


def _legacy_endpoint(db_url: str) -> tuple[uuid.UUID, str]:
    """An endpoint as it was stored before migration 0011: the secret in plaintext."""
    secret = generate_secret()
    with psycopg.connect(db_url) as conn:
        (endpoint_id,), = conn.execute(
            "INSERT INTO endpoints (tenant, url) VALUES ('acme', 'https://a.example/h')"
            " RETURNING id").fetchall()
        conn.execute("INSERT INTO endpoint_secrets (endpoint_id, version, secret)"
                     " VALUES (%s, 1, %s)", (endpoint_id, secret))
    return endpoint_id, secret


def test_a_dump_of_the_table_holds_no_secret(db_url: str) -> None:
    with psycopg.connect(db_url) as conn:
        made = [create_endpoint(conn, tenant="acme", url=f"https://{n}.example/h",
                                keyring=parse_keyring(OLD)) for n in "abc"]
    dump = _dump(db_url)
    for ep in made:
        assert ep.secret not in dump
        assert ep.secret.removeprefix("whsec_") not in dump
        assert _signing(db_url, ep.endpoint_id, OLD) == [ep.secret]


def test_reencrypt_seals_plaintext_rows_and_a_receiver_still_verifies(db_url: str) -> None:
    endpoint_id, secret = _legacy_endpoint(db_url)
    assert secret in _dump(db_url)
    # before the re-encryption the readers accept the plaintext row as it is
    assert _signing(db_url, endpoint_id, OLD) == [secret]
    assert reencrypt(db_url, parse_keyring(OLD), batch=1) == 1
    assert secret not in _dump(db_url)
    assert query(db_url, "SELECT secret, secret_key_id FROM endpoint_secrets") == [(None, "old")]
    signed = _signing(db_url, endpoint_id, OLD)
    headers = webhook_headers(signed, "msg_1", 1_700_000_000, b"{}")
    verify(secret, headers, b"{}", now=1_700_000_000)  # what a receiver does
    assert reencrypt(db_url, parse_keyring(OLD)) == 0  # idempotent


def test_master_key_rotation_old_rows_open_then_are_resealed(db_url: str) -> None:
    with psycopg.connect(db_url) as conn:
        ep = create_endpoint(conn, tenant="acme", url="https://a.example/h",
                             keyring=parse_keyring(OLD))
    rotated = f"{NEW},{OLD}"
    # the new key first: rows of the old one still open
    assert _signing(db_url, ep.endpoint_id, rotated) == [ep.secret]
    assert startup_check("dispatcher", db_url, parse_keyring(rotated)) is None
    assert reencrypt(db_url, parse_keyring(rotated)) == 1
    assert query(db_url, "SELECT secret_key_id FROM endpoint_secrets") == [("new",)]
    # the old key can now be dropped from the setting
    assert _signing(db_url, ep.endpoint_id, NEW) == [ep.secret]
    assert startup_check("dispatcher", db_url, parse_keyring(NEW)) is None


def test_a_missing_or_wrong_key_is_one_clear_refusal_at_start(db_url: str) -> None:
    with psycopg.connect(db_url) as conn:
        create_endpoint(conn, tenant="acme", url="https://a.example/h",
                        keyring=parse_keyring(OLD))
    assert "HOOKSTREAM_SECRET_KEYS is not set" in (
        startup_check("dispatcher", db_url, parse_keyring("")) or "")
    dropped = startup_check("dispatcher", db_url, parse_keyring(NEW)) or ""
    assert "key id 'old'" in dropped and "holds new" in dropped
    impostor = "old:" + NEW.partition(":")[2]
    wrong = startup_check("fanout", db_url, parse_keyring(impostor)) or ""
    assert "does not open" in wrong and NEW.partition(":")[2] not in wrong


def test_the_dispatcher_process_refuses_a_wrong_key_and_exits_2(db_url: str) -> None:
    with psycopg.connect(db_url) as conn:
        create_endpoint(conn, tenant="acme", url="https://a.example/h",
                        keyring=parse_keyring(OLD))
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOOKSTREAM_")}
    # the check comes before the service binds its port or reaches Kafka
    env.update(HOOKSTREAM_DATABASE_URL=db_url, HOOKSTREAM_SECRET_KEYS=NEW)
    done = subprocess.run([sys.executable, "-m", "hookstream.cli", "dispatcher"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "HOOKSTREAM_SECRET_KEYS" in done.stdout and "key id 'old'" in done.stdout
    assert NEW.partition(":")[2] not in done.stdout + done.stderr
