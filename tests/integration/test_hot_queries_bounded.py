"""Issue #14, "hot paths touch no whole table": every query the services, the metrics
sampler and the API run periodically or per request is planned, on the real PostgreSQL,
against a history big enough (and ANALYZEd) that the planner would rather scan a whole
table than use a missing index, and no plan may hold a Seq Scan of the history tables.

The second test proves the first can fail: with one of the indexes these plans rely on
dropped (inside a transaction that is rolled back), the same query's plan scans the table.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import psycopg.rows
import psycopg.sql
import pytest

from hookstream.controlplane import store
from hookstream.controlplane.validation import DELIVERY_STATUSES
from hookstream.core.codec import DeliveryTask, TaskKind
from hookstream.core.counts import COUNT_CAP
from hookstream.io import queries
from services.dispatcher.store import AttemptRecord, Store
from tests.conftest import Stack

HISTORY = ("events", "deliveries", "attempts", "outbox")
# ~23 days of history, one partition a day (0014). Four times the rows of the unpartitioned
# test: the planner prices a probe of a partitioned table as one per partition (it does
# not count run-time pruning), so with 100 k rows, ~4 k a day, a join probing events or
# attempts by key looked dearer to it than reading the 28 small partitions whole, which
# no production history is small enough for.
ROWS = 400_000
STEP_S = 2_000_000 // ROWS  # seconds between two events
ENDPOINTS = 50


def _ep(i: int) -> uuid.UUID:
    return uuid.UUID(int=i)


TENANT_AND_ENDPOINTS = f"""
INSERT INTO tenants (id) VALUES ('acme');
INSERT INTO endpoints (id, tenant, url)
SELECT ('00000000-0000-0000-0000-' || lpad(to_hex(i), 12, '0'))::uuid, 'acme',
       'https://e' || i || '.example/'
FROM generate_series(1, {ENDPOINTS}) i;
"""

# A history shaped like production's: nearly every delivery delivered long ago, a handful
# pending / in flight / dead, one attempt per delivery, the outbox mostly published. The
# history tables are partitioned by day of the event's commit time (0014), one partition
# per day the seed covers (as the maintenance job makes them), and every delivery and
# attempt carries its event's committed_at.
SEED = f"""
SELECT hookstream_history_partitions(
    ((now() - {ROWS + 1} * interval '{STEP_S} s') AT TIME ZONE 'UTC')::date,
    ((now() AT TIME ZONE 'UTC') + interval '4 days')::date);
{TENANT_AND_ENDPOINTS}
INSERT INTO events (event_id, tenant, type, schema_version, occurred_at, committed_at,
                    payload, payload_sha256)
SELECT hookstream_uuid_v7(), 'acme', 'invoice.paid', 1, now() - i * interval '{STEP_S} s',
       now() - i * interval '{STEP_S} s', '\\x00', '\\x00'
FROM generate_series(1, {ROWS}) i;
INSERT INTO deliveries (event_id, endpoint_id, tenant, endpoint_config_version, status,
                        attempts, expires_at, created_at, updated_at, next_attempt_at,
                        committed_at)
SELECT e.event_id,
       ('00000000-0000-0000-0000-'
        || lpad(to_hex(1 + (row_number() OVER () % {ENDPOINTS})::int), 12, '0'))::uuid,
       'acme', 1, 'delivered', 1, e.committed_at + interval '1 day', e.committed_at,
       e.committed_at, e.committed_at, e.committed_at
FROM events e;
UPDATE deliveries SET status = 'pending', created_at = now(), next_attempt_at = now()
WHERE delivery_id IN (SELECT delivery_id FROM deliveries ORDER BY delivery_id LIMIT 50);
UPDATE deliveries SET status = 'in_flight', lease_expires_at = now() + interval '1 min'
WHERE delivery_id IN (SELECT delivery_id FROM deliveries WHERE status = 'delivered'
                      ORDER BY delivery_id LIMIT 20);
UPDATE deliveries SET status = 'dead', updated_at = now() - interval '2 h'
WHERE delivery_id IN (SELECT delivery_id FROM deliveries WHERE status = 'delivered'
                      ORDER BY delivery_id LIMIT 30);
INSERT INTO attempts (delivery_id, attempt_no, started_at, finished_at, outcome, committed_at)
SELECT delivery_id, 1, created_at, created_at, 'delivered', committed_at FROM deliveries;
INSERT INTO outbox (event_id, tenant, type, payload, published_at, created_at)
SELECT hookstream_uuid_v7(), 'acme', 'invoice.paid', '\\x00', now() - interval '2 h',
       now() - interval '2 h'
