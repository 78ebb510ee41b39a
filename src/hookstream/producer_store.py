"""The producers' outbox insert (``sql/producer.sql``), for ``hookstream.outbox``: one
statement on the caller's connection, inside the caller's transaction (the row becomes
visible, and is published, only when that transaction commits)."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

import psycopg

from hookstream.io import queries

Q = queries.load("producer")


def insert_event(conn: psycopg.Connection[Any], event_id: uuid.UUID, tenant: str, type: str,
                 schema_version: int, object_id: str | None, object_version: int | None,
                 coalescing_key: str | None, occurred_at: datetime | None,
                 payload: bytes) -> None:
    conn.execute(
        Q["insert_event"],
        (event_id, tenant, type, schema_version, object_id, object_version, coalescing_key,
         occurred_at, payload),
    )
