"""Partitioned history (migration 0014) and its maintenance (hookstream.ops.retention)
on the real PostgreSQL: the migration keeps every row of today's schema, expired days
are dropped whole, a day still holding live deliveries is held (never dropped, never
silent), rows outside every day find a day, and a drop that cannot get its lock gives
up without harm."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta

import psycopg
import pytest

from hookstream.ops.migrate import migrate, migration_files
from hookstream.ops.retention import RetentionRun, existing_days, maintain
from tests.conftest import Stack

# The day every test's maintenance run takes for today (its ``today``), not the clock's:
# a run of the suite that crosses midnight UTC imported this the day before, and the
# rows below, placed relative to TODAY, would meet a run planning from the next day.
TODAY = datetime.now(UTC).date()


def _at(day: date, hour: int = 12) -> datetime:
    return datetime(day.year, day.month, day.day, hour, tzinfo=UTC)


def _endpoint(conn: psycopg.Connection, tenant: str = "acme") -> uuid.UUID:
    row = conn.execute(
        "INSERT INTO endpoints (tenant, url, event_types) VALUES (%s, 'https://x.example/h',"
        " '{*}') RETURNING id", (tenant,)).fetchone()
    assert row is not None
    return row[0]


def _delivery(conn: psycopg.Connection, endpoint: uuid.UUID, committed: datetime,
              status: str, attempts: int = 1) -> uuid.UUID:
    event = uuid.uuid4()
    conn.execute(
        "INSERT INTO events (event_id, tenant, type, schema_version, occurred_at, committed_at,"
        " payload, payload_sha256) VALUES (%s, 'acme', 'a.b', 1, %s, %s, '{}', sha256('{}'))",
        (event, committed, committed))
    row = conn.execute(
        "INSERT INTO deliveries (event_id, endpoint_id, tenant, endpoint_config_version, status,"
        " attempts, expires_at, committed_at) VALUES (%s, %s, 'acme', 1, %s, %s, %s, %s)"
        " RETURNING delivery_id",
        (event, endpoint, status, attempts, committed + timedelta(days=1), committed)).fetchone()
    assert row is not None
    for n in range(1, attempts + 1):
        conn.execute(
            "INSERT INTO attempts (delivery_id, attempt_no, started_at, outcome, committed_at)"
            " VALUES (%s, %s, %s, 'retry', %s)", (row[0], n, committed, committed))
    return row[0]


def _count(conn: psycopg.Connection, sql: str, *args: object) -> int:
    row = conn.execute(sql, args).fetchone()
    assert row is not None
    return int(row[0])


@pytest.fixture
def conn(db_url: str) -> Iterator[psycopg.Connection]:
    with psycopg.connect(db_url, autocommit=True) as c:
        yield c


def test_expired_days_go_whole_the_kept_days_and_their_rows_stay(
        conn: psycopg.Connection) -> None:
    ep = _endpoint(conn)
    old, edge, kept = (TODAY - timedelta(days=n) for n in (40, 31, 30))
    conn.execute("SELECT hookstream_history_partitions(%s, %s)", (old, TODAY))
    gone = [_delivery(conn, ep, _at(old), "delivered", 2), _delivery(conn, ep, _at(edge, 23),
                                                                      "dead", 3)]
    stay = _delivery(conn, ep, _at(kept, 0), "delivered", 1)  # 30 days and some hours old
    run = maintain(conn, history_days=30, days_ahead=3, today=TODAY)
    assert run.ran and not run.held
    # every expired day, the empty ones made above included, and nothing younger
    assert old in run.dropped and edge in run.dropped and kept not in run.dropped
    assert all(d <= edge for d in run.dropped)
    days = existing_days(conn)
    assert min(days) == kept and TODAY + timedelta(days=3) in days
    for table in ("events", "deliveries", "attempts"):
        assert conn.execute("SELECT to_regclass(%s)", (f"{table}_p{old:%Y%m%d}",)).fetchone() \
            == (None,)
    assert _count(conn, "SELECT count(*) FROM deliveries WHERE delivery_id = ANY(%s)",
                  gone) == 0
    assert _count(conn, "SELECT count(*) FROM attempts WHERE delivery_id = ANY(%s)", gone) == 0
    assert _count(conn, "SELECT count(*) FROM deliveries WHERE delivery_id = %s", stay) == 1
    assert _count(conn, "SELECT count(*) FROM attempts WHERE delivery_id = %s", stay) == 1
    assert _count(conn, "SELECT count(*) FROM events") == 1
    # a second run has nothing left to do
    again = maintain(conn, history_days=30, days_ahead=3, today=TODAY)
    assert (again.dropped, again.held, again.created) == ([], {}, 0)


def test_a_day_with_live_deliveries_is_held_until_they_finish(
        conn: psycopg.Connection) -> None:
    ep = _endpoint(conn)
    day = TODAY - timedelta(days=35)
    conn.execute("SELECT hookstream_history_partitions(%s, %s)", (day, day + timedelta(days=1)))
    pending = _delivery(conn, ep, _at(day), "pending", 2)  # e.g. its endpoint paused for weeks
    flying = _delivery(conn, ep, _at(day, 13), "in_flight", 1)
    _delivery(conn, ep, _at(day, 14), "delivered", 1)
    run = maintain(conn, history_days=30, days_ahead=3, today=TODAY)
    assert run.held == {day: 2} and day not in run.dropped
    assert _count(conn, "SELECT count(*) FROM deliveries WHERE committed_at < %s",
                  _at(day + timedelta(days=1), 0)) == 3  # nothing of the day touched
    conn.execute("UPDATE deliveries SET status = 'dead' WHERE delivery_id = %s", (pending,))
    assert maintain(conn, history_days=30, days_ahead=3, today=TODAY).held == {day: 1}
    conn.execute("UPDATE deliveries SET status = 'delivered' WHERE delivery_id = %s", (flying,))
    run = maintain(conn, history_days=30, days_ahead=3, today=TODAY)
    assert run.held == {} and day in run.dropped
    assert _count(conn, "SELECT count(*) FROM deliveries") == 0


def test_a_pending_row_of_a_deleted_endpoint_holds_no_day(conn: psycopg.Connection) -> None:
    # Without foreign keys a fanout statement begun before an endpoint's deletion can
    # commit a row after the endpoint row went: nobody will ever send it, so it must
    # not keep its day forever (nor may a row of an endpoint being deleted).
    gone, deleting = _endpoint(conn), _endpoint(conn)
    day = TODAY - timedelta(days=35)
    conn.execute("SELECT hookstream_history_partitions(%s, %s)", (day, day + timedelta(days=1)))
    _delivery(conn, gone, _at(day), "pending", 0)
    _delivery(conn, deleting, _at(day), "pending", 0)
    conn.execute("DELETE FROM endpoints WHERE id = %s", (gone,))
    conn.execute("UPDATE endpoints SET status = 'deleted' WHERE id = %s", (deleting,))
    run = maintain(conn, history_days=30, days_ahead=3, today=TODAY)
    assert run.held == {} and day in run.dropped


def test_rows_outside_every_day_get_their_day_and_then_expire_like_any_other(
        conn: psycopg.Connection) -> None:
    ep = _endpoint(conn)
    ancient, recent = TODAY - timedelta(days=50), TODAY - timedelta(days=5)
    # No partition for those days: the rows land in the default partitions (accepted,
    # not refused: a fanout batch must never fail on a commit time).
    a = _delivery(conn, ep, _at(ancient), "delivered", 1)
    r = _delivery(conn, ep, _at(recent), "pending", 0)
    assert _count(conn, "SELECT count(*) FROM deliveries_default") == 2
    run = maintain(conn, history_days=30, days_ahead=3, today=TODAY)
    assert ancient in run.dropped and recent not in run.dropped
    assert run.strays == 0
    assert _count(conn, "SELECT count(*) FROM deliveries WHERE delivery_id = %s", a) == 0
    assert _count(conn, f"SELECT count(*) FROM deliveries_p{recent:%Y%m%d}"
                        " WHERE delivery_id = %s", r) == 1
    assert _count(conn, "SELECT count(*) FROM events_default") == 0


def test_a_drop_behind_a_long_reader_gives_up_and_succeeds_later(
        conn: psycopg.Connection, db_url: str) -> None:
    ep = _endpoint(conn)
    day = TODAY - timedelta(days=40)
    conn.execute("SELECT hookstream_history_partitions(%s, %s)", (day, day + timedelta(days=1)))
    _delivery(conn, ep, _at(day), "delivered", 1)
    with psycopg.connect(db_url) as reader:  # an open transaction that read the day
        reader.execute("SELECT count(*) FROM deliveries").fetchone()
        run = maintain(conn, history_days=30, days_ahead=3, today=TODAY, lock_timeout_s=0.2)
        # neither the new days (made from yesterday on) nor the drop got their lock
        assert run.ran and run.lock_waits == 2
        assert run.created == 0 and run.dropped == [] and run.held == {}
        assert _count(conn, f"SELECT count(*) FROM deliveries_p{day:%Y%m%d}") == 1
    assert day in maintain(conn, history_days=30, days_ahead=3, today=TODAY).dropped


def _waiting_pid(conn: psycopg.Connection, pid: int, deadline_s: float = 10.0) -> str:
    """The relation backend ``pid`` is queued for, once it is (polled, not slept for)."""
    stop = time.monotonic() + deadline_s
    while time.monotonic() < stop:
        row = conn.execute("SELECT relation::regclass::text FROM pg_locks"
                           " WHERE pid = %s AND NOT granted", (pid,)).fetchone()
        if row is not None:
            return str(row[0])
        time.sleep(0.01)
    raise AssertionError(f"backend {pid} never waited for a lock")


def test_a_drop_waits_for_a_writer_without_holding_what_the_writer_needs_next(
        conn: psycopg.Connection, db_url: str) -> None:
    """The dispatcher's record_outcomes updates deliveries, then inserts attempts. A drop
    that took the attempts parent's lock and then waited for the deliveries' was one half
    of a cycle with it (seen by benchmarks.history_scale in 5 runs of 5): the writer's
    insert waited on the drop, the drop on the writer, until PostgreSQL's deadlock check
    or the drop's lock_timeout aborted one of them. Here the writer holds deliveries
    while the drop waits, then writes attempts: it must go straight through, and the
    drop must follow its commit."""
    ep = _endpoint(conn)
    day = TODAY - timedelta(days=40)
    conn.execute("SELECT hookstream_history_partitions(%s, %s)", (day, day + timedelta(days=1)))
    # every day the run would make exists already, so its only waits are the drop's
    conn.execute("SELECT hookstream_history_partitions(%s, %s)",
                 (TODAY - timedelta(days=1), TODAY + timedelta(days=4)))
    _delivery(conn, ep, _at(day), "delivered", 1)
    live = _delivery(conn, ep, _at(TODAY, 0), "in_flight", 1)
    maintenance = psycopg.connect(db_url, autocommit=True)
    pid = maintenance.info.backend_pid
    result: dict[str, object] = {}

    def run() -> None:
        try:
            result["run"] = maintain(maintenance, history_days=30, days_ahead=3, today=TODAY,
                                     lock_timeout_s=20)
        except Exception as exc:  # reported below, never swallowed
            result["error"] = exc

    with psycopg.connect(db_url) as writer:
        writer.execute("SET statement_timeout = '5s'")
        writer.execute("UPDATE deliveries SET updated_at = now() WHERE delivery_id = %s"
                       " AND committed_at = %s", (live, _at(TODAY, 0)))
        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        assert _waiting_pid(conn, pid) == "deliveries"
        # the writer's next statement, as record_outcomes' attempts insert
        writer.execute("INSERT INTO attempts (delivery_id, attempt_no, started_at, outcome,"
                       " committed_at) VALUES (%s, 2, now(), 'delivered', %s)",
                       (live, _at(TODAY, 0)))
        writer.commit()
    thread.join(timeout=30)
    maintenance.close()
    assert "error" not in result, result.get("error")
    run_ = result["run"]
    assert isinstance(run_, RetentionRun)
    assert run_.dropped == [day] and run_.lock_waits == 0
    assert _count(conn, "SELECT count(*) FROM attempts WHERE delivery_id = %s", live) == 2


def test_days_are_made_one_table_at_a_time_and_an_unknown_table_is_refused(
        conn: psycopg.Connection) -> None:
    """Migration 0015: the maintenance makes each table's days in a transaction of its
    own; a name that is not one of the three history tables is an error, and nothing of
    the call is made (the function would otherwise build partitions of whatever table a
    typo named)."""
    day = TODAY + timedelta(days=20)
    made = conn.execute("SELECT hookstream_history_partitions(%s, %s, %s)",
                        (day, day + timedelta(days=2), ["attempts"])).fetchone()
    assert made == (2,)
    present = {t: conn.execute("SELECT to_regclass(%s) IS NOT NULL",
                               (f"{t}_p{day:%Y%m%d}",)).fetchone() for t in
               ("events", "deliveries", "attempts")}
    assert present == {"events": (False,), "deliveries": (False,), "attempts": (True,)}
    later = day + timedelta(days=5)
    with pytest.raises(psycopg.errors.RaiseException,
                       match=r"unknown table in \{deliveries,outbox\}"):
        conn.execute("SELECT hookstream_history_partitions(%s, %s, %s)",
                     (later, later + timedelta(days=1), ["deliveries", "outbox"]))
    assert conn.execute("SELECT to_regclass(%s)", (f"deliveries_p{later:%Y%m%d}",)
                        ).fetchone() == (None,)
    assert conn.execute("SELECT to_regclass('outbox_p' || %s)", (f"{later:%Y%m%d}",)
                        ).fetchone() == (None,)


def _analyze_settings(conn: psycopg.Connection, table: str) -> list[str] | None:
    row = conn.execute("SELECT reloptions FROM pg_class WHERE oid = to_regclass(%s)",
                       (table,)).fetchone()
    assert row is not None
    return sorted(row[0]) if row[0] else None


def test_each_day_of_deliveries_and_attempts_is_analyzed_after_a_fixed_number_of_changes(
        conn: psycopg.Connection) -> None:
    """Migration 0016: autovacuum analyzes a partition after 10,000 changed rows, not
    after a tenth of it (a day's backlog grows long before that, and plans made from the
    statistics of a day that was empty read the whole backlog): the days the migration
    found, the days made since by either path (new, or out of the default partition's
    strays), and not events, whose rows never change."""
    fixed = ["autovacuum_analyze_scale_factor=0", "autovacuum_analyze_threshold=10000"]
    existing = min(existing_days(conn))
    for table in ("deliveries", "attempts"):
        assert _analyze_settings(conn, f"{table}_p{existing:%Y%m%d}") == fixed
    ep = _endpoint(conn)
    later = TODAY + timedelta(days=12)
    stray = _delivery(conn, ep, _at(later + timedelta(days=1)), "pending")  # default's
    conn.execute("SELECT hookstream_history_partitions(%s, %s)",
                 (later, later + timedelta(days=2)))
    for day in (later, later + timedelta(days=1)):
        for table in ("deliveries", "attempts"):
            assert _analyze_settings(conn, f"{table}_p{day:%Y%m%d}") == fixed, (table, day)
        assert _analyze_settings(conn, f"events_p{day:%Y%m%d}") is None
    moved = f"deliveries_p{later + timedelta(days=1):%Y%m%d}"
    assert _count(conn, f"SELECT count(*) FROM {moved} WHERE delivery_id = %s", stray) == 1


def test_one_maintenance_at_a_time(conn: psycopg.Connection, db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as other:
        other.execute("SELECT pg_advisory_lock(%s)", (0x68697374,))
        assert not maintain(conn, history_days=30, days_ahead=3, today=TODAY).ran
        # released here, not by closing: a closed session's backend lets go of its locks
        # when it has exited, which the next statement can beat
        other.execute("SELECT pg_advisory_unlock(%s)", (0x68697374,))
    assert maintain(conn, history_days=30, days_ahead=3, today=TODAY).ran


def test_migration_from_the_unpartitioned_schema_keeps_every_row(stack: Stack) -> None:
    name = f"hs_m_{uuid.uuid4().hex[:10]}"
    url = stack.url_for(name)
    with psycopg.connect(stack.admin_url, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    try:
        with psycopg.connect(url, autocommit=True) as c:
            c.execute("CREATE TABLE schema_migrations (version text PRIMARY KEY,"
                      " applied_at timestamptz NOT NULL DEFAULT now())")
            for version, sql in migration_files():
                if version >= "0014":
                    break
                c.execute(sql.encode())
                c.execute("INSERT INTO schema_migrations (version) VALUES (%s)", (version,))
            ep = _endpoint(c)
            # Today's schema: v4 and v7 ids, days in and past the history, every status,
            # attempts; no committed_at on deliveries or attempts yet.
            c.execute("""
                INSERT INTO events (event_id, tenant, type, schema_version, occurred_at,
                                    committed_at, payload, payload_sha256)
                SELECT CASE WHEN g % 2 = 0 THEN gen_random_uuid() ELSE hookstream_uuid_v7() END,
                       'acme', 'a.b', 1, now() - g * interval '1 hour',
                       now() - g * interval '1 hour', convert_to(g::text, 'UTF8'),
                       sha256(convert_to(g::text, 'UTF8'))
                FROM generate_series(1, 1200) g""")
            c.execute("""
                INSERT INTO deliveries (event_id, endpoint_id, tenant, endpoint_config_version,
                                        status, attempts, expires_at, created_at)
                SELECT event_id, %s, 'acme', 1,
                       (ARRAY['pending','in_flight','delivered','dead','superseded'])
                           [1 + (row_number() OVER ()) %% 5], 2, committed_at + interval '1 day',
                       committed_at
                FROM events""", (ep,))
            c.execute("""
                INSERT INTO attempts (delivery_id, attempt_no, started_at, outcome)
                SELECT delivery_id, n, created_at, 'retry' FROM deliveries,
                       generate_series(1, 2) n""")
            before = {t: c.execute(f"SELECT md5(string_agg(r::text, ',' ORDER BY r::text))"
                                   f" FROM {t} r").fetchone() for t in ("events",)}
            d_before = c.execute(
                "SELECT d.*, e.committed_at FROM deliveries d JOIN events e USING (event_id)"
                " ORDER BY delivery_id").fetchall()
            a_before = c.execute(
                "SELECT a.*, e.committed_at FROM attempts a JOIN deliveries d USING (delivery_id)"
                " JOIN events e USING (event_id) ORDER BY 1, 2").fetchall()
        assert migrate(url) == [v for v, _ in migration_files() if v >= "0014"]
        with psycopg.connect(url, autocommit=True) as c:
            after = {t: c.execute(f"SELECT md5(string_agg(r::text, ',' ORDER BY r::text))"
                                  f" FROM {t} r").fetchone() for t in ("events",)}
            assert after == before
            cols = ("delivery_id, event_id, endpoint_id, tenant, endpoint_config_version, status,"
                    " attempts, next_attempt_at, expires_at, lease_version, lease_expires_at,"
                    " coalescing_key, last_error, created_at, updated_at, delivered_at,"
                    " superseded_by, parked, committed_at")
            assert c.execute(f"SELECT {cols} FROM deliveries ORDER BY delivery_id"
                             ).fetchall() == d_before
            assert c.execute(
                "SELECT delivery_id, attempt_no, started_at, finished_at, status_code,"
                " latency_ms, error_class, outcome, response_excerpt, manual, committed_at"
                " FROM attempts ORDER BY 1, 2").fetchall() == a_before
            assert len(d_before) == 1200 and len(a_before) == 2400
            # every row is in its day's partition, none in a default one
            assert _count(c, "SELECT count(*) FROM deliveries_default") == 0
            assert _count(c, "SELECT count(*) FROM deliveries d WHERE tableoid::regclass::text"
                             " <> 'deliveries_p' || to_char(committed_at AT TIME ZONE 'UTC',"
                             " 'YYYYMMDD')") == 0
            # and the migrated days expire like any other: forty days on, each is held
            # while it has pending or in-flight rows (every day here has some), and goes
            # once they are finished
            later = TODAY + timedelta(days=40)
            migrated_days = {r[0] for r in c.execute(
                "SELECT DISTINCT (committed_at AT TIME ZONE 'UTC')::date FROM deliveries")}
            run = maintain(c, history_days=30, days_ahead=3, today=later)
            assert set(run.held) == migrated_days and not set(run.dropped) & migrated_days
            c.execute("UPDATE deliveries SET status = 'dead'"
                      " WHERE status IN ('pending', 'in_flight')")
            run = maintain(c, history_days=30, days_ahead=3, today=later)
            assert run.held == {} and migrated_days <= set(run.dropped)
            assert _count(c, "SELECT count(*) FROM deliveries") == 0
    finally:
        with psycopg.connect(stack.admin_url, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