FROM generate_series(1, {ROWS});
INSERT INTO outbox (event_id, tenant, type, payload)
SELECT hookstream_uuid_v7(), 'acme', 'invoice.paid', '\\x00' FROM generate_series(1, 10);
"""


@pytest.fixture(scope="module")
def history_url(stack: Stack, template_db: str) -> Iterator[str]:
    """One seeded database for the module (seeding takes seconds; the tests only plan)."""
    name = f"hs_hot_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(stack.admin_url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name} TEMPLATE {template_db}")
    url = stack.url_for(name)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(SEED)
        conn.execute("VACUUM ANALYZE")
    yield url
    with psycopg.connect(stack.admin_url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


NOW = datetime.now(UTC)
EP = _ep(1)
HOUR_AGO = NOW - timedelta(hours=1)
ALL = list(DELIVERY_STATUSES)
FAR = datetime(9999, 1, 1, tzinfo=UTC)
ZERO = uuid.UUID(int=0)
MAX = uuid.UUID(int=2**128 - 1)
SOME = [uuid.uuid4() for _ in range(3)]
# the rows' partition key, carried by every task (0014)
AT = [NOW - timedelta(days=d) for d in (0, 1, 7)]

# (file, query, parameters): what each service runs on its loop or per request.
HOT: list[tuple[str, str, dict[str, Any]]] = [
    # the metrics sampler (fanout), every scrape interval
    ("observability", "pending_by_kind", {}),
    ("observability", "in_flight", {}),
    ("observability", "worst_endpoints", {"limit": 10}),
    ("observability", "endpoint_figures", {"ids": [str(EP)]}),
    ("observability", "endpoints_overdue", {"thresholds": [10.0, 60.0, 600.0]}),
    ("observability", "dead", {"cap": COUNT_CAP, "window_s": 900.0}),
    ("observability", "attempts_slice", {"after": None, "window_s": 900.0, "settle_s": 2.0}),
    # the relay, every round and every second
    ("relay", "claim_batch", {"limit": 500, "lease_s": 30.0, "token": 1, "lock_class": 1}),
    ("relay", "backlog", {"cap": COUNT_CAP, "head": 1000}),
    ("relay", "purge_published", {"retention_s": 3600.0, "limit": 5000}),
    # the dispatcher and its sweeper
    ("dispatcher", "claim_first", {"delivery_id": SOME, "committed_at": AT,
                                   "lease_version": [0, 0, 0], "manual": [False] * 3,
                                   "lease_s": 30.0}),
    ("dispatcher", "claim", {"delivery_id": SOME, "committed_at": AT,
                             "lease_version": [1, 1, 1], "manual": [False] * 3,
                             "lease_s": 30.0}),
    ("dispatcher", "expired_leases", {"limit": 500}),
    ("dispatcher", "load_endpoints", {"ids": [EP]}),
    ("sweeper", "sweep", {"after_s": 60.0, "per_endpoint": 100, "limit": 1000}),
    ("sweeper", "pull_forward", {"now": NOW.timestamp(), "factor": 0.5, "endpoint": EP}),
    ("dispatcher", "record_outcomes", {
        "delivery_id": SOME, "lease_version": [1] * 3, "attempt_no": [1] * 3,
        "status": ["delivered"] * 3, "started_at": [NOW.timestamp()] * 3,
        "finished_at": [NOW.timestamp()] * 3, "status_code": [200] * 3,
        "latency_ms": [5.0] * 3, "error_class": [None] * 3, "outcome": ["delivered"] * 3,
        "excerpt": [None] * 3, "error": [None] * 3, "next_at": [None] * 3,
        "committed_at": AT}),
    ("dispatcher", "release_expired", {"ids": SOME, "committed_at": AT, "versions": [1] * 3}),
    ("sweeper", "postpone", {"ids": SOME, "committed_at": AT, "versions": [1] * 3,
                             "due": [NOW.timestamp()] * 3}),
    ("sweeper", "park", {"ids": SOME, "committed_at": AT, "versions": [1] * 3,
                         "due": [NOW.timestamp()] * 3}),
    ("relay", "mark_published", {"ids": [1, 2, 3]}),
    # the fanout
    ("fanout", "stored_hashes", {"ids": SOME, "committed_at": AT}),
    ("fanout", "audiences", {"tenant": ["acme"], "type": ["invoice.paid"], "page": 1000}),
    ("fanout", "create_deliveries", {
        "event_id": SOME, "tenant": ["acme"] * 3, "type": ["invoice.paid"] * 3,
        "coalescing_key": [None] * 3, "committed_at": [NOW] * 3, "again": [True] * 3,
        "after": [None] * 3, "upto": [None] * 3, "window_s": 86400.0}),
    ("fanout", "coalesce", {"endpoint_id": [EP], "key": ["k"]}),
    ("fanout", "store_and_create", {
        "event_id": SOME, "tenant": ["acme"] * 3, "type": ["invoice.paid"] * 3,
        "schema_version": [1] * 3, "object_id": [None] * 3, "object_version": [None] * 3,
        "coalescing_key": [None] * 3, "occurred_at": [NOW] * 3, "committed_at": [NOW] * 3,
        "payload": [b"{}"] * 3, "sha": [b"x" * 32] * 3,
        "c_event_id": SOME, "c_tenant": ["acme"] * 3, "c_type": ["invoice.paid"] * 3,
        "c_coalescing_key": [None] * 3, "c_committed_at": [NOW] * 3, "c_after": [None] * 3,
        "c_upto": [None] * 3, "window_s": 86400.0}),
    # the API, per request
    ("api", "endpoint_health", {"id": EP, "window_start": HOUR_AGO, "all_statuses": ALL,
                                "cap": COUNT_CAP}),
    ("api", "last_error", {"id": EP, "window_start": HOUR_AGO, "all_statuses": ALL}),
    ("api", "list_deliveries", {"tenant": "acme", "endpoint_id": EP, "statuses": ALL,
                                "since": NOW - timedelta(days=30), "until": FAR,
                                "before_at": FAR, "before_id": MAX, "limit": 51}),
    ("api", "list_deliveries", {"tenant": "acme", "endpoint_id": None, "statuses": ["dead"],
                                "since": NOW - timedelta(days=30), "until": FAR,
                                "before_at": FAR, "before_id": MAX, "limit": 51}),
    ("api", "get_delivery", {"id": SOME[0], "tenant": "acme"}),
    ("api", "lock_delivery_for_replay", {"id": SOME[0], "tenant": "acme"}),
    ("api", "mark_pending", {"ids": SOME, "from_statuses": ["dead"]}),
    ("api", "count_replay_batch", {"endpoint_id": EP, "statuses": ["dead"],
                                   "since": NOW - timedelta(days=1), "until": FAR}),
    ("api", "count_replay_events", {"event_ids": SOME, "endpoint_id": EP, "tenant": "acme",
                                    "statuses": ["dead"], "since": NOW - timedelta(days=1),
                                    "until": FAR}),
    ("api", "delivery_attempts", {"id": SOME[0]}),
    ("api", "select_replay_batch", {"endpoint_id": EP, "statuses": ["dead"],
                                    "since": NOW - timedelta(days=1), "until": FAR,
                                    "after_at": NOW - timedelta(days=2), "after_id": ZERO,
                                    "limit": 500}),
    ("api", "list_events", {"tenant": "acme", "since": HOUR_AGO, "until": FAR,
                            "after_at": HOUR_AGO, "after_id": ZERO, "patterns": None,
                            "limit": 51}),
    ("api", "get_event", {"id": SOME[0], "tenant": "acme"}),
    ("console", "dead_letters", {"before_at": FAR, "before_id": MAX, "limit": 50}),
    # an endpoint's delete operation, one batch per transaction (hookstream.api.deletion)
    ("api", "select_history_batch", {"endpoint_id": EP, "limit": 5000}),
    ("api", "delete_history_attempts", {"ids": SOME, "committed_at": AT}),
    ("api", "delete_history_deliveries", {"ids": SOME, "committed_at": AT}),
    ("api", "remove_deleted_endpoint", {"id": EP}),
]


def _scans(node: dict[str, Any]) -> Iterator[tuple[str, str]]:
    if "Relation Name" in node:
        yield node["Node Type"], node["Relation Name"]
    for child in node.get("Plans", []):
        yield from _scans(child)


def parents(conn: psycopg.Connection[Any]) -> dict[str, str]:
    """Each partition (table or index) of a partitioned one, by name, to its parent's
    name: a plan names the partitions it reads (events_p20261202, attempts_p20261202_pkey,
    events_default), and a scan of any of them is one of its parent."""
    return dict(conn.execute(
        "SELECT c.relname, p.relname FROM pg_inherits i"
        " JOIN pg_class c ON c.oid = i.inhrelid JOIN pg_class p ON p.oid = i.inhparent"
        " WHERE p.relkind IN ('p', 'I')").fetchall())


# A partition holding fewer rows than this is read whole by the planner, rightly: a few
# pages cost what an index probe does. Just after midnight UTC today's partitions hold
# the minutes since (one row per STEP_S in the seed): a suite run that crossed midnight
# saw them read whole and failed 13 of these checks.
SMALL = 1_000


def small_partitions(conn: psycopg.Connection[Any]) -> set[str]:
    """The history partitions holding fewer than SMALL rows (the days ahead, the default
    partition, a day just begun)."""
    return {table for table, parent in parents(conn).items() if parent in HISTORY
            and conn.execute(sql_ident("SELECT count(*) FROM (SELECT FROM {} LIMIT %s) s",
                                       table), (SMALL,)).fetchone() != (SMALL,)}


def plan_scans(conn: psycopg.Connection[Any], concern: str, name: str,
               params: dict[str, Any]) -> list[tuple[str, str]]:
    """(node type, table) of every scan in the plan, a partition's named by its parent's
    name, except a small partition's (empty, or a day just begun): the planner rightly
    reads a table of a few pages whole, and that costs nothing; it keeps its own name (so
    it is no history table to whole_table_scans, and still shown)."""
    sql = queries.load(concern)[name]
    row = conn.execute("EXPLAIN (FORMAT JSON) " + sql, params).fetchone()
    assert row is not None
    parent = parents(conn)
    small = small_partitions(conn)
    return [(kind, table if table in small else parent.get(table, table))
            for kind, table in _scans(row[0][0]["Plan"])]


def sql_ident(template: str, name: str) -> psycopg.sql.Composed:
    return psycopg.sql.SQL(template).format(psycopg.sql.Identifier(name))


def whole_table_scans(scans: list[tuple[str, str]]) -> list[str]:
    return [table for kind, table in scans if kind == "Seq Scan" and table in HISTORY]


@pytest.mark.parametrize(("concern", "name", "params"), HOT,
                         ids=[f"{c}.{n}" for c, n, _ in HOT])
def test_no_hot_query_scans_a_history_table(history_url: str, concern: str, name: str,
                                            params: dict[str, Any]) -> None:
    with psycopg.connect(history_url) as conn:
        scans = plan_scans(conn, concern, name, params)
    assert not whole_table_scans(scans), scans


# The indexes each of these queries needs (a second one where another partial index would
# stand in): without them, the plan is a whole-table scan.
NEEDS: list[tuple[tuple[str, ...], str, str]] = [
    (("deliveries_dead",), "observability", "dead"),
    (("deliveries_lease", "deliveries_pending_age"), "observability", "in_flight"),
    (("outbox_pending",), "relay", "backlog"),
    (("outbox_published_at",), "relay", "purge_published"),
    (("deliveries_endpoint_status", "deliveries_due"), "api", "endpoint_health"),
    (("attempts_started_at",), "observability", "attempts_slice"),
    (("deliveries_endpoint_status",), "api", "select_history_batch"),
]


@pytest.mark.parametrize(("indexes", "concern", "name"), NEEDS,
                         ids=[f"{n[0][0]}-{n[2]}" for n in NEEDS])
def test_the_check_sees_a_missing_index(history_url: str, indexes: tuple[str, ...],
                                        concern: str, name: str) -> None:
    params = next(p for c, n, p in HOT if (c, n) == (concern, name))
    with psycopg.connect(history_url) as conn:
        assert not whole_table_scans(plan_scans(conn, concern, name, params))
        with conn.transaction(force_rollback=True):
            for index in indexes:
                conn.execute(f"DROP INDEX {index}")
            assert whole_table_scans(plan_scans(conn, concern, name, params))


# A day just begun: a few events committed minutes after its midnight, each delivered to
# one of the endpoints, as the seed's days are.
DAY_BEGUN_SQL = f"""
WITH e AS (
    INSERT INTO events (event_id, tenant, type, schema_version, occurred_at, committed_at,
                        payload, payload_sha256)
    SELECT hookstream_uuid_v7(), 'acme', 'invoice.paid', 1, %(at)s, %(at)s, '\\x00',
           '\\x00'
    FROM generate_series(1, 20) RETURNING event_id, committed_at
), d AS (
    INSERT INTO deliveries (event_id, endpoint_id, tenant, endpoint_config_version, status,
                            attempts, expires_at, created_at, updated_at, next_attempt_at,
                            committed_at)
    SELECT event_id, ('00000000-0000-0000-0000-'
                      || lpad(to_hex(1 + (row_number() OVER () %% {ENDPOINTS})::int), 12,
                              '0'))::uuid,
           'acme', 1, 'delivered', 1, committed_at + interval '1 day', now(), now(), now(),
           committed_at
    FROM e RETURNING delivery_id, committed_at
)
INSERT INTO attempts (delivery_id, attempt_no, started_at, finished_at, outcome, committed_at)
SELECT delivery_id, 1, now(), now(), 'delivered', committed_at FROM d
"""


def test_a_day_just_begun_is_read_whole_and_the_history_is_not(stack: Stack,
                                                                history_url: str) -> None:
    """Minutes after midnight UTC the new day's partitions hold a few rows and the
    planner reads them whole; a suite run that crossed midnight failed 13 of the checks
    above on that. Here tomorrow's partitions are made such a day (on a copy of the
    history, analyzed as autovacuum would): its small partitions are read whole by many
    plans, and still no plan reads the rest of the history whole."""
    copy = f"hs_hot_day_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(stack.admin_url, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {copy} TEMPLATE {history_url.rsplit('/', 1)[1]}")
    try:
        day = datetime.now(UTC).date() + timedelta(days=1)
        with psycopg.connect(stack.url_for(copy), autocommit=True) as conn:
            conn.execute(DAY_BEGUN_SQL, {"at": datetime(day.year, day.month, day.day, 0, 2,
                                                        tzinfo=UTC)})
            for table in ("events", "deliveries", "attempts"):
                conn.execute(sql_ident("ANALYZE {}", f"{table}_p{day:%Y%m%d}"))
            begun = {f"{table}_p{day:%Y%m%d}" for table in ("events", "deliveries",
                                                             "attempts")}
            assert begun <= small_partitions(conn)
            read_whole, wrong = set(), {}
            for concern, name, params in HOT:
                scans = plan_scans(conn, concern, name, params)
                read_whole |= {table for kind, table in scans
                               if kind == "Seq Scan" and table in begun}
                if whole_table_scans(scans):
                    wrong[f"{concern}.{name}"] = scans
        assert read_whole == begun  # the layout the checks failed on
        assert not wrong, wrong
    finally:
        with psycopg.connect(stack.admin_url, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {copy} WITH (FORCE)")


def test_counts_stop_at_the_cap_and_the_window_stays_exact(history_url: str) -> None:
    over = COUNT_CAP + 50
    with psycopg.connect(history_url) as conn, conn.transaction(force_rollback=True):
        conn.execute("""UPDATE deliveries SET status = 'dead', updated_at = now() - interval '2 h'
                        WHERE delivery_id IN (SELECT delivery_id FROM deliveries
                                              WHERE status = 'delivered' LIMIT %s)""", (over,))
        conn.execute("""UPDATE deliveries SET updated_at = now() WHERE delivery_id IN (
                        SELECT delivery_id FROM deliveries WHERE status = 'dead' LIMIT 7)""")
        conn.execute("UPDATE outbox SET published_at = NULL WHERE id IN ("
                     " SELECT id FROM outbox ORDER BY id LIMIT %s)", (over,))
        dead = conn.execute(queries.load("observability")["dead"],
                            {"cap": COUNT_CAP, "window_s": 900.0}).fetchone()
        backlog = conn.execute(queries.load("relay")["backlog"],
                               {"cap": COUNT_CAP, "head": 1000}).fetchone()
    assert dead == (COUNT_CAP, 7)
    assert backlog is not None and backlog[0] == COUNT_CAP
    assert 7190 < backlog[1] < 7400  # the lowest id's age: published 2 h ago in the seed


def _indexes(node: dict[str, Any]) -> Iterator[str]:
    if "Index Name" in node:
        yield node["Index Name"]
    for child in node.get("Plans", []):
        yield from _indexes(child)


def test_the_health_route_reads_only_its_endpoints_attempts(history_url: str) -> None:
    """Not the fleet's attempts of the window (attempts_started_at), however the planner
    weighs them: the endpoint's deliveries first, then each one's attempts.

    Partitioned (0014), the plan holds one attempts scan per day partition, each chosen
    on that partition's statistics, and run-time pruning runs only the one of each
    delivery's day. A partition with no attempt started in the window may be probed by
    attempts_started_at (an empty range of it costs nothing); every partition holding
    attempts of the window must be read by its primary key, never by that range."""
    params = next(p for c, n, p in HOT if (c, n) == ("api", "endpoint_health"))
    with psycopg.connect(history_url) as conn:
        row = conn.execute("EXPLAIN (FORMAT JSON) " + queries.load("api")["endpoint_health"],
                           params).fetchone()
        parent = parents(conn)
        table_of: dict[str, str] = dict(conn.execute(
            "SELECT i.relname, t.relname FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid"
            " JOIN pg_class t ON t.oid = x.indrelid").fetchall())
        # (a day just begun may be read whole: see SMALL)
        windowed = {t for (t,) in conn.execute(
            "SELECT DISTINCT tableoid::regclass::text FROM attempts WHERE started_at >= %s",
            (params["window_start"],))} - small_partitions(conn)
    assert row is not None
    assert windowed, "the seed has attempts in the window"
    used = set(_indexes(row[0][0]["Plan"]))
    # the indexes read on the partitions holding the window's attempts, by their parent's
    # name (the partitions' are attempts_p20261202_pkey, ...)
    on_windowed = {parent.get(index, index) for index in used if table_of[index] in windowed}
    assert on_windowed == {"attempts_pkey"}, (windowed, sorted(used))
    # ... and each of those partitions is read at all (by its primary key)
    assert windowed <= {table_of[index] for index in used}, (windowed, sorted(used))


def _rows_read(node: dict[str, Any], parent: dict[str, str], table: str) -> int:
    """Rows the scans of ``table``'s partitions returned, over all their loops."""
    own = 0
    if "Scan" in node["Node Type"] and parent.get(node.get("Relation Name", ""), "") == table:
        own = int(node["Actual Rows"]) * int(node["Actual Loops"])
    return own + sum(_rows_read(child, parent, table) for child in node.get("Plans", []))


