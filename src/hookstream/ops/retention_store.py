"""The history partitions' PostgreSQL side (``sql/retention.sql``), for
``hookstream.ops.retention`` and ``hookstream history days``: the maintenance lock, the
catalog reads, and the DDL that makes and drops day partitions.

Statements naming a table are built here, and only here: the name is one of ``TABLES``
(checked), a day partition's name made from a date (``partition_name``), or one of their
``_default`` partitions, never text from outside. Every function runs one statement on
the caller's connection; the caller owns the transactions (one per parent table) and
the lock timeout's scope."""

from __future__ import annotations

from datetime import date
from typing import Any

import psycopg

from hookstream.core.counts import COUNT_CAP
from hookstream.io import queries

Q = queries.load("retention")
# One maintenance run at a time across every relay replica and the CLI.
LOCK_KEY = 0x68697374  # "hist"
TABLES = ("attempts", "deliveries", "events")

Conn = psycopg.Connection[Any]


def _table(table: str) -> str:
    if table not in TABLES:
        raise ValueError(f"not a history table: {table!r}")
    return table


def partition_name(table: str, day: date) -> str:
    return f"{_table(table)}_p{day:%Y%m%d}"


# -- the maintenance lock and its lock timeout ---------------------------------------------

def try_lock(conn: Conn) -> bool:
    """The session's maintenance lock, if no other session holds it."""
    got = conn.execute(Q["try_lock"], (LOCK_KEY,)).fetchone()
    return bool(got and got[0])


def unlock(conn: Conn) -> None:
    conn.execute(Q["unlock"], (LOCK_KEY,))


def set_lock_timeout(conn: Conn, lock_timeout_s: float) -> None:
    conn.execute(f"SET lock_timeout = '{int(lock_timeout_s * 1000)}ms'")


def reset_lock_timeout(conn: Conn) -> None:
    conn.execute(Q["reset_lock_timeout"])


# -- catalog -------------------------------------------------------------------------------

def day_partitions(conn: Conn) -> list[str]:
    """The names of events' partitions (events_pYYYYMMDD, and events_default)."""
    return [name for (name,) in conn.execute(Q["day_partitions"]).fetchall()]


def exists(conn: Conn, table: str, day: date) -> bool:
    row = conn.execute(Q["table_exists"], (partition_name(table, day),)).fetchone()
    return bool(row and row[0])


def missing_days(conn: Conn, table: str, first: date, end: date) -> int:
    """How many days of [first, end) ``table`` has no partition for (no lock taken)."""
    row = conn.execute(Q["missing_days"], (first, end, _table(table))).fetchone()
    return int(row[0]) if row else 0


def stray_days(conn: Conn) -> list[date]:
    """The days of the rows in the default partitions (at most COUNT_CAP rows of each)."""
    rows = conn.execute(Q["stray_days"], {"cap": COUNT_CAP}).fetchall()
    return sorted(r[0] for r in rows)


def strays(conn: Conn, table: str) -> int:
    """Rows in ``table``'s default partition, counted up to COUNT_CAP."""
    row = conn.execute(
        f"SELECT count(*) FROM (SELECT 1 FROM {_table(table)}_default LIMIT %s) s",
        (COUNT_CAP,)).fetchone()
    return int(row[0]) if row else 0


def live_deliveries(conn: Conn, day: date) -> int:
    """Deliveries of the day still pending or in flight for an endpoint not deleted (up to
    COUNT_CAP): work some endpoint is still owed. A row of a deleted endpoint is not (its
    delete operation removes it, or it is a straggler committed after the endpoint row
    went: never claimed, nothing to wait for)."""
    row = conn.execute(
        f'SELECT count(*) FROM (SELECT 1 FROM "{partition_name("deliveries", day)}" d'
        " WHERE d.status IN ('pending', 'in_flight') AND EXISTS ("
        "  SELECT 1 FROM endpoints e"
        "  WHERE e.id = d.endpoint_id AND e.status <> 'deleted') LIMIT %s) AS live",
        (COUNT_CAP,)).fetchone()
    return int(row[0]) if row else 0


def day_sizes(conn: Conn) -> list[Any]:
    """(day or None for the default partitions, bytes, deliveries estimate) per day."""
    return conn.execute(Q["day_sizes"]).fetchall()


# -- DDL (the caller's transaction; take the parent's lock first) -------------------------

def lock_parent(conn: Conn, table: str) -> None:
    conn.execute(f"LOCK TABLE ONLY {_table(table)} IN ACCESS EXCLUSIVE MODE")


def make_days(conn: Conn, table: str, first: date, end: date) -> int:
    """The partitions of [first, end) ``table`` lacks (0014's function); returns how many."""
    row = conn.execute(Q["make_partitions"], (first, end, _table(table))).fetchone()
    return int(row[0]) if row else 0


def drop_day(conn: Conn, table: str, day: date, *, if_exists: bool = False) -> None:
    name = partition_name(table, day)
    conn.execute(f'DROP TABLE IF EXISTS "{name}"' if if_exists else f'DROP TABLE "{name}"')
