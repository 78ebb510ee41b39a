"""Signing secrets at rest, operations: the start-up check of HOOKSTREAM_SECRET_KEYS and
the re-encryption of plaintext rows (from before migration 0011) and of rows sealed with
an older key (after a key rotation).

Re-encryption is a command (``hookstream secrets reencrypt``), not part of the migration:
the key then never travels to PostgreSQL (no statement, log line or pg_stat_statements
entry holds it), migrations stay plain SQL that needs no key, and the same command serves
every later key rotation. Readers accept plaintext rows meanwhile, so services can be
upgraded first and the command run while they deliver."""

from __future__ import annotations

import logging
from typing import Any

import psycopg
from psycopg.rows import dict_row

from hookstream.core.secretbox import Keyring, SecretKeyError, open_sealed, seal
from hookstream.ops import secrets_store as store

log = logging.getLogger(__name__)


def check_keyring(conn: psycopg.Connection[Any], keyring: Keyring) -> int:
    """Raise SecretKeyError unless ``keyring`` has a sealing key and opens one secret of
    every key id in use; returns how many rows are still plaintext."""
    keyring.current_id  # noqa: B018 -- raises when the keyring is empty
    for row in store.sample_per_key(conn):
        endpoint_id, key_id, sealed = row[0], row[1], row[2]
        open_sealed(keyring, key_id, bytes(sealed), endpoint_id.bytes)
    return store.count_plaintext(conn)


def startup_check(service: str, database_url: str, keyring: Keyring) -> str | None:
    """None when the keys are usable, else the one-line reason the service must not start.
    An unreachable database is not a key problem: the service's own retries handle it."""
    prefix = f"hookstream {service}: configuration error: HOOKSTREAM_SECRET_KEYS"
    if not keyring.keys:
        return (f"{prefix} is not set: it seals endpoint signing secrets at rest "
                "(`hookstream secrets new-key` prints one; docs/runbook.md)")
    try:
        with psycopg.connect(database_url, connect_timeout=5) as conn:
            plaintext = check_keyring(conn, keyring)
    except SecretKeyError as exc:
        return f"{prefix}: {exc}"
    except psycopg.Error as exc:
        # a database not up yet (or not migrated yet) is not a key problem: the service's
        # own retries handle it, and the first claim would open the same rows
        log.warning("secret keys not checked against the database",
                    extra={"error": str(exc)})
        return None
    if plaintext:
        log.warning("signing secrets still stored in plaintext; run `hookstream secrets "
                    "reencrypt`", extra={"rows": plaintext})
    return None


def reencrypt(database_url: str, keyring: Keyring, *, batch: int = 500) -> int:
    """Seal every plaintext row, and re-seal every row of an older key, with the current
    key; one transaction per batch (rows locked, SKIP LOCKED: concurrent runs share the
    work). Returns the rows written. Idempotent: a second run writes nothing."""
    current = keyring.current_id
    done = 0
    with psycopg.connect(database_url, row_factory=dict_row) as conn:
        while True:
            with conn.transaction():
                rows = store.to_reseal(conn, current=current, limit=batch)
                for r in rows:
                    context = r["endpoint_id"].bytes
                    plain = (r["secret"] if r["secret"] is not None else
                             open_sealed(keyring, r["secret_key_id"], bytes(r["secret_sealed"]),
                                         context))
                    key_id, sealed = seal(keyring, plain, context)
                    store.store_sealed(conn, endpoint_id=r["endpoint_id"],
                                       version=r["version"], key_id=key_id, sealed=sealed)
            done += len(rows)
            if len(rows) < batch:
                return done