LIST = next(p for c, n, p in HOT if (c, n) == ("api", "list_deliveries"))


def test_a_page_of_an_endpoints_deliveries_reads_a_page_not_the_endpoint(
        history_url: str) -> None:
    """A page of every status, newest first, from an endpoint of 8,000 deliveries: one
    scan of deliveries_endpoint_status with status = ANY(...) returned them ordered by
    status, so the endpoint's rows were all read and sorted for each page (624 ms at
    75 k rows in benchmarks.history_scale). The page must read about a page per status
    (each status's newest rows, plus a row at most from each day partition's scan)."""
    with psycopg.connect(history_url) as conn:
        (held,) = conn.execute("SELECT count(*) FROM deliveries WHERE endpoint_id = %s",
                               (EP,)).fetchone() or (0,)
        days = len([p for p, t in parents(conn).items() if t == "deliveries"])
        for cursor in ((FAR, MAX), (NOW - timedelta(days=10), MAX)):
            params = {**LIST, "before_at": cursor[0], "before_id": cursor[1]}
            row = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) "
                               + queries.load("api")["list_deliveries"], params).fetchone()
            assert row is not None
            read = _rows_read(row[0][0]["Plan"], parents(conn), "deliveries")
            bound = len(ALL) * (LIST["limit"] + days)
            assert held >= 8_000 and read <= bound < held / 4, (read, bound, held)


