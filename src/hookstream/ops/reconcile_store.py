"""Reconciliation's reads (``sql/reconcile.sql``), for ``hookstream.ops.reconcile``: one
function per named query, run on the caller's connection inside the snapshot the caller
opened (it owns the isolation level and the rollback). Parameters: see the file's
header (since, cutoff, stall_s, sample)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

import psycopg
from psycopg.rows import dict_row

from hookstream.io import queries

Q = queries.load("reconcile")
Params = Mapping[str, Any]
Row = dict[str, Any]


def db_now(conn: psycopg.Connection[Any]) -> datetime:
    row = conn.execute(Q["db_now"]).fetchone()
    assert row is not None
    now: datetime = row[0]
    return now


def window_counts(conn: psycopg.Connection[Any], params: Params) -> Row:
    """published, deliveries, attempts, quarantined in the window."""
    return conn.cursor(row_factory=dict_row).execute(Q["window_counts"], params).fetchone() or {}


def gap_rows(conn: psycopg.Connection[Any], name: str, params: Params) -> list[Row]:
    """(kind, key, detail, total) rows of the gap query ``name`` (gaps_*)."""
    return conn.cursor(row_factory=dict_row).execute(Q[name], params).fetchall()


def delivery_states(conn: psycopg.Connection[Any], params: Params) -> list[Row]:
    """(verdict, n, sample) per delivery state of the window."""
    return conn.cursor(row_factory=dict_row).execute(Q["delivery_states"], params).fetchall()


def plan(conn: psycopg.Connection[Any], name: str, params: Params, *,
         analyze: bool = False) -> str:
    """EXPLAIN (with ANALYZE, BUFFERS when ``analyze``) of the query ``name``."""
    prefix = "EXPLAIN (ANALYZE, BUFFERS) " if analyze else "EXPLAIN "
    rows = conn.execute(prefix + Q[name], params).fetchall()
    return "\n".join(r[0] for r in rows)


def attempt_counts(conn: psycopg.Connection[Any], delivery_ids: Iterable[str]) -> list[Any]:
    """(delivery_id, attempt rows) of the given deliveries that have any."""
    return conn.execute(Q["attempt_counts"], {"ids": list(delivery_ids)}).fetchall()
