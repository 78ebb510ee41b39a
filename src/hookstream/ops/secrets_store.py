"""Signing secrets at rest, the database side (``sql/secrets.sql``): the rows the key
check samples and the rows re-encryption rewrites, on the caller's connection and in
the caller's transaction. The key never comes here: Python seals and opens, PostgreSQL
stores bytes."""

from __future__ import annotations

import uuid
from typing import Any

import psycopg

from hookstream.io import queries

Q = queries.load("secrets")


def sample_per_key(conn: psycopg.Connection[Any]) -> list[Any]:
    """(endpoint_id, secret_key_id, secret_sealed): one sealed row per key id in use."""
    return conn.execute(Q["sample_per_key"]).fetchall()


def count_plaintext(conn: psycopg.Connection[Any]) -> int:
    return int(conn.execute(Q["count_plaintext"]).fetchone()[0])  # type: ignore[index]


def to_reseal(conn: psycopg.Connection[Any], *, current: str, limit: int) -> list[Any]:
    """Up to ``limit`` rows in plaintext or sealed with another key than ``current``,
    locked (SKIP LOCKED) until the caller's transaction ends."""
    return conn.execute(Q["to_reseal"], {"current": current, "limit": limit}).fetchall()


def store_sealed(conn: psycopg.Connection[Any], *, endpoint_id: uuid.UUID, version: int,
                 key_id: str, sealed: bytes) -> None:
    conn.execute(Q["store_sealed"], {"key_id": key_id, "sealed": sealed,
                                     "endpoint_id": endpoint_id, "version": version})