async def test_the_list_is_planned_with_its_values_on_every_call(history_url: str) -> None:
    """psycopg prepares a statement on its fifth run and PostgreSQL then settles on a
    generic plan, which for this query guesses a few rows per partition and reads every
    range whole (0.7 s at 50 k rows). api.store runs it unprepared: after a dozen calls
    on one connection the server holds no prepared list statement."""
    async with await psycopg.AsyncConnection.connect(
            history_url, autocommit=True, row_factory=psycopg.rows.dict_row) as conn:
        for _ in range(12):
            rows = await store.list_deliveries(
                conn, tenant="acme", endpoint_id=EP, statuses=ALL, since=LIST["since"],
                until=FAR, before=None, limit=51)
            assert len(rows) == 51
        cur = await conn.execute("SELECT statement FROM pg_prepared_statements")
        prepared = [r["statement"] for r in await cur.fetchall()]
    assert prepared == [], prepared  # the list is all this connection ran


# A day's backlog the statistics have not seen yet (autovacuum analyzes a partition after
# a tenth of it changed; a fresh day's backlog grows long before that): its rows pending,
# as a fanout burst or a receiver's outage leaves them.
BACKLOG = 20_000
BACKLOG_SQL = f"""
WITH e AS (
    INSERT INTO events (event_id, tenant, type, schema_version, occurred_at, committed_at,
                        payload, payload_sha256)
    SELECT hookstream_uuid_v7(), 'acme', 'invoice.paid', 1, now(), now(), '\\x00', '\\x00'
    FROM generate_series(1, {BACKLOG})
    RETURNING event_id, committed_at
)
INSERT INTO deliveries (event_id, endpoint_id, tenant, endpoint_config_version, status,
                        attempts, expires_at, committed_at)
SELECT event_id, '{_ep(2)}', 'acme', 1, 'pending', 0, committed_at + interval '1 day',
       committed_at FROM e
"""


