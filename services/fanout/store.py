"""The fanout's PostgreSQL boundary: events stored (immutable, with their hash), the
audiences of (tenant, type) pairs, and delivery rows created by planned statements.

Every statement is a named query of fanout.sql; the connection is autocommitted, so a
statement commits on its own unless a method says otherwise. Every method raises the
project's errors (``hookstream.io.pg``: ``DatabaseUnavailable`` for an outage,
``DataRejected`` for values PostgreSQL refuses), never a driver error.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from typing import Any

import psycopg
from hookstream.fanout.plan import Audience, Slice

from hookstream.core.codec import EventEnvelope
from hookstream.io import queries
from hookstream.io.pg import NETWORK_BOUNDS, plan_with_values, translated_sync, translating

Q = queries.load("fanout")
Key = tuple[str, str]  # (tenant, type)
# A delivery row as create_deliveries returns it: (delivery_id, event_id, endpoint_id,
# key, tenant, lease_version, coalescing_key, created now); store_and_create's rows
# alike, and one (None, event_id, None...) row per event it stored.
Row = tuple[Any, ...]


@contextmanager
def connect(url: str) -> Iterator[FanoutStore]:
    """A store on a new autocommitted connection that plans with values (a batch's days
    pruned by its values: ``hookstream.io.pg``), closed at the end of the block. Driver
    errors inside the block leave as the project's (DatabaseUnavailable: retried), or
    untranslated for a bug."""
    with translating(), psycopg.connect(url, autocommit=True, **NETWORK_BOUNDS) as conn:
        plan_with_values(conn)
        yield FanoutStore(conn)


class FanoutStore:
    def __init__(self, conn: psycopg.Connection[Any]):
        self.conn = conn

    @translated_sync
    def store_events(self, events: Sequence[EventEnvelope],
                     shas: Sequence[bytes]) -> set[uuid.UUID]:
        """Store the events not stored yet, with their payloads' hashes ``shas``: one
        statement, committed on its own. Returns the ids stored now."""
        return {r[0] for r in self.conn.execute(Q["store_events"], event_rows(events, shas))}

    @translated_sync
    def stored_hashes(self, events: Sequence[EventEnvelope]) -> dict[uuid.UUID, bytes]:
        """The payload hash each of ``events`` was stored with (the ones stored)."""
        return {r[0]: bytes(r[1]) for r in self.conn.execute(
            Q["stored_hashes"], {"ids": [e.event_id for e in events],
                                 "committed_at": [e.committed_at for e in events]})}

    @translated_sync
    def record_conflict(self, event_id: uuid.UUID, sha: bytes) -> None:
        """Record an event id seen again with other bytes (``sha``)."""
        self.conn.execute(Q["record_conflict"], {"event_id": event_id, "sha": sha})

    @translated_sync
    def audiences(self, keys: Sequence[Key], page: int) -> dict[Key, Audience]:
        """How many endpoints each of ``keys`` reaches, and every ``page``-th of their
        ids; a key absent from the answer reaches nobody now."""
        return {
            (r[0], r[1]): Audience(r[2], tuple(r[3]))
            for r in self.conn.execute(Q["audiences"], {
                "tenant": [k[0] for k in keys], "type": [k[1] for k in keys],
                "page": page})
        }

    @translated_sync
    def store_and_create(self, events: Sequence[EventEnvelope], shas: Sequence[bytes],
                         chosen: Sequence[tuple[EventEnvelope, Slice]],
                         window_s: float) -> list[Row]:
        """``events`` stored as ``store_events`` does and the delivery rows of
        ``chosen`` (events without coalescing key, each with its slice of endpoints)
        created for those stored now: one statement, one commit (fanout.sql)."""
        return self.conn.execute(Q["store_and_create"], {
            **event_rows(events, shas),
            "c_event_id": [e.event_id for e, _ in chosen],
            "c_tenant": [e.tenant for e, _ in chosen],
            "c_type": [e.type for e, _ in chosen],
            "c_coalescing_key": [None for _ in chosen],
            "c_committed_at": [e.committed_at for e, _ in chosen],
            "c_after": [s.after for _, s in chosen],
            "c_upto": [s.upto for _, s in chosen],
            "window_s": window_s,
        }).fetchall()

    @translated_sync
    def create_deliveries(self, events: Sequence[EventEnvelope], statement: Sequence[Slice],
                          again: set[uuid.UUID], window_s: float,
                          ) -> tuple[list[Row], set[str]]:
        """The delivery rows of one planned statement (``events[i]`` with
        ``statement[i]``'s endpoints; ``again``: events seen before, whose pending rows
        are returned too), and the ids of the rows those superseded. Without coalescing
        keys the statement is the whole transaction: run on its own (autocommit), it
        costs one round trip instead of three. With keys, the superseding commits
        together with the rows it compares."""
        keyed_events = any(e.coalescing_key is not None for e in events)
        with self.conn.transaction() if keyed_events else nullcontext():
            rows = self.conn.execute(Q["create_deliveries"], {
                "event_id": [e.event_id for e in events],
                "tenant": [e.tenant for e in events],
                "type": [e.type for e in events],
                "coalescing_key": [e.coalescing_key for e in events],
                "committed_at": [e.committed_at for e in events],
                "again": [e.event_id in again for e in events],
                "after": [s.after for s in statement],
                "upto": [s.upto for s in statement],
                "window_s": window_s,
            }).fetchall()
            keyed = [r for r in rows if r[7] and r[6] is not None]
            superseded: set[str] = set()
            if keyed:
                superseded = {r[0] for r in self.conn.execute(Q["coalesce"], {
                    "endpoint_id": [r[2] for r in keyed], "key": [r[6] for r in keyed]})}
        return rows, superseded


def event_rows(events: Sequence[EventEnvelope], shas: Sequence[bytes]) -> dict[str, list[Any]]:
    """The events as store_events (and store_and_create) take them: one array a column."""
    return {
        "event_id": [e.event_id for e in events],
        "tenant": [e.tenant for e in events],
        "type": [e.type for e in events],
        "schema_version": [e.schema_version for e in events],
        "object_id": [e.object_id for e in events],
        "object_version": [e.object_version for e in events],
        "coalescing_key": [e.coalescing_key for e in events],
        "occurred_at": [e.occurred_at for e in events],
        "committed_at": [e.committed_at for e in events],
        "payload": [e.payload for e in events],
        "sha": list(shas),
    }
