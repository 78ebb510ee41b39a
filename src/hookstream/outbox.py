"""Writing events: a helper for Python producers, used inside the caller's own transaction.

Producers in other languages call the SQL function ``hookstream_emit(...)`` instead
(see ``schemas/sql/0001_init.sql``). The INSERT is ``producer_store``'s.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

import orjson
import psycopg

from hookstream import producer_store
from hookstream.core.ids import uuid7


def write_event(
    conn: psycopg.Connection[Any],
    *,
    tenant: str,
    type: str,
    payload: Any,
    object_id: str | None = None,
    object_version: int | None = None,
    coalescing_key: str | None = None,
    occurred_at: datetime | None = None,
    event_id: uuid.UUID | None = None,
    schema_version: int = 1,
) -> uuid.UUID:
    """Insert one outbox row on ``conn``; it becomes visible (and is published) only when
    the caller's transaction commits. ``payload`` is JSON-encoded unless it is bytes."""
    event_id = event_id or uuid7()  # time-ordered: appends to the indexes (core.ids)
    body = payload if isinstance(payload, bytes) else orjson.dumps(payload)
    producer_store.insert_event(conn, event_id, tenant, type, schema_version, object_id,
                                object_version, coalescing_key, occurred_at, body)
    return event_id