def _explain(conn: psycopg.Connection[Any], concern: str, name: str,
             params: dict[str, Any]) -> dict[str, Any]:
    row = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + queries.load(concern)[name],
                       params).fetchone()
    assert row is not None
    return row[0][0]["Plan"]


def _batch_plans(conn: psycopg.Connection[Any], batch: list[tuple[uuid.UUID, datetime]]
                 ) -> dict[str, tuple[dict[str, Any], int]]:
    """EXPLAIN ANALYZE of every statement that joins a batch of rows to deliveries, each
    as its service runs it on ``batch`` (in the order a delivery meets them), with the
    number of rows it may read: about its batch, never the day's backlog."""
    ids, at = [b[0] for b in batch], [b[1] for b in batch]
    n = len(batch)
    now = datetime.now(UTC).timestamp()
    events = conn.execute("SELECT event_id FROM deliveries WHERE delivery_id = ANY(%s)",
                          (ids,)).fetchall()
    plans: dict[str, tuple[dict[str, Any], int]] = {}
    # the fanout's second pass over the batch's events (a relay duplicate): every
    # matching endpoint's row is looked up, ENDPOINTS per event
    plans["fanout.create_deliveries"] = (_explain(conn, "fanout", "create_deliveries", {
        "event_id": [e[0] for e in events], "tenant": ["acme"] * n,
        "type": ["invoice.paid"] * n, "coalescing_key": [None] * n, "committed_at": at,
        "again": [True] * n, "after": [None] * n, "upto": [None] * n,
        "window_s": 86400.0}), 3 * n * ENDPOINTS)
    slots = {"ids": ids, "committed_at": at, "versions": [0] * n, "due": [now] * n}
    plans["sweeper.postpone"] = (_explain(conn, "sweeper", "postpone", slots), 3 * n)
    plans["sweeper.park"] = (_explain(conn, "sweeper", "park", slots), 3 * n)
    # first attempts (lease version 0) claim with claim_first
    plans["dispatcher.claim_first"] = (_explain(conn, "dispatcher", "claim_first", {
        "delivery_id": ids, "committed_at": at, "lease_version": [0] * n,
        "manual": [False] * n, "lease_s": 30.0}), 3 * n)
    # the outcome of a retry: the row back to pending, as a dispatcher records it
    plans["dispatcher.record_outcomes"] = (_explain(conn, "dispatcher", "record_outcomes", {
        "delivery_id": ids, "lease_version": [1] * n, "attempt_no": [1] * n,
        "status": ["pending"] * n, "started_at": [now] * n, "finished_at": [now] * n,
        "status_code": [503] * n, "latency_ms": [5.0] * n, "error_class": ["http_5xx"] * n,
        "outcome": ["retry"] * n, "excerpt": [None] * n, "error": [None] * n,
        "next_at": [None] * n, "committed_at": at}), 3 * n)
    # the retries' tasks (lease version 1) take the whole claim
    plans["dispatcher.claim"] = (_explain(conn, "dispatcher", "claim", {
        "delivery_id": ids, "committed_at": at, "lease_version": [1] * n,
        "manual": [False] * n, "lease_s": 30.0}), 3 * n)
    conn.execute("UPDATE deliveries SET status = 'in_flight', lease_version = 2,"
                 " lease_expires_at = now() - interval '1 s' WHERE delivery_id = ANY(%s)",
                 (ids,))
    plans["dispatcher.release_expired"] = (_explain(conn, "dispatcher", "release_expired", {
        "ids": ids, "committed_at": at, "versions": [2] * n}), 3 * n)
    return plans


