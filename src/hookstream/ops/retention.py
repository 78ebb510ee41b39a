"""History maintenance (issue #14): the day partitions of events, deliveries and
attempts (migration 0014) made ahead of time and expired days dropped whole — never row
deletes. Run by the relay's housekeeping every HOOKSTREAM_HISTORY_MAINTAIN_INTERVAL_S
and by `hookstream history maintain`; one run at a time (an advisory lock), any
replica may do it.

The boundary: a day past the history is dropped only if none of its deliveries is
still pending or in flight. Retries stop 24 h after the commit, so with the minimum
history of 2 days a day normally holds only finished rows when it expires; one that
does not (an endpoint paused or disabled for longer than the history, an outage) is
**held** — kept, reported (log, ``hookstream_history_expired_held``), and dropped by the
first run after its last live delivery finished (delivered, or dead once its retry
window is over). Live work is never dropped, and never silently kept either. The check
and the drop of the deliveries are one transaction under the deliveries' table lock, so
a replay cannot set a row back to pending between the two.

pg_partman would do the creating and dropping too; it is not used because the official
postgres image (docker-compose.yml) does not ship it, the job is small, and the held-day
rule above is ours either way. The SQL, DDL included, is in ``retention_store``.
"""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any

import psycopg

from hookstream.core.counts import COUNT_CAP
from hookstream.io.pg import translated_sync
from hookstream.ops import retention_store as store
from hookstream.policy.retention import plan

log = logging.getLogger("hookstream.retention")

_DAY = re.compile(r"^events_p(\d{8})$")
TABLES = store.TABLES


@dataclass
class RetentionRun:
    ran: bool = True  # False: another session held the maintenance lock
    created: int = 0  # partitions made (three per day)
    dropped: list[date] = field(default_factory=list)
    held: dict[date, int] = field(default_factory=dict)  # day -> live deliveries (capped)
    strays: int = 0  # rows in the default partitions (capped): no day partition fits them
    drop_s: list[float] = field(default_factory=list)  # wall time of each day's drop
    lock_waits: int = 0  # steps given up because a lock was not granted in time


def existing_days(conn: psycopg.Connection[Any]) -> list[date]:
    return [datetime.strptime(m.group(1), "%Y%m%d").replace(tzinfo=UTC).date()
            for name in store.day_partitions(conn) if (m := _DAY.match(name))]


@translated_sync
def maintain(conn: psycopg.Connection[Any], *, history_days: int, days_ahead: int,
             today: date | None = None, lock_timeout_s: float = 0.5,
             dry_run: bool = False) -> RetentionRun:
    """One maintenance run on an autocommit connection. ``today`` is for tests."""
    today = today or datetime.now(UTC).date()
    if not store.try_lock(conn):
        return RetentionRun(ran=False)
    # Creating a partition and dropping one both need an ACCESS EXCLUSIVE lock on the
    # parent table for a moment. Waiting for it behind a long query would stall every
    # writer queued behind us (the fanout, the dispatcher), so each statement waits at
    # most lock_timeout_s and what did not get its lock is tried again by the next run
    # (days are made HISTORY_DAYS_AHEAD ahead, so a missed run costs nothing).
    # Each transaction here takes exactly one parent's lock, first, so a wait of ours is
    # never part of a lock cycle with a writer (_drop_day says why that mattered).
    store.set_lock_timeout(conn, lock_timeout_s)
    try:
        run = RetentionRun()
        p = plan(existing_days(conn), today, history_days, days_ahead)
        if not dry_run:
            try:
                run.created = _make_days(conn, p.create_from, p.create_to)
                # Rows no day partition held when they arrived (a commit time outside
                # the days made: an outbox row unpublished for longer than the history,
                # a producer's clock far ahead) get their day made now, which moves them
                # out of the default partition; a past day then expires like any other.
                for stray_day in _stray_days(conn):
                    run.created += _make_day(conn, stray_day)
            except psycopg.errors.LockNotAvailable:
                run.lock_waits += 1
                log.warning("history partitions not made: a lock was not granted in time;"
                            " tried again next run")
            if run.created:
                log.info("history partitions made", extra={"partitions": run.created})
        p = plan(existing_days(conn), today, history_days, days_ahead)
        for day in p.expired:
            try:
                live = _drop_day(conn, day, dry_run, run)
            except psycopg.errors.LockNotAvailable:
                run.lock_waits += 1
                log.warning("history day not dropped: its lock was not granted in time;"
                            " tried again next run", extra={"day": day.isoformat()})
                continue
            if live:
                run.held[day] = live
                log.warning("history day held: deliveries still pending or in flight", extra={
                    "day": day.isoformat(), "live": live})
        run.strays = _strays(conn)
        if run.strays:
            log.warning("history rows outside every day partition", extra={
                "rows": run.strays})
        return run
    finally:
        store.reset_lock_timeout(conn)
        store.unlock(conn)


def _drop_day(conn: psycopg.Connection[Any], day: date, dry_run: bool,
              run: RetentionRun) -> int:
    """Drop one expired day unless it holds live deliveries; returns their count.

    One transaction per table, each taking its parent's ACCESS EXCLUSIVE lock (which
    DROP of a partition needs anyway) before anything else. Holding one parent while
    waiting for the next is what deadlocked with the dispatcher (its record_outcomes
    holds deliveries and wants attempts): waiting while holding nothing cannot be part
    of a cycle, so a busy writer now delays the drop by at most lock_timeout and is
    never aborted by it. Deliveries go first, with the live check under their lock (a
    replay cannot set a row back to pending between the two); the day's attempts and
    events, which nothing writes once its deliveries are gone, follow. A run stopped in
    between (a lock not granted, a crash) leaves the day listed by its events
    partition, and the next run drops what is left."""
    started = time.monotonic()
    with conn.transaction():
        if not dry_run:
            store.lock_parent(conn, "deliveries")
        if store.exists(conn, "deliveries", day):
            # Live: work some endpoint is still owed (store.live_deliveries says which).
            live = store.live_deliveries(conn, day)
            if live or dry_run:
                return live
            store.drop_day(conn, "deliveries", day)
        elif dry_run:
            return 0
    for table in ("attempts", "events"):
        with conn.transaction():
            store.lock_parent(conn, table)
            store.drop_day(conn, table, day, if_exists=True)
    run.dropped.append(day)
    run.drop_s.append(time.monotonic() - started)
    log.info("history day dropped", extra={"day": day.isoformat(),
                                           "seconds": round(run.drop_s[-1], 3)})
    return 0


def _make_days(conn: psycopg.Connection[Any], first: date, end: date) -> int:
    """Days [first, end) of each table, one transaction per table taking the parent's
    lock first (see _drop_day: never wait for a lock while holding another). A table's
    days that exist already cost a catalog lookup, and no lock is taken for them."""
    made = 0
    for table in ("events", "deliveries", "attempts"):  # events name the day (existing_days)
        if not store.missing_days(conn, table, first, end):
            continue
        with conn.transaction():
            store.lock_parent(conn, table)
            made += store.make_days(conn, table, first, end)
    return made


def _make_day(conn: psycopg.Connection[Any], day: date) -> int:
    return _make_days(conn, day, day + timedelta(days=1))


def _stray_days(conn: psycopg.Connection[Any]) -> list[date]:
    return store.stray_days(conn)


def _strays(conn: psycopg.Connection[Any]) -> int:
    return min(sum(store.strays(conn, table) for table in TABLES), COUNT_CAP)
