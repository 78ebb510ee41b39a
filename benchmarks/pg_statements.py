"""Where PostgreSQL's time goes during a benchmark run: planning and execution per statement.

Reads ``pg_stat_statements`` (with ``pg_stat_statements.track_planning``) for the run's
own database, reset just before the load: calls, rows, mean planning and execution
milliseconds and each statement's share of the total. Planning is worth its own column
here: the services plan their batch statements with their values on every call (the
partitioned history prunes to a batch's days only then, ``hookstream.io.pg``), and at
1,000 deliveries/s that planning was 26–43 % of PostgreSQL's time (benchmarks/pipeline.py
--pg-statements; BENCHMARKS.md, Pipeline).

The extension has to be loaded by the server; the local stack does not load it (it costs
every statement a little). For a benchmark stack::

    psql ... -c "ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'"
    hookstream stack down --only postgres && hookstream stack up
    psql ... -c "ALTER SYSTEM SET pg_stat_statements.track_planning = on" \\
             -c "SELECT pg_reload_conf()"

Without it the report says so and the run goes on.
"""

from __future__ import annotations

import re
from typing import Any

import psycopg

from hookstream.io import queries

# The project's named statements, recognised by their first line (a comment or the SQL
# itself: pg_stat_statements keeps comments and replaces only the constants).
CONCERNS = ("dispatcher", "fanout", "relay", "sweeper", "observability")
_NAME_WIDTH = 70


def _first_lines() -> list[tuple[str, str]]:
    out = []
    for concern in CONCERNS:
        try:
            named = queries.load(concern)
        except FileNotFoundError:
            continue
        for name, text in named.items():
            first = text.strip().splitlines()[0].strip()
            if first and "%(" not in first:
                out.append((first, f"{concern}.{name}"))
    return out


def label(query: str, known: list[tuple[str, str]]) -> str:
    """A statement's name if it is one of the project's, else its first SQL words."""
    text = query.strip()
    for first, name in known:
        if text.startswith(first):
            return name
    sql = " ".join(line for line in text.splitlines() if not line.strip().startswith("--"))
    return re.sub(r"\s+", " ", sql).strip()[:_NAME_WIDTH]


def available(db: str) -> str | None:
    """None when statements can be profiled in ``db``, else why not."""
    try:
        with psycopg.connect(db, autocommit=True) as conn:
            loaded = conn.execute("SHOW shared_preload_libraries").fetchone()
            if not loaded or "pg_stat_statements" not in loaded[0]:
                return "pg_stat_statements is not in shared_preload_libraries"
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            planning = conn.execute("SHOW pg_stat_statements.track_planning").fetchone()
            if not planning or planning[0] != "on":
                return "pg_stat_statements.track_planning is off"
    except psycopg.Error as exc:
        return f"pg_stat_statements unavailable: {exc}".strip()
    return None


def reset(db: str) -> None:
    """Forget what the run's database did so far (the other databases keep theirs)."""
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_statements_reset(0, (SELECT oid FROM pg_database"
                     " WHERE datname = current_database()), 0)")


def report(db: str, top: int = 12) -> dict[str, Any]:
    """The ``top`` statements by planning + execution time since ``reset``, and the
    run's totals (the share of planning in all of it)."""
    with psycopg.connect(db, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT query, calls, rows, total_plan_time, total_exec_time"
            " FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database"
            " WHERE datname = current_database())").fetchall()
    known = _first_lines()
    merged: dict[str, list[float]] = {}
    for query, calls, nrows, plan_ms, exec_ms in rows:
        acc = merged.setdefault(label(query, known), [0, 0, 0.0, 0.0])
        acc[0] += calls
        acc[1] += nrows
        acc[2] += plan_ms
        acc[3] += exec_ms
    total_plan = sum(v[2] for v in merged.values())
    total_exec = sum(v[3] for v in merged.values())
    total = (total_plan + total_exec) or 1.0
    ranked = sorted(merged.items(), key=lambda kv: kv[1][2] + kv[1][3], reverse=True)
    return {
        "total_plan_ms": round(total_plan), "total_exec_ms": round(total_exec),
        "plan_share": round(total_plan / total, 3),
        "statements": [
            {"statement": name, "calls": int(calls), "rows_per_call": round(nrows / calls, 1)
             if calls else 0.0,
             "plan_ms": round(plan / calls, 3) if calls else 0.0,
             "exec_ms": round(exe / calls, 3) if calls else 0.0,
             "share": round((plan + exe) / total, 3)}
            for name, (calls, nrows, plan, exe) in ranked[:top]],
    }


def table_rows(r: dict[str, Any]) -> list[tuple[str, str]]:
    """Rows for the pipeline benchmark's printed table."""
    if "unavailable" in r:
        return [("postgres statements", r["unavailable"])]
    out = [("postgres statements: planning / execution s (planning share)",
            f"{r['total_plan_ms'] / 1000:.1f} / {r['total_exec_ms'] / 1000:.1f} "
            f"({r['plan_share']:.0%})")]
    for s in r["statements"]:
        out.append((f"  pg {s['statement'][:48]}",
                    f"{s['calls']:,} calls × {s['rows_per_call']} rows, plan {s['plan_ms']:.3f}"
                    f" + exec {s['exec_ms']:.3f} ms, {s['share']:.0%}"))
    return out