def test_a_batch_reads_its_rows_not_the_days_backlog(history_url: str) -> None:
    """Each statement that joins a batch to deliveries (claim, outcomes, the reaper's
    release, the dispatcher's postpone and park, the fanout's second pass) was planned
    from statistics older than the day's backlog: the join ran as a hash join over every
    pending row of every partition (through the status partial indexes, which looked
    nearly empty). A claim of 100 read 40,400 rows in benchmarks.history_scale, and the
    cost of an attempt grew with the backlog. Each must read about its batch's rows, by
    primary key, in the batch's day only."""
    with psycopg.connect(history_url) as conn, conn.transaction(force_rollback=True):
        conn.execute(BACKLOG_SQL)
        batch = conn.execute("SELECT delivery_id, committed_at FROM deliveries"
                             " WHERE endpoint_id = %s AND status = 'pending'"
                             " ORDER BY delivery_id DESC LIMIT 10", (_ep(2),)).fetchall()
        plans = _batch_plans(conn, batch)
        parent = parents(conn)
        day = f"deliveries_p{datetime.now(UTC):%Y%m%d}"
        wrong = {}
        for name, (plan, bound) in plans.items():
            read = _rows_examined(plan, parent, "deliveries")
            touched = {n for n in _relations(plan) if parent.get(n) == "deliveries"}
            if read > bound or touched != {day}:
                wrong[name] = (read, bound, sorted(touched)[:4])
        assert not wrong, repr(wrong)
        # and each did its work: the claim claimed, the release released, every one
        assert plans["dispatcher.claim_first"][0]["Actual Rows"] == len(batch)
        assert plans["dispatcher.claim"][0]["Actual Rows"] == len(batch)
        assert conn.execute("SELECT count(*) FROM deliveries WHERE delivery_id = ANY(%s)"
                            " AND status = 'pending' AND lease_expires_at IS NULL",
                            ([b[0] for b in batch],)).fetchone() == (len(batch),)


def _nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node.get("Plans", []):
        yield from _nodes(child)


def _batch_joins(plan: dict[str, Any], n: int, parent: dict[str, str]) -> dict[str, Any]:
    """What in ``plan`` grows with the square of its batch of ``n`` rows: a join that
    compares each row with every other (its join filter throws away ~n² rows), and a
    probe per row whose index condition also walks an array of the whole batch (an
    ``= ANY`` of a parameter, searched element by element on every probe); and the
    cause of both, the planner expecting a handful of rows where the batch reads n."""
    found: dict[str, Any] = {}
    expected = 0.0
    for node in _nodes(plan):
        removed = int(node.get("Rows Removed by Join Filter", 0))
        if removed >= n * n // 4:
            found[f"{node['Node Type']}: join filter removed"] = removed
        name = parent.get(node.get("Relation Name", ""), "")
        cond = node.get("Index Cond", "")
        if int(node.get("Actual Loops", 0)) > 1 and "ANY" in cond:
            found[f"{node['Node Type']} of {name} per row, with"] = cond[:120]
        if (name == "deliveries" and "Scan" in node["Node Type"]
                and node.get("Parent Relationship") != "Inner"):
            expected += float(node["Plan Rows"])
    if expected < n / 10:
        found["deliveries rows expected"] = expected
    return found


def test_a_batch_is_joined_to_its_rows_once_not_row_by_row(history_url: str) -> None:
    """Issue #15's saturation gap. The batch statements named the batch's days as
    committed_at = ANY(its commit times); PostgreSQL multiplies that by the selectivity
    of delivery_id = ANY(its ids), as if independent, and expected one row from a claim
    of 200. On that estimate it ran each join to the batch as a nested loop with the
    batch inside: the claim compared every row with every task (39,800 rows removed by
    its join filter), read endpoints whole once per row, and its takeover update walked
    all 200 ids per probe: 8.6 ms of execution a claim where the same work by hash
    takes 4.9 ms (benchmarks.batch_statements), and more as the batch grows. Each
    batch statement must expect about its batch, and join it in one pass."""
    n = 200
    with psycopg.connect(history_url) as conn, conn.transaction(force_rollback=True):
        conn.execute(BACKLOG_SQL)
        # a dispatcher's batch: mostly today's rows, a few retries of yesterday's
        batch = conn.execute(
            "(SELECT delivery_id, committed_at FROM deliveries WHERE endpoint_id = %s"
            "  AND status = 'pending' ORDER BY delivery_id DESC LIMIT %s)"
            " UNION ALL (SELECT delivery_id, committed_at FROM deliveries"
            "  WHERE committed_at >= now() - interval '1 day' - interval '1 hour'"
            "    AND committed_at < now() - interval '1 day' ORDER BY delivery_id LIMIT 10)",
            (_ep(2), n - 10)).fetchall()
        assert len(batch) == n
        conn.execute("UPDATE deliveries SET status = 'pending' WHERE delivery_id = ANY(%s)",
                     ([b[0] for b in batch],))
        plans = _batch_plans(conn, batch)
        parent = parents(conn)
        wrong = {name: found for name, (plan, _) in plans.items()
                 if name.startswith(("dispatcher.", "sweeper."))
                 and (found := _batch_joins(plan, n, parent))}
        assert not wrong, repr(wrong)
        assert plans["dispatcher.claim_first"][0]["Actual Rows"] == n
        assert plans["dispatcher.claim"][0]["Actual Rows"] == n


@pytest.mark.parametrize("zone", ["UTC", "America/Sao_Paulo", "Asia/Kolkata"])
def test_a_batchs_days_are_the_utc_days_of_its_rows(history_url: str, zone: str) -> None:
    """The bounds the batch statements prune by (0017) hold every row of the batch and
    are whole UTC days, the partitions' (0014), whatever the session's time zone; an
    empty batch selects nothing (NULL bounds)."""
    at = [datetime(2026, 12, 3, 23, 59, 59, 999_999, tzinfo=UTC),
          datetime(2026, 12, 1, 0, 0, tzinfo=UTC), datetime(2026, 12, 2, 12, tzinfo=UTC)]
    with psycopg.connect(history_url) as conn:
        conn.execute(f"SET TimeZone = '{zone}'")
        row = conn.execute("SELECT hookstream_days_from(%(at)s::timestamptz[]),"
                           " hookstream_days_until(%(at)s::timestamptz[]),"
                           " hookstream_days_from('{}'), hookstream_days_until('{}')",
                           {"at": at}).fetchone()
    assert row == (datetime(2026, 12, 1, tzinfo=UTC), datetime(2026, 12, 4, tzinfo=UTC),
                   None, None)


