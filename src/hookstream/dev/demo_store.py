"""``hookstream demo``'s database side: a fresh demo database on the local server, and
the reads (``sql/demo.sql``) that wait for the deliveries and report on them."""

from __future__ import annotations

import re
from typing import Any

import psycopg

from hookstream.io import queries

Q = queries.load("demo")
_NAME = re.compile(r"^[a-z_][a-z0-9_]*$")


def recreate_database(conn: psycopg.Connection[Any], name: str) -> None:
    """Drop ``name`` (its sessions too) and create it empty; ``conn`` in autocommit on
    another database of the server. ``name`` is a plain identifier (the demo's own)."""
    if not _NAME.match(name):
        raise ValueError(f"not a plain database name: {name!r}")
    conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    conn.execute(f"CREATE DATABASE {name}")


def delivery_progress(conn: psycopg.Connection[Any]) -> tuple[int, int]:
    """(delivered, all) delivery rows."""
    row = conn.execute(Q["delivery_progress"]).fetchone()
    assert row is not None
    return row[0], row[1]


def by_status(conn: psycopg.Connection[Any]) -> list[Any]:
    """(status, rows, distinct (event, endpoint) pairs, attempts) per delivery status."""
    return conn.execute(Q["by_status"]).fetchall()


def delivered_ids(conn: psycopg.Connection[Any]) -> set[str]:
    return {str(r[0]) for r in conn.execute(Q["delivered_ids"])}


def finished_attempts_of_tenant(conn: psycopg.Connection[Any],
                                tenant: str) -> list[tuple[str, int | None, str | None, str]]:
    """(url, status code, error class, outcome) of every finished attempt to ``tenant``."""
    return [(r[0], r[1], r[2], r[3])
            for r in conn.execute(Q["finished_attempts_of_tenant"], (tenant,))]


def status_counts_of_tenant(conn: psycopg.Connection[Any], tenant: str) -> dict[str, int]:
    """``tenant``'s deliveries by status."""
    return {r[0]: r[1] for r in conn.execute(Q["status_counts_of_tenant"], (tenant,))}
