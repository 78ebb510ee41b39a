"""Registering an endpoint from blocking code (``hookstream.endpoints.create_endpoint``:
the demo, tests and benchmarks): the API's own named queries (``sql/api.sql``) on a
synchronous psycopg connection, in the caller's transaction."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg.rows import dict_row

from hookstream.io import queries

Q = queries.load("api")


def insert_endpoint(conn: psycopg.Connection[Any], *, tenant: str, url: str, description: str,
                    event_types: Sequence[str], rate_per_s: float, burst: int,
                    max_in_flight: int, coalesce: bool = True) -> uuid.UUID:
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(Q["insert_endpoint"], {
            "tenant": tenant, "url": url, "description": description,
            "event_types": list(event_types), "rate_per_s": rate_per_s, "burst": burst,
            "max_in_flight": max_in_flight, "coalesce": coalesce}).fetchone()
    assert row is not None
    endpoint_id: uuid.UUID = row["id"]
    return endpoint_id


def insert_first_secret(conn: psycopg.Connection[Any], endpoint_id: uuid.UUID, key_id: str,
                        sealed: bytes) -> None:
    conn.execute(Q["insert_first_secret"], {"id": endpoint_id, "key_id": key_id,
                                            "sealed": sealed})