def test_a_sweep_reads_the_due_rows_not_the_parked_backlog(history_url: str) -> None:
    """A slow endpoint's backlog parked at its slots (an hour ahead here), ten of its rows
    overdue (their tasks lost), and the seed's 50 pending rows. The sweep read each
    endpoint's pending rows through deliveries_pending_age and sorted them (statistics
    older than the backlog priced every status index alike) and hashed the whole table
    to lock what it picked: 1.4 M rows read to return 60. It must read the due rows,
    by deliveries_due in order, and lock and update them by key."""
    with psycopg.connect(history_url) as conn, conn.transaction(force_rollback=True):
        conn.execute(BACKLOG_SQL)
        overdue = [r[0] for r in conn.execute(
            "UPDATE deliveries SET next_attempt_at = now() - interval '1 h' WHERE delivery_id IN"
            " (SELECT delivery_id FROM deliveries WHERE endpoint_id = %s AND status = 'pending'"
            "  ORDER BY delivery_id DESC LIMIT 10) RETURNING delivery_id", (_ep(2),))]
        conn.execute("UPDATE deliveries SET parked = true, next_attempt_at = now() + interval '1 h'"
                     " WHERE endpoint_id = %s AND status = 'pending' AND delivery_id <> ALL(%s)",
                     (_ep(2), overdue))
        # the sweep's own rows (the seed's pending ones too once a minute old), and the
        # rows its probe may look at: every pending row due by now
        due, candidates = conn.execute(
            "SELECT count(*) FILTER (WHERE next_attempt_at < now() - interval '60 s'),"
            " count(*) FROM deliveries WHERE status = 'pending' AND next_attempt_at <= now()"
        ).fetchone() or (0, 0)
        conn.execute("SET LOCAL enable_sort = off")  # as the dispatcher's Store runs it
        plan = _explain(conn, "sweeper", "sweep",
                        {"after_s": 60.0, "per_endpoint": 100, "limit": 1000})
        # A small partition (the seed's first day, begun minutes before its midnight at
        # some hours of the day: 383 rows at 02:50 UTC) is read whole, rightly, as
        # plan_scans allows; its rows are not the backlog's.
        small = small_partitions(conn)
        big = {table: p for table, p in parents(conn).items() if table not in small}
        read = _rows_examined(plan, big, "deliveries")
        assert plan["Actual Rows"] == due >= 10, (plan["Actual Rows"], due)
        assert read <= 3 * candidates < BACKLOG / 10, (read, candidates)
        assert conn.execute("SELECT count(*) FROM deliveries WHERE delivery_id = ANY(%s)"
                            " AND next_attempt_at >= now()", (overdue,)).fetchone() == (10,)


def test_coalescing_reads_its_keys_rows_once_the_day_is_analyzed(history_url: str) -> None:
    """The coalescing statement needs deliveries_coalesce, a partial index on pending rows
    like two others, and the planner picks among them by statistics: planned from a day
    analyzed before its backlog, it read every pending row of the day through
    deliveries_pending_age (20,000 to find none). No shape of the statement rules that
    out, so the day is analyzed after each 10,000 changed rows (migration 0016, done by
    autovacuum within its next round): analyzed, it reads the key's rows only."""
    with psycopg.connect(history_url) as conn, conn.transaction(force_rollback=True):
        conn.execute(BACKLOG_SQL)
        conn.execute("UPDATE deliveries SET coalescing_key = 'order-1' WHERE delivery_id IN"
                     " (SELECT delivery_id FROM deliveries WHERE endpoint_id = %s"
                     "  AND status = 'pending' ORDER BY delivery_id DESC LIMIT 3)", (_ep(2),))
        conn.execute(psycopg.sql.SQL("ANALYZE {}").format(psycopg.sql.Identifier(
            f"deliveries_p{datetime.now(UTC):%Y%m%d}")))
        plan = _explain(conn, "fanout", "coalesce", {"endpoint_id": [_ep(2)],
                                                     "key": ["order-1"]})
        read = _rows_examined(plan, parents(conn), "deliveries")
        assert plan["Actual Rows"] == 2  # the two older of the three superseded
        assert read <= 3 * 3, read


def _deliveries_index_reads(conn: psycopg.Connection[Any]) -> int:
    conn.execute("SELECT pg_stat_clear_snapshot()")
    (n,) = conn.execute(
        "SELECT coalesce(sum(s.idx_tup_read), 0) FROM pg_stat_user_indexes s"
        " JOIN pg_inherits i ON i.inhrelid = s.relid JOIN pg_class p ON p.oid = i.inhparent"
        " WHERE p.relname = 'deliveries'").fetchone() or (0,)
    return int(n)


async def _gone(conn: psycopg.Connection[Any], app: str) -> None:
    """Until every backend of ``app`` has exited: a backend flushes its statistics as it
    exits, and they are only then in pg_stat_user_indexes."""
    deadline = time.monotonic() + 10
    while conn.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
                       (app,)).fetchone() != (0,):
        assert time.monotonic() < deadline, f"{app} still connected"
        await asyncio.sleep(0.05)


