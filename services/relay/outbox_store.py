"""The relay's PostgreSQL boundary: claims of outbox rows, their outcome, housekeeping.

A claim is one autocommitted statement, so no transaction stays open while the relay
waits for Kafka. Each store holds a claim token as a session advisory lock: claims whose
token is no longer locked by anyone (the relay died, or its connection did) are void,
and ``claimed_until`` voids the claims of a relay that is connected but stuck. Every
method raises ``DatabaseUnavailable`` for an outage (see ``hookstream.io.pg``), never a
driver error.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import psycopg

from hookstream.core.counts import COUNT_CAP
from hookstream.io import queries
from hookstream.io.pg import NETWORK_BOUNDS, translated_sync, translating

Q = queries.load("relay")
# The advisory-lock class of claim tokens: pg_locks shows it as classid, the token as objid.
CLAIM_LOCK_CLASS = 0x686F6F6C  # "hool"
_TOKENS = 2**31 - 1  # objid is a 32-bit oid; positive int4 values compare as themselves
# The oldest-age probe reads this many unpublished rows in id order (relay.sql backlog).
BACKLOG_AGE_HEAD = 1000


class OutboxStore:
    def __init__(self, conn: psycopg.Connection[Any], token: int):
        self.conn = conn
        self.token = token

    @classmethod
    @translated_sync
    def connect(cls, url: str) -> OutboxStore:
        conn = psycopg.connect(url, autocommit=True, **NETWORK_BOUNDS)
        try:
            while True:  # two sessions drawing the same token: draw again
                token = 1 + secrets.randbelow(_TOKENS)
                locked = conn.execute("SELECT pg_try_advisory_lock(%s, %s)",
                                      (CLAIM_LOCK_CLASS, token)).fetchone()
                if locked and locked[0]:
                    return cls(conn, token)
        except BaseException:
            conn.close()
            raise

    def close(self) -> None:
        self.conn.close()  # the session's advisory lock goes with it

    def __enter__(self) -> OutboxStore:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    @translated_sync
    def claim(self, limit: int, lease_s: float) -> list[tuple[Any, ...]]:
        """Up to ``limit`` unpublished rows nobody holds a live claim on, oldest first,
        now claimed by this store for ``lease_s``."""
        rows = self.conn.execute(Q["claim_batch"], {
            "limit": limit, "lease_s": lease_s, "token": self.token,
            "lock_class": CLAIM_LOCK_CLASS}, binary=True).fetchall()
        rows.sort(key=lambda r: r[0])  # RETURNING keeps no order
        return rows

    @translated_sync
    def settle(self, published: Sequence[int], quarantined: Mapping[int, str],
               released: Sequence[int]) -> None:
        """One transaction: the acknowledged rows published, the bad ones quarantined,
        the ones that failed for now handed back to the next round at once."""
        with self.conn.transaction():
            if quarantined:
                self.conn.execute(Q["quarantine"], {"ids": list(quarantined),
                                                    "reasons": list(quarantined.values())})
            if published:
                self.conn.execute(Q["mark_published"], {"ids": list(published)})
            if released:
                self.conn.execute(Q["release"], {"ids": list(released), "token": self.token})

    @translated_sync
    def backlog(self) -> tuple[int, float]:
        row = self.conn.execute(Q["backlog"], {"cap": COUNT_CAP,
                                               "head": BACKLOG_AGE_HEAD}).fetchone()
        assert row is not None
        return int(row[0]), float(row[1])

    @translated_sync
    def purge_batch(self, retention_s: float, limit: int) -> int:
        return self.conn.execute(Q["purge_published"], {
            "retention_s": retention_s, "limit": limit}).rowcount


def notifications(url: str, channel: str, timeout_s: float) -> Iterator[bool]:
    """Yield True on (re)connecting (a NOTIFY may have been missed meanwhile) and for each
    NOTIFY on ``channel``; False after each ``timeout_s`` of silence, so the caller can
    check whether to stop. Raises ``DatabaseUnavailable`` when the connection fails."""
    with translating(), psycopg.connect(url, autocommit=True, **NETWORK_BOUNDS) as conn:
        conn.execute(f"LISTEN {channel}")
        yield True
        while True:
            for _n in conn.notifies(timeout=timeout_s):
                yield True
            yield False
