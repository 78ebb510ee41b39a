"""The delivery gauges' reads from PostgreSQL (``sql/observability.sql``), for
``hookstream.ops.db_metrics``: one function per named query, run on the caller's
connection (dict rows) inside the caller's transaction. Driver errors pass through: the
caller translates them (``DeliveryStatsSource.sample``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg

from hookstream.io import queries

Q = queries.load("observability")
Conn = psycopg.Connection[dict[str, Any]]
Row = dict[str, Any]


def snapshot(conn: Conn) -> None:
    """Make the transaction just begun one read-only REPEATABLE READ snapshot."""
    conn.execute(Q["snapshot"])


def pending_by_kind(conn: Conn) -> list[Row]:
    return conn.execute(Q["pending_by_kind"]).fetchall()


def in_flight(conn: Conn) -> Row | None:
    return conn.execute(Q["in_flight"]).fetchone()


def worst_endpoints(conn: Conn, limit: int) -> list[Row]:
    return conn.execute(Q["worst_endpoints"], {"limit": limit}).fetchall()


def endpoint_figures(conn: Conn, ids: Sequence[str]) -> list[Row]:
    return conn.execute(Q["endpoint_figures"], {"ids": ids}).fetchall()


def endpoints_overdue(conn: Conn, thresholds_s: Sequence[float]) -> list[Row]:
    return conn.execute(Q["endpoints_overdue"], {"thresholds": list(thresholds_s)}).fetchall()


def dead(conn: Conn, *, cap: int, window_s: float) -> Row | None:
    return conn.execute(Q["dead"], {"cap": cap, "window_s": window_s}).fetchone()


def endpoints_by_status(conn: Conn) -> list[Row]:
    return conn.execute(Q["endpoints_by_status"]).fetchall()


def circuits(conn: Conn) -> Row | None:
    return conn.execute(Q["circuits"]).fetchone()


def attempts_slice(conn: Conn, *, after: float | None, window_s: float,
                   settle_s: float) -> Row | None:
    return conn.execute(Q["attempts_slice"], {
        "after": after, "window_s": window_s, "settle_s": settle_s}).fetchone()