async def test_the_dispatchers_sweep_is_planned_without_sorts(history_url: str) -> None:
    """The same backlog, committed, swept by the dispatcher's Store: the index entries
    its backend read (pg_stat_user_indexes) stay about the rows it returned. Without
    the Store's enable_sort off, the planner sorts deliveries_pending_age's rows and
    this reads the whole backlog."""
    tag = uuid.uuid4().hex[:8]
    with psycopg.connect(history_url, autocommit=True) as watch:
        try:
            with psycopg.connect(history_url, autocommit=True,
                                 application_name=f"setup-{tag}") as conn:
                conn.execute(BACKLOG_SQL)
                conn.execute("UPDATE deliveries SET next_attempt_at = now() - interval '1 h'"
                             " WHERE delivery_id IN (SELECT delivery_id FROM deliveries"
                             "  WHERE endpoint_id = %s AND status = 'pending'"
                             "  ORDER BY delivery_id DESC LIMIT 10)", (_ep(2),))
                conn.execute("UPDATE deliveries SET parked = true,"
                             " next_attempt_at = now() + interval '1 h' WHERE endpoint_id = %s"
                             " AND status = 'pending'"
                             " AND next_attempt_at > now() - interval '1 min'", (_ep(2),))
                # the index entries of the rows' versions before these updates go too:
                # a scan reads a dead entry until it is vacuumed (or once, to mark it)
                conn.execute(psycopg.sql.SQL("VACUUM {}").format(psycopg.sql.Identifier(
                    f"deliveries_p{datetime.now(UTC):%Y%m%d}")))
            await _gone(watch, f"setup-{tag}")
            before = _deliveries_index_reads(watch)
            st = Store(f"{history_url}?application_name=sweep-{tag}", 30.0, max_size=1)
            await st.open()
            swept = await st.sweep(after_s=60.0, per_endpoint=100, limit=1000)
            await st.close()
            await _gone(watch, f"sweep-{tag}")
            read = _deliveries_index_reads(watch) - before
        finally:
            watch.execute("DELETE FROM deliveries WHERE endpoint_id = %s AND attempts = 0"
                          " AND committed_at > now() - interval '1 h'", (_ep(2),))
            watch.execute("DELETE FROM events e WHERE committed_at > now() - interval '1 h'"
                          " AND NOT EXISTS (SELECT FROM deliveries d WHERE d.event_id ="
                          " e.event_id AND d.committed_at = e.committed_at)")
    assert len(swept) >= 10 and read <= 3 * (len(swept) + 50) < BACKLOG / 10, (read, len(swept))


def _rows_examined(node: dict[str, Any], parent: dict[str, str], table: str) -> int:
    """Rows the scans of ``table``'s partitions looked at, over all their loops: those
    returned and those their filters threw away."""
    own = 0
    if "Scan" in node["Node Type"] and parent.get(node.get("Relation Name", ""), "") == table:
        own = int(node["Actual Loops"]) * sum(int(node.get(k, 0)) for k in (
            "Actual Rows", "Rows Removed by Filter", "Rows Removed by Index Recheck"))
    return own + sum(_rows_examined(child, parent, table) for child in node.get("Plans", []))


def _relations(node: dict[str, Any]) -> Iterator[str]:
    """The tables the plan's scans read (a scan never executed reads nothing)."""
    if "Relation Name" in node and "Scan" in node["Node Type"] and node["Actual Loops"]:
        yield node["Relation Name"]
    for child in node.get("Plans", []):
        yield from _relations(child)


def _scans_by_partition(conn: psycopg.Connection[Any]) -> dict[str, int]:
    """Scans (sequential + index) of every partition of the three history tables."""
    conn.execute("SELECT pg_stat_clear_snapshot()")
    return {name: int(n) for name, n in conn.execute(
        "SELECT c.relname, coalesce(s.seq_scan, 0) + coalesce(s.idx_scan, 0)"
        " FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid"
        " JOIN pg_inherits i ON i.inhrelid = s.relid JOIN pg_class p ON p.oid = i.inhparent"
        " WHERE p.relname IN ('events', 'deliveries', 'attempts')").fetchall()}


ROUNDS = 20  # prepared on the 5th run, 5 custom plans more, then PostgreSQL may go generic
# A saturated dispatcher's batch: planned with its values, a few hundred probes look
# dearer than the generic plan's guess (an array parameter of unknown length), so
# PostgreSQL settles on the generic plan (it did not for batches of 100 here).
BATCH = 300


@pytest.fixture
def young_url(stack: Stack, template_db: str) -> Iterator[str]:
    """A database as a new deployment's: the partitions migrations make (yesterday to
    three days ahead, and the default), one tenant, its endpoints."""
    name = f"hs_young_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(stack.admin_url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name} TEMPLATE {template_db}")
    url = stack.url_for(name)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(TENANT_AND_ENDPOINTS)
    yield url
    with psycopg.connect(stack.admin_url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


async def test_a_dispatcher_connection_probes_its_batches_day_run_after_run(
        young_url: str) -> None:
    """The claim and the outcomes name their partitions as committed_at = ANY(array).
    PostgreSQL prunes by an array only when it plans with the array's values: once
    psycopg prepared the statements (5th run) and the server settled on a generic plan
    (5 runs later), every claim and every outcome probed every day's partition of
    deliveries for every row, and a plan made while today's attempts
    partition was small read it whole on every call (saturation runs: 156 buffers per
    delivery against 34 unpartitioned). The dispatcher's connections plan each statement
    with its values: run after run on one connection, only today's partitions are read."""
    tag = uuid.uuid4().hex[:8]
    today = f"{datetime.now(UTC):%Y%m%d}"
    ep = _ep(3)
    with psycopg.connect(young_url, autocommit=True) as watch:
        with psycopg.connect(young_url, autocommit=True,
                             application_name=f"setup-{tag}") as conn:
            rows = conn.execute(BACKLOG_SQL.replace(str(_ep(2)), str(ep))
                                .replace(str(BACKLOG), str(ROUNDS * BATCH))
                                + " RETURNING delivery_id, event_id, committed_at"
                                ).fetchall()
        await _gone(watch, f"setup-{tag}")
        before = _scans_by_partition(watch)
        st = Store(f"{young_url}?application_name=disp-{tag}", 30.0, max_size=1)
        await st.open()
        now = time.time()
        delivered = 0
        for r in range(ROUNDS):
            claims = await st.claim([
                DeliveryTask(delivery_id, event_id, ep, "acme", TaskKind.NEW,
                             committed_at, committed_at)
                for delivery_id, event_id, committed_at in rows[r * BATCH:(r + 1) * BATCH]])
            delivered += await st.record([
                AttemptRecord(c, "delivered", now, now, 200, 1.0, None, "delivered",
                              None, None, None) for c in claims], {}, {})
        await st.close()
        await _gone(watch, f"disp-{tag}")
        after = _scans_by_partition(watch)
    assert delivered == ROUNDS * BATCH
    read = {name: n - before.get(name, 0) for name, n in after.items()
            if n > before.get(name, 0)}
    others = {name: n for name, n in read.items() if not name.endswith(today)}
    assert not others and len(read) == 3, read
