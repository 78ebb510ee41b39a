"""Apply the ordered SQL migrations in ``schemas/sql`` once each, recorded in a version table."""

from __future__ import annotations

import logging
from importlib import resources

import psycopg

log = logging.getLogger(__name__)

# Serialises concurrent `migrate` runs (several containers starting at once).
_LOCK_KEY = 0x686F6F6B  # "hook"


def migration_files() -> list[tuple[str, str]]:
    folder = resources.files("hookstream.schemas.sql")
    names = sorted(p.name for p in folder.iterdir() if p.name.endswith(".sql"))
    return [(name.removesuffix(".sql"), (folder / name).read_text("utf-8")) for name in names]


def migrate(dsn: str, *, connect_timeout_s: int | None = None) -> list[str]:
    """Apply pending migrations; returns the versions applied now (empty when up to date)."""
    applied_now: list[str] = []
    # connect_timeout is a libpq parameter (seconds); None keeps libpq's own default
    with psycopg.connect(dsn, autocommit=True, connect_timeout=connect_timeout_s) as conn:
        conn.execute("SELECT pg_advisory_lock(%s)", (_LOCK_KEY,))
        try:
            conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations ("
                " version text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
            )
            done = {r[0] for r in conn.execute("SELECT version FROM schema_migrations")}
            for version, sql in migration_files():
                if version in done:
                    continue
                with conn.transaction():
                    conn.execute(sql.encode())
                    conn.execute(
                        "INSERT INTO schema_migrations (version) VALUES (%s)", (version,)
                    )
                log.info("migration applied", extra={"version": version})
                applied_now.append(version)
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (_LOCK_KEY,))
    return applied_now
