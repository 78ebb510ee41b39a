"""Issue #14's benchmark: the partitioned history (migration 0014) at the production
design's shape, scaled to this machine, beside an empty database in the same run.

Two fresh databases on the local stack, both migrated (hookstream.ops.migrate), both with
the same 100 tenants of 4 endpoints each (subscribed to ``*``, made through the API's
store so each has its sealed secret) and the day partitions of ``today - days`` …
``today + 3`` (``hookstream_history_partitions``). The *full* one also gets ``--days``
past days (``today - days`` … yesterday) of history written in bulk with SQL, one
``INSERT … SELECT generate_series`` per table and day (``--jobs`` days at a time):

* ``--per-day / 4`` events a day, evenly spread over the day, UUIDv7 ids of their commit
  time, ~300-byte JSON payloads, 10 % of them for one large tenant (``acme``), the rest
  over 99 small ones; every event reaches its tenant's 4 endpoints;
* ``--per-day`` deliveries a day: ~89 % delivered at the first attempt, ~10 % after a
  second, ~1 % dead after two; on the last day a few (0.05 %) still pending a retry and
  in flight, as a live system has them;
* ~1.1 attempts per delivery (their rows, outcomes, latencies, excerpts);
* each day's three partitions VACUUM ANALYZEd once written (autovacuum would have),
  the parents ANALYZEd at the end.

Then, measured:

1. fanout and dispatcher database work, full beside empty (the ratio; the aim is ≥ 0.9):
   a loop over the real statements with the services' parameter shapes — fanout:
   ``store_events`` + ``audiences`` + ``create_deliveries`` (hookstream.fanout.plan) in
   batches of 500 events committed now; dispatcher: the real ``Store.claim`` and
   ``Store.record`` (hookstream.dispatcher.store) in batches of ``--batch`` on the rows
   the fanout loop just made. Rates are rows over the time spent in the statements;
   ``--rounds`` rounds, full and empty interleaved, medians reported.
2. the API's list and detail routes on the full database over real HTTP (the real app,
   ``hookstream.api.server.ApiServer``): ``GET /v1/deliveries?endpoint_id=…`` (a large
   and a small tenant's endpoint, and with ``status=dead``), ``GET /v1/events?since=…``,
   ``GET /v1/deliveries/{id}`` of random ids over the whole history; p50/p99 over
   ``--requests`` requests each (after 5 untimed; fewer, at least 20, once a route has
   taken ``--route-seconds``), plus EXPLAIN ANALYZE of the
   statements behind them. The aim is p99 < 50 ms.
3. retention on the full database: ``hookstream.ops.retention.maintain(…,
   history_days=days, today=today + 1)``, so exactly the oldest day expires, while a
   writer thread (the real create_deliveries, claim and record_outcomes statements on
   today's partition, one cycle every 10 ms) runs; its statement latencies before,
   during and after the run, its errors, and a count + digest of the kept days' pending
   and in-flight rows before and after.
4. bytes on disk per delivery: pg_table_size (heap, TOAST, maps) and index sizes of
   events + deliveries + attempts over all partitions, by table and by index.
5. WAL bytes per attempt (pg_current_wal_lsn() around ``--wal-cycles`` claim +
   record cycles on a quiet cluster) and the HOT ratio of those updates (n_tup_hot_upd /
   n_tup_upd of today's deliveries and attempts partitions), full and empty.

    python -m benchmarks.history_scale                          # 30 days x 1 M deliveries
    python -m benchmarks.history_scale --days 3 --per-day 20000 --label small     # quick
    python -m benchmarks.history_scale --per-day 500000 --label half  # when 30 M won't fit
    python -m benchmarks.history_scale --keep      # keep both databases (hs_bench_hscale_*)

Results (JSON) land in bench-results/history-scale-<label>-<time>.json. The machine's
load during the run is recorded (busy fraction of all cores per phase): other people's
work on shared cores slows both databases alike only when the rounds interleave.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import statistics
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, date, datetime, timedelta
from typing import Any

import aiohttp
import orjson
import psycopg
from hookstream.dispatcher.store import AttemptRecord, Store
from hookstream.fanout.plan import Audience, plan
from psycopg.rows import dict_row

from benchmarks.common import (
    RESULTS,
    busy_fraction,
    drop_database,
    drop_topics,
    fresh_env,
    machine_cpu,
)
from hookstream.api.server import ApiServer
from hookstream.controlplane import store as api_store
from hookstream.controlplane.validation import DELIVERY_STATUSES, EndpointSpec
from hookstream.core.codec import DeliveryTask, TaskKind
from hookstream.core.settings import ApiSettings
from hookstream.dev.localstack.devkeys import development_keyring
from hookstream.io import queries
from hookstream.ops.retention import maintain

FANOUT = queries.load("fanout")
DISPATCH = queries.load("dispatcher")
API = queries.load("api")

TENANTS = 100  # tenant 0 ("acme") takes 10 % of the events, the other 99 share the rest
ENDPOINTS_PER_TENANT = 4
TYPES = ("invoice.paid", "invoice.created", "customer.updated", "charge.succeeded")
FANOUT_BATCH = 500  # FANOUT_BATCH_SIZE's default
ROWS_PER_STATEMENT = 5_000  # FANOUT_MAX_ROWS_PER_STATEMENT's default
RETRY_WINDOW_S = 86_400.0
LEASE_S = 60.0


def tenant_name(k: int) -> str:
    return "acme" if k == 0 else f"tenant-{k:03d}"


def v7_sql(ts: str) -> str:
    """A UUIDv7 of the instant ``ts`` (an SQL expression), as hookstream_uuid_v7() makes
    of the clock: the seed's ids are ordered by their rows' own times."""
    return ("encode(set_bit(set_bit(overlay(uuid_send(gen_random_uuid()) PLACING"
            f" substring(int8send(floor(extract(epoch FROM {ts}) * 1000)::bigint) FROM 3)"
            " FROM 1 FOR 6), 52, 1), 53, 1), 'hex')::uuid")


def uuid7(at_s: float | None = None) -> uuid.UUID:
    ms = int((time.time() if at_s is None else at_s) * 1000) & (2**48 - 1)
    v = (ms << 80) | int.from_bytes(os.urandom(10), "big")
    v = (v & ~(0xF << 76)) | (0x7 << 76)
    v = (v & ~(0x3 << 62)) | (0x2 << 62)
    return uuid.UUID(int=v)


# -- seeding ---------------------------------------------------------------------------
SEED_EVENTS = """
INSERT INTO events (event_id, tenant, type, schema_version, object_id, object_version,
                    coalescing_key, occurred_at, committed_at, payload, payload_sha256,
                    stored_at)
SELECT {v7}, s.tenant, s.type, 1, s.object_id, s.i, NULL, s.ts - interval '40 ms', s.ts,
       s.payload, sha256(s.payload), s.ts + interval '150 ms'
FROM (
    SELECT i, ts, type, tenant, 'in_' || substr(h, 1, 16) AS object_id,
           convert_to(json_build_object(
               'id', 'evt_' || substr(h, 1, 24), 'type', type,
               'created', floor(extract(epoch FROM ts)),
               'data', json_build_object(
                   'object', 'invoice', 'id', 'in_' || substr(h, 1, 16),
                   'customer', 'cus_' || substr(h, 17, 14), 'amount_due', (i * 7919) %% 100000,
                   'currency', 'eur', 'status', 'paid', 'number', 'INV-' || lpad(i::text, 8, '0'),
                   'description', 'Subscription renewal, plan ' || (i %% 7),
                   'lines', json_build_array(json_build_object(
                       'price', 'price_' || substr(h, 5, 12), 'quantity', 1 + i %% 3)))
           )::text, 'UTF8') AS payload
    FROM (
        SELECT i, %(lo)s::timestamptz + (i - 0.5) * %(step)s * interval '1 second' AS ts,
               (ARRAY{types})[1 + i %% 4] AS type,
               CASE WHEN i %% 10 = 0 THEN 'acme'
                    ELSE 'tenant-' || lpad((1 + i %% 99)::text, 3, '0') END AS tenant,
               md5(%(day)s || ':' || i) AS h
        FROM generate_series(1, %(n)s) i
    ) g
) s
"""

# Every event to its tenant's endpoints; r decides the row's fate (and, live only on
# the last day, keeps a few rows pending a retry or in flight).
SEED_DELIVERIES = """
INSERT INTO deliveries (delivery_id, event_id, endpoint_id, tenant, endpoint_config_version,
                        status, attempts, next_attempt_at, expires_at, lease_version,
                        lease_expires_at, coalescing_key, last_error, created_at, updated_at,
                        delivered_at, superseded_by, parked, committed_at)
SELECT {v7}, s.event_id, s.endpoint_id, s.tenant, 1, s.status, s.attempts,
       CASE WHEN s.status = 'pending' THEN now() + interval '10 minutes'
            ELSE s.created END,
       s.committed_at + interval '1 day', s.attempts,
       CASE WHEN s.status = 'in_flight' THEN now() + interval '1 hour' END,
       NULL,
       CASE s.status WHEN 'dead' THEN 'HTTP 410' WHEN 'pending' THEN 'HTTP 503' END,
       s.created,
       s.created + (s.attempts - 1) * interval '30 s' + interval '250 ms',
       CASE WHEN s.status = 'delivered'
            THEN s.created + (s.attempts - 1) * interval '30 s' + interval '250 ms' END,
       NULL, false, s.committed_at
FROM (
    SELECT x.*,
           CASE WHEN %(live)s AND r >= 0.9999 THEN 'in_flight'
                WHEN %(live)s AND r >= 0.9995 THEN 'pending'
                WHEN r < 0.01 THEN 'dead' ELSE 'delivered' END AS status,
           CASE WHEN r < 0.10 THEN 2 ELSE 1 END AS attempts
    FROM (
        SELECT e.event_id, e.committed_at, e.tenant, ep.id AS endpoint_id,
               e.committed_at + interval '300 ms' AS created, random() AS r
        FROM {events} e
        JOIN endpoints ep ON ep.tenant = e.tenant
    ) x
) s
"""

SEED_ATTEMPTS = """
INSERT INTO attempts (delivery_id, attempt_no, started_at, finished_at, status_code,
                      latency_ms, error_class, outcome, response_excerpt, manual, committed_at)
SELECT d.delivery_id, n,
       d.created_at + (n - 1) * interval '30 s' + interval '50 ms',
       CASE WHEN last AND d.status = 'in_flight' THEN NULL
            ELSE d.created_at + (n - 1) * interval '30 s' + interval '250 ms' END,
       CASE WHEN NOT last OR d.status = 'pending' THEN 503
            WHEN d.status = 'dead' THEN 410 WHEN d.status = 'in_flight' THEN NULL ELSE 200 END,
       CASE WHEN last AND d.status = 'in_flight' THEN NULL ELSE 20 + 180 * random() END,
       CASE WHEN NOT last OR d.status = 'pending' THEN 'http_5xx'
            WHEN d.status = 'dead' THEN 'http_4xx' END,
       CASE WHEN NOT last OR d.status = 'pending' THEN 'retry'
            WHEN d.status = 'dead' THEN 'dead' WHEN d.status = 'in_flight' THEN 'in_flight'
            ELSE 'delivered' END,
       CASE WHEN NOT last OR d.status = 'pending' THEN 'Service Unavailable'
            WHEN d.status = 'dead' THEN 'Gone' WHEN d.status = 'in_flight' THEN NULL
            ELSE '{{"received": true}}' END,
       false, d.committed_at
FROM {deliveries} d
CROSS JOIN LATERAL (SELECT n, n = d.attempts AS last
                    FROM generate_series(1, d.attempts) n) a
"""


def day_bounds(day: date) -> tuple[datetime, datetime]:
    lo = datetime(day.year, day.month, day.day, tzinfo=UTC)
    return lo, lo + timedelta(days=1)


def seed_day(url: str, day: date, per_day: int, live: bool) -> dict[str, Any]:
    events = per_day // ENDPOINTS_PER_TENANT
    lo, _ = day_bounds(day)
    suffix = f"p{day:%Y%m%d}"
    out: dict[str, Any] = {"day": day.isoformat()}
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SET synchronous_commit = off")  # the seed only, never the measurement
        conn.execute("SET work_mem = '64MB'")
        started = time.perf_counter()
        types = "[" + ", ".join(f"'{t}'" for t in TYPES) + "]"
        cur = conn.execute(SEED_EVENTS.format(v7=v7_sql("s.ts"), types=types), {
            "lo": lo, "step": 86_400.0 / events, "n": events, "day": day.isoformat()})
        out["events"] = cur.rowcount
        cur = conn.execute(SEED_DELIVERIES.format(v7=v7_sql("s.created"),
                                                  events=f"events_{suffix}"), {"live": live})
        out["deliveries"] = cur.rowcount
        cur = conn.execute(SEED_ATTEMPTS.format(deliveries=f"deliveries_{suffix}"))
        out["attempts"] = cur.rowcount
        out["insert_s"] = round(time.perf_counter() - started, 1)
        t = time.perf_counter()
        for table in ("events", "deliveries", "attempts"):
            conn.execute(f"VACUUM (ANALYZE) {table}_{suffix}")
        out["vacuum_s"] = round(time.perf_counter() - t, 1)
    return out


async def make_tenants(url: str) -> dict[str, Any]:
    """Tenants, 4 endpoints each (sealed secrets, as the API makes them), API keys."""
    keyring = development_keyring()
    endpoints: dict[str, list[uuid.UUID]] = {}
    keys: dict[str, str] = {}
    async with await psycopg.AsyncConnection.connect(url, row_factory=dict_row) as conn:
        for k in range(TENANTS):
            name = tenant_name(k)
            await api_store.create_tenant(conn, name, name.title())
            endpoints[name] = []
            for j in range(ENDPOINTS_PER_TENANT):
                row, _ = await api_store.create_endpoint(
                    conn, name, EndpointSpec(url=f"https://hooks.{name}.example/in/{j}"), keyring)
                endpoints[name].append(row["id"])
            if k in (0, 1):
                _, keys[name] = await api_store.create_api_key(conn, name, "bench")
        await conn.commit()
    return {"endpoints": endpoints, "keys": keys}


def make_partitions(url: str, first: date, today: date) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT hookstream_history_partitions(%s, %s)",
                           (first, today + timedelta(days=4))).fetchone()
        conn.execute("ANALYZE")
    return int(row[0]) if row else 0


def seed_history(url: str, days: int, per_day: int, today: date, jobs: int) -> dict[str, Any]:
    first = today - timedelta(days=days)
    todo = [first + timedelta(days=i) for i in range(days)]
    started = time.perf_counter()
    cpu0 = machine_cpu()
    per: list[dict[str, Any]] = []
    with ThreadPoolExecutor(jobs) as pool:
        futures = [pool.submit(seed_day, url, d, per_day, d == today - timedelta(days=1))
                   for d in todo]
        for f in futures:
            per.append(f.result())
            r = per[-1]
            print(f"  seeded {r['day']}: {r['deliveries']} deliveries, {r['attempts']} attempts"
                  f" in {r['insert_s']} s + vacuum {r['vacuum_s']} s"
                  f" ({time.perf_counter() - started:.0f} s so far)", flush=True)
    with psycopg.connect(url, autocommit=True) as conn:
        t = time.perf_counter()
        conn.execute("ANALYZE events, deliveries, attempts")  # parents: autovacuum skips them
        analyze_s = time.perf_counter() - t
        total_s = time.perf_counter() - started
        last = today - timedelta(days=1)
        statuses: dict[str, int] = dict(conn.execute(
            f"SELECT status, count(*) FROM deliveries_p{last:%Y%m%d} GROUP BY 1 ORDER BY 1"
        ).fetchall())
        (payload_bytes,) = conn.execute(
            f"SELECT avg(length(payload))::int FROM events_p{last:%Y%m%d}").fetchone() or (0,)
    deliveries = sum(r["deliveries"] for r in per)
    return {"days": days, "per_day": per_day, "jobs": jobs, "seconds": round(total_s, 1),
            "parent_analyze_s": round(analyze_s, 1),
            "events": sum(r["events"] for r in per), "deliveries": deliveries,
            "attempts": sum(r["attempts"] for r in per),
            "deliveries_per_s": round(deliveries / total_s),
            "machine_busy": round(busy_fraction(cpu0, machine_cpu()), 2),
            "last_day_statuses": statuses, "payload_bytes_avg": payload_bytes,
            "per_day_runs": per}


# -- 1. fanout and dispatcher work, full beside empty ------------------------------------
def payload(i: int) -> bytes:
    return orjson.dumps({"id": f"evt_{uuid.uuid4().hex[:24]}", "type": "invoice.paid",
                         "created": int(time.time()),
                         "data": {"object": "invoice", "id": f"in_{uuid.uuid4().hex[:16]}",
                                  "customer": f"cus_{uuid.uuid4().hex[:14]}",
                                  "amount_due": (i * 7919) % 100000, "currency": "eur",
                                  "status": "paid", "number": f"INV-{i:08d}",
                                  "description": f"Subscription renewal, plan {i % 7}",
                                  "lines": [{"price": f"price_{uuid.uuid4().hex[:12]}",
                                             "quantity": 1 + i % 3}]}})


class Timer:
    def __init__(self) -> None:
        self.s = 0.0

    def run(self, conn: psycopg.Connection[Any], sql: str, params: dict[str, Any]) -> Any:
        started = time.perf_counter()
        rows = conn.execute(sql, params).fetchall()
        self.s += time.perf_counter() - started
        return rows


def fanout_round(url: str, n_events: int, seq: int) -> tuple[dict[str, Any], list[DeliveryTask]]:
    """The fanout's statements for ``n_events`` new events committed now, in its batches."""
    timer = Timer()
    tasks: list[DeliveryTask] = []
    created = 0
    with psycopg.connect(url, autocommit=True) as conn:
        for b in range(0, n_events, FANOUT_BATCH):
            now = datetime.now(UTC)
            batch = []
            for i in range(b, min(n_events, b + FANOUT_BATCH)):
                k = 0 if i % 10 == 0 else 1 + i % 99
                body = payload(seq + i)
                batch.append({"event_id": uuid7(), "tenant": tenant_name(k),
                              "type": TYPES[i % 4], "payload": body,
                              "sha": hashlib.sha256(body).digest(), "at": now})
            timer.run(conn, FANOUT["store_events"], {
                "event_id": [e["event_id"] for e in batch],
                "tenant": [e["tenant"] for e in batch], "type": [e["type"] for e in batch],
                "schema_version": [1] * len(batch), "object_id": [None] * len(batch),
                "object_version": [None] * len(batch), "coalescing_key": [None] * len(batch),
                "occurred_at": [e["at"] for e in batch], "committed_at": [e["at"] for e in batch],
                "payload": [e["payload"] for e in batch], "sha": [e["sha"] for e in batch]})
            keys = [(e["tenant"], e["type"]) for e in batch]
            audiences = {(r[0], r[1]): Audience(r[2], tuple(r[3])) for r in timer.run(
                conn, FANOUT["audiences"], {"tenant": [k[0] for k in keys],
                                            "type": [k[1] for k in keys],
                                            "page": ROWS_PER_STATEMENT})}
            for statement in plan(keys, audiences, ROWS_PER_STATEMENT):
                chosen = [batch[s.event] for s in statement]
                rows = timer.run(conn, FANOUT["create_deliveries"], {
                    "event_id": [e["event_id"] for e in chosen],
                    "tenant": [e["tenant"] for e in chosen],
                    "type": [e["type"] for e in chosen],
                    "coalescing_key": [None] * len(chosen),
                    "committed_at": [e["at"] for e in chosen],
                    "again": [False] * len(chosen),
                    "after": [s.after for s in statement], "upto": [s.upto for s in statement],
                    "window_s": RETRY_WINDOW_S})
                created += sum(1 for r in rows if r[7])
                tasks += [DeliveryTask(uuid.UUID(r[0]), uuid.UUID(r[1]), uuid.UUID(r[2]), r[4],
                                       TaskKind.NEW, now, now, r[5]) for r in rows]
    return {"events": n_events, "deliveries": created, "db_s": round(timer.s, 3),
            "deliveries_per_s": round(created / timer.s)}, tasks


async def dispatch_round(url: str, tasks: list[DeliveryTask], batch: int) -> dict[str, Any]:
    """The dispatcher's claim and outcome statements (its Store) for ``tasks``: every
    attempt delivered at once, batches of ``batch`` one after the other."""
    st = Store(url, LEASE_S, max_size=2, keyring=development_keyring())
    await st.open()
    claim_s = record_s = 0.0
    attempts = 0
    try:
        for b in range(0, len(tasks), batch):
            started = time.perf_counter()
            claims = await st.claim(tasks[b:b + batch])
            mid = time.perf_counter()
            now = time.time()
            records = [AttemptRecord(c, "delivered", now - 0.02, now, 200, 20.0, None,
                                     "delivered", '{"received": true}', None, None)
                       for c in claims]
            applied = await st.record(records, {}, {})
            claim_s += mid - started
            record_s += time.perf_counter() - mid
            attempts += applied
    finally:
        await st.close()
    db_s = claim_s + record_s
    return {"attempts": attempts, "claimed_of": len(tasks), "db_s": round(db_s, 3),
            "claim_s": round(claim_s, 3), "record_s": round(record_s, 3),
            "attempts_per_s": round(attempts / db_s) if db_s else 0}


def autovacuum_now(url: str) -> list[str]:
    """What autovacuum is doing on the whole server now (both databases share the
    two cores and the disk): a worker on a seeded partition is a core the measurement
    does not have."""
    with psycopg.connect(url, autocommit=True) as conn:
        return [r[0] for r in conn.execute(
            "SELECT coalesce(datname, '') || ': ' || coalesce(query, '') FROM pg_stat_activity"
            " WHERE backend_type = 'autovacuum worker'").fetchall()]


def throughput(urls: dict[str, str], rounds: int, events: int, batch: int) -> dict[str, Any]:
    out: dict[str, Any] = {k: {"fanout": [], "dispatcher": []} for k in urls}
    for name in ("empty", "full"):  # warm both: plans, caches
        _, warm = fanout_round(urls[name], 1000, 10**8)
        asyncio.run(dispatch_round(urls[name], warm, batch))
    cpu0 = machine_cpu()
    for r in range(rounds):
        for name in (("full", "empty") if r % 2 == 0 else ("empty", "full")):
            with psycopg.connect(urls[name], autocommit=True) as conn:
                busy = conn.execute(
                    "SELECT count(*) FILTER (WHERE backend_type = 'autovacuum worker'),"
                    " count(*) FILTER (WHERE backend_type = 'client backend'"
                    " AND state = 'active') - 1 FROM pg_stat_activity").fetchone() or (0, 0)
            f, tasks = fanout_round(urls[name], events, r * events)
            d = asyncio.run(dispatch_round(urls[name], tasks, batch))
            f["autovacuum_workers"], f["other_active_backends"] = busy
            d["autovacuum_after"] = autovacuum_now(urls[name])
            out[name]["fanout"].append(f)
            out[name]["dispatcher"].append(d)
            print(f"  round {r + 1} {name}: fanout {f['deliveries_per_s']} deliveries/s,"
                  f" dispatcher {d['attempts_per_s']} attempts/s", flush=True)
    for name in urls:
        out[name]["fanout_deliveries_per_s"] = statistics.median(
            x["deliveries_per_s"] for x in out[name]["fanout"])
        out[name]["dispatcher_attempts_per_s"] = statistics.median(
            x["attempts_per_s"] for x in out[name]["dispatcher"])
    out["ratio_full_over_empty"] = {
        "fanout": round(out["full"]["fanout_deliveries_per_s"]
                        / out["empty"]["fanout_deliveries_per_s"], 3),
        "dispatcher": round(out["full"]["dispatcher_attempts_per_s"]
                            / out["empty"]["dispatcher_attempts_per_s"], 3)}
    out["machine_busy"] = round(busy_fraction(cpu0, machine_cpu()), 2)
    return out


# -- 5. WAL per attempt, HOT updates -----------------------------------------------------
def table_stats(conn: psycopg.Connection[Any], tables: list[str]) -> dict[str, tuple[int, int]]:
    conn.execute("SELECT pg_stat_clear_snapshot()")
    rows = conn.execute("SELECT relname, n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables"
                        " WHERE relname = ANY(%s)", (tables,)).fetchall()
    return {r[0]: (int(r[1]), int(r[2])) for r in rows}


def claim_params(tasks: list[DeliveryTask]) -> dict[str, Any]:
    """The claim statement's parameters for ``tasks``, as the Store passes them."""
    return {"delivery_id": [t.delivery_id for t in tasks],
            "committed_at": [t.committed_at for t in tasks],
            "lease_version": [t.lease_version for t in tasks],
            "manual": [False] * len(tasks), "lease_s": LEASE_S}


def explain_claim(url: str, tasks: list[DeliveryTask]) -> dict[str, Any]:
    """EXPLAIN ANALYZE of one claim of ``tasks`` (rolled back): planning vs execution."""
    with psycopg.connect(url) as conn:
        plan_rows = conn.execute("EXPLAIN (ANALYZE, BUFFERS) " + DISPATCH["claim"],
                                 claim_params(tasks)).fetchall()
        conn.rollback()
    lines = [r[0] for r in plan_rows]
    return {"tasks": len(tasks), "summary": [x for x in lines if x.startswith(
        ("Planning Time", "Execution Time"))], "plan": lines}


def wal_and_hot(url: str, today: date, cycles: int, batch: int) -> dict[str, Any]:
    _, tasks = fanout_round(url, cycles * batch // ENDPOINTS_PER_TENANT + 100, 2 * 10**8)
    claim_plan = explain_claim(url, tasks[-batch:])
    tasks = tasks[:cycles * batch]
    tables = [f"deliveries_p{today:%Y%m%d}", f"attempts_p{today:%Y%m%d}"]
    time.sleep(2)  # let the fanout's own statistics reach pg_stat
    with psycopg.connect(url, autocommit=True) as conn:
        before = table_stats(conn, tables)
        ckpt0 = conn.execute("SELECT checkpoints_timed + checkpoints_req"
                             " FROM pg_stat_bgwriter").fetchone()
        lsn0 = conn.execute("SELECT pg_current_wal_lsn()").fetchone()
        wal0 = wal_counters(conn)
        vacuuming = autovacuum_now(url)
        d = asyncio.run(dispatch_round(url, tasks, batch))
        vacuuming += autovacuum_now(url)
        lsn1 = conn.execute("SELECT pg_current_wal_lsn()").fetchone()
        wal = conn.execute("SELECT pg_wal_lsn_diff(%s, %s)",
                           (lsn1[0] if lsn1 else None, lsn0[0] if lsn0 else None)).fetchone()
        ckpt1 = conn.execute("SELECT checkpoints_timed + checkpoints_req"
                             " FROM pg_stat_bgwriter").fetchone()
        time.sleep(2)  # backends flush their table counters at most once a second when idle
        after = table_stats(conn, tables)
        wal1 = wal_counters(conn)  # the dispatch's backends have exited: theirs flushed
    wal_bytes = int(wal[0]) if wal else 0
    hot = {}
    for t in tables:
        upd = after.get(t, (0, 0))[0] - before.get(t, (0, 0))[0]
        hot_upd = after.get(t, (0, 0))[1] - before.get(t, (0, 0))[1]
        hot[t.split("_p")[0]] = {"updates": upd, "hot_updates": hot_upd,
                                 "hot_ratio": round(hot_upd / upd, 3) if upd else None}
    return {"attempts": d["attempts"], "cycles": cycles, "batch": batch,
            "wal_bytes": wal_bytes,
            "wal_bytes_per_attempt": round(wal_bytes / d["attempts"]) if d["attempts"] else None,
            "checkpoints_during": (ckpt1[0] - ckpt0[0]) if ckpt0 and ckpt1 else None,
            # Cluster-wide (pg_stat_wal), nothing else runs meanwhile: full-page images
            # and their share of the bytes say whether a page's first change since the
            # last checkpoint, not the row change itself, is what an attempt costs.
            "wal_records_per_attempt": per(wal1[0] - wal0[0], d["attempts"]),
            "full_page_images_per_attempt": per(wal1[1] - wal0[1], d["attempts"], 3),
            "wal_counted_bytes_per_attempt": per(wal1[2] - wal0[2], d["attempts"]),
            # before and after the dispatch: its WAL is in the LSN distance, not
            # (until the worker reports) in the counters
            "autovacuum": vacuuming,
            "hot": hot, "explain_claim": claim_plan}


def wal_counters(conn: psycopg.Connection[Any]) -> tuple[int, int, int]:
    """(records, full-page images, bytes) of pg_stat_wal, this backend's own flushed first
    (the server's counters lag a backend's by up to its next report)."""
    conn.execute("SELECT pg_stat_clear_snapshot()")
    row = conn.execute("SELECT wal_records, wal_fpi, wal_bytes FROM pg_stat_wal").fetchone()
    assert row is not None
    return int(row[0]), int(row[1]), int(row[2])


def per(n: float, d: int, digits: int = 0) -> float | None:
    return round(n / d, digits) if d else None


# -- 4. bytes on disk --------------------------------------------------------------------
def disk(url: str, deliveries: int) -> dict[str, Any]:
    with psycopg.connect(url, autocommit=True) as conn:
        tables = {}
        for parent in ("events", "deliveries", "attempts"):
            heap, idx = conn.execute(
                "SELECT coalesce(sum(pg_table_size(relid)), 0),"
                " coalesce(sum(pg_indexes_size(relid)), 0)"
                " FROM pg_partition_tree(%s) WHERE isleaf", (parent,)).fetchone() or (0, 0)
            indexes = {}
            for (name,) in conn.execute(
                    "SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
                    " WHERE i.indrelid = %s::regclass ORDER BY 1", (parent,)).fetchall():
                (size,) = conn.execute(
                    "SELECT coalesce(sum(pg_relation_size(relid)), 0) FROM"
                    " pg_partition_tree(%s) WHERE isleaf", (name,)).fetchone() or (0,)
                indexes[name] = {"bytes": int(size),
                                 "per_delivery": round(int(size) / deliveries, 1)}
            tables[parent] = {"heap_bytes": int(heap), "index_bytes": int(idx),
                              "heap_per_delivery": round(int(heap) / deliveries, 1),
                              "index_per_delivery": round(int(idx) / deliveries, 1),
                              "indexes": indexes}
        (dbsize,) = conn.execute("SELECT pg_database_size(current_database())").fetchone() \
            or (0,)
    heap = sum(t["heap_bytes"] for t in tables.values())
    idx = sum(t["index_bytes"] for t in tables.values())
    return {"deliveries": deliveries, "total_bytes": heap + idx,
            "per_delivery": round((heap + idx) / deliveries, 1),
            "heap_per_delivery": round(heap / deliveries, 1),
            "index_per_delivery": round(idx / deliveries, 1),
            "database_bytes": int(dbsize), "tables": tables}


# -- 2. API routes -----------------------------------------------------------------------
def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return round(s[min(len(s) - 1, int(q * len(s)))] * 1000, 2)


async def api_latencies(base: str, cases: dict[str, tuple[str, list[str]]],
                        requests: int, max_s: float) -> dict[str, Any]:
    """Sequential requests per route, after 5 untimed: ``requests``, or fewer (at least
    20) when the route has used up ``max_s`` seconds."""
    out: dict[str, Any] = {}
    async with aiohttp.ClientSession() as session:
        for name, (key, paths) in cases.items():
            headers = {"Authorization": f"Bearer {key}"}
            times: list[float] = []
            rows = 0
            deadline = time.monotonic() + max_s
            for i in range(requests + 5):
                if i >= 25 and time.monotonic() > deadline:
                    break
                started = time.perf_counter()
                async with session.get(base + paths[i % len(paths)], headers=headers) as resp:
                    body = await resp.read()
                    assert resp.status == 200, (name, resp.status, body[:300])
                elapsed = time.perf_counter() - started
                if i >= 5:
                    times.append(elapsed)
                    data = orjson.loads(body).get("data")
                    rows += len(data) if isinstance(data, list) else 1
            out[name] = {"requests": len(times), "p50_ms": pct(times, 0.5),
                         "p99_ms": pct(times, 0.99), "max_ms": pct(times, 1.0),
                         "rows_per_response": round(rows / len(times), 1)}
    return out


def explain(conn: psycopg.Connection[Any], sql: str, params: dict[str, Any]) -> list[str]:
    rows = conn.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql, params).fetchall()
    return [r[0] for r in rows]


def api_routes(url: str, bootstrap: str, seeded: dict[str, Any], days: int,
               requests: int, max_s: float) -> dict[str, Any]:
    keys, endpoints = seeded["keys"], seeded["endpoints"]
    now = datetime.now(UTC)
    with psycopg.connect(url, autocommit=True) as conn:
        # random deliveries of the large tenant over the whole history (the detail route)
        ids = [r[0] for r in conn.execute(
            "SELECT delivery_id FROM deliveries TABLESAMPLE SYSTEM (1) REPEATABLE (7)"
            " WHERE tenant = 'acme' LIMIT 2000").fetchall()]
        ids = [ids[i] for i in range(0, len(ids), max(1, len(ids) // 500))]
        plans = {
            "list_deliveries_big": explain(conn, API["list_deliveries"], {
                "tenant": "acme", "endpoint_id": endpoints["acme"][0],
                "statuses": list(DELIVERY_STATUSES), "since": now - timedelta(days=30),
                "until": now + timedelta(days=1), "before_at": datetime(9999, 1, 1, tzinfo=UTC),
                "before_id": uuid.UUID(int=2**128 - 1), "limit": 51}),
            "list_deliveries_big_dead": explain(conn, API["list_deliveries"], {
                "tenant": "acme", "endpoint_id": endpoints["acme"][0], "statuses": ["dead"],
                "since": now - timedelta(days=30), "until": now + timedelta(days=1),
                "before_at": datetime(9999, 1, 1, tzinfo=UTC),
                "before_id": uuid.UUID(int=2**128 - 1), "limit": 51}),
            "list_deliveries_small": explain(conn, API["list_deliveries"], {
                "tenant": tenant_name(1), "endpoint_id": endpoints[tenant_name(1)][0],
                "statuses": list(DELIVERY_STATUSES), "since": now - timedelta(days=30),
                "until": now + timedelta(days=1), "before_at": datetime(9999, 1, 1, tzinfo=UTC),
                "before_id": uuid.UUID(int=2**128 - 1), "limit": 51}),
            "list_events": explain(conn, API["list_events"], {
                "tenant": "acme", "patterns": None, "since": now - timedelta(days=days / 2),
                "until": now + timedelta(days=1), "after_at": datetime(1970, 1, 1, tzinfo=UTC),
                "after_id": uuid.UUID(int=0), "limit": 51}),
            "get_delivery": explain(conn, API["get_delivery"], {"id": ids[0], "tenant": "acme"}),
            "delivery_attempts": explain(conn, API["delivery_attempts"], {"id": ids[0]}),
        }
    settings = ApiSettings(database_url=url, kafka_bootstrap=bootstrap,
                           topic_prefix=f"hscale{uuid.uuid4().hex[:6]}", api_port=0,
                           secret_keys=development_keyring(), history_days=max(2, days))
    server = ApiServer(settings).start()
    try:
        base = f"http://127.0.0.1:{server.port}"
        big, small = keys["acme"], keys[tenant_name(1)]
        since = [(now - timedelta(seconds=(i * 7919) % int(days * 86_400))).strftime(
            "%Y-%m-%dT%H:%M:%SZ") for i in range(97)]
        cases = {
            "GET /v1/deliveries?endpoint_id= (large tenant)": (
                big, [f"/v1/deliveries?endpoint_id={e}" for e in endpoints["acme"]]),
            "GET /v1/deliveries?endpoint_id= (small tenant)": (
                small, [f"/v1/deliveries?endpoint_id={e}" for e in endpoints[tenant_name(1)]]),
            "GET /v1/deliveries?endpoint_id=&status=dead (large tenant)": (
                big, [f"/v1/deliveries?endpoint_id={e}&status=dead" for e in endpoints["acme"]]),
            "GET /v1/events?since= (large tenant)": (
                big, [f"/v1/events?since={s}" for s in since]),
            "GET /v1/events?since= (small tenant)": (
                small, [f"/v1/events?since={s}" for s in since]),
            "GET /v1/deliveries/{id} (random, whole history)": (
                big, [f"/v1/deliveries/{i}" for i in ids]),
        }
        cpu0 = machine_cpu()
        routes = asyncio.run(api_latencies(base, cases, requests, max_s))
        busy = busy_fraction(cpu0, machine_cpu())
    finally:
        server.stop()
    return {"routes": routes, "machine_busy": round(busy, 2), "explain": plans}


# -- 3. retention ------------------------------------------------------------------------
class Writer(threading.Thread):
    """The fanout's and the dispatcher's statements on today's partition, one cycle every
    10 ms: store_events + create_deliveries (1 event → 4 rows), claim, record_outcomes.
    Every statement's start and latency is kept; errors are kept, not raised."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url, self.stop = url, threading.Event()
        self.samples: list[tuple[float, float, str]] = []  # (start, seconds, statement)
        self.errors: list[tuple[float, str, str]] = []

    def _timed(self, conn: psycopg.Connection[Any], name: str, sql: str,
               params: dict[str, Any]) -> list[Any]:
        started = time.monotonic()
        try:
            rows = conn.execute(sql, params).fetchall()
        except psycopg.Error as exc:
            self.errors.append((started, name, f"{type(exc).__name__}: {exc}"[:300]))
            return []
        finally:
            self.samples.append((started, time.monotonic() - started, name))
        return rows

    def run(self) -> None:
        with psycopg.connect(self.url, autocommit=True) as conn:
            i = 0
            while not self.stop.is_set():
                now = datetime.now(UTC)
                body = payload(i)
                eid = uuid7()
                self._timed(conn, "store_events", FANOUT["store_events"], {
                    "event_id": [eid], "tenant": ["tenant-002"], "type": ["invoice.paid"],
                    "schema_version": [1], "object_id": [None], "object_version": [None],
                    "coalescing_key": [None], "occurred_at": [now], "committed_at": [now],
                    "payload": [body], "sha": [hashlib.sha256(body).digest()]})
                rows = self._timed(conn, "create_deliveries", FANOUT["create_deliveries"], {
                    "event_id": [eid], "tenant": ["tenant-002"], "type": ["invoice.paid"],
                    "coalescing_key": [None], "committed_at": [now], "again": [False],
                    "after": [None], "upto": [None], "window_s": RETRY_WINDOW_S})
                if rows:
                    claims = self._timed(conn, "claim", DISPATCH["claim"], {
                        "delivery_id": [uuid.UUID(r[0]) for r in rows],
                        "committed_at": [now] * len(rows),
                        "lease_version": [r[5] for r in rows], "manual": [False] * len(rows),
                        "lease_s": LEASE_S})
                    if claims:
                        t = time.time()
                        n = len(claims)
                        self._timed(conn, "record_outcomes", DISPATCH["record_outcomes"], {
                            "delivery_id": [c[0] for c in claims],
                            "lease_version": [c[1] for c in claims],
                            "attempt_no": [c[2] for c in claims], "status": ["delivered"] * n,
                            "started_at": [t - 0.02] * n, "finished_at": [t] * n,
                            "status_code": [200] * n, "latency_ms": [20.0] * n,
                            "error_class": [None] * n, "outcome": ["delivered"] * n,
                            "excerpt": ["ok"] * n, "error": [None] * n, "next_at": [None] * n,
                            "committed_at": [c[7] for c in claims]})
                i += 1
                time.sleep(0.01)

    def window(self, lo: float, hi: float) -> dict[str, Any]:
        """Statements that overlapped [lo, hi]."""
        lat = [s for start, s, _ in self.samples if start <= hi and start + s >= lo]
        if not lat:
            return {"statements": 0}
        return {"statements": len(lat), "p50_ms": pct(lat, 0.5), "max_ms": pct(lat, 1.0),
                "errors": [e for e in self.errors if lo <= e[0] <= hi]}


LIVE = ("SELECT count(*), md5(coalesce(string_agg(delivery_id::text || status || lease_version"
        " || updated_at::text || attempts, ',' ORDER BY delivery_id), ''))"
        " FROM deliveries WHERE status IN ('pending', 'in_flight')"
        " AND committed_at >= %s AND committed_at < %s")


def retention(url: str, days: int, today: date) -> dict[str, Any]:
    first = today - timedelta(days=days)
    kept_lo, _ = day_bounds(first + timedelta(days=1))
    kept_hi, _ = day_bounds(today)  # the writer's day apart
    with psycopg.connect(url, autocommit=True) as conn:
        live_before = conn.execute(LIVE, (kept_lo, kept_hi)).fetchone()
        (expiring_rows,) = conn.execute(
            f"SELECT count(*) FROM deliveries_p{first:%Y%m%d}").fetchone() or (0,)
    writer = Writer(url)
    writer.start()
    time.sleep(3)
    with psycopg.connect(url, autocommit=True) as conn:
        t0 = time.monotonic()
        run = maintain(conn, history_days=days, days_ahead=3, today=today + timedelta(days=1))
        t1 = time.monotonic()
    time.sleep(2)
    writer.stop.set()
    writer.join()
    with psycopg.connect(url, autocommit=True) as conn:
        live_after = conn.execute(LIVE, (kept_lo, kept_hi)).fetchone()
        still = conn.execute("SELECT to_regclass(%s) IS NOT NULL",
                             (f"deliveries_p{first:%Y%m%d}",)).fetchone()
    before_lo = writer.samples[0][0] if writer.samples else t0 - 3
    return {
        "expired_day": first.isoformat(), "expiring_day_deliveries": int(expiring_rows),
        "maintain_s": round(t1 - t0, 3), "created": run.created,
        "dropped": [d.isoformat() for d in run.dropped],
        "drop_s": [round(s, 3) for s in run.drop_s],
        "held": {d.isoformat(): n for d, n in run.held.items()},
        "lock_waits": run.lock_waits, "expired_partition_still_there": bool(still and still[0]),
        "writer": {"before": writer.window(before_lo, t0 - 0.001),
                   "during": writer.window(t0, t1),
                   "after": writer.window(t1 + 0.001, time.monotonic()),
                   "errors_total": len(writer.errors)},
        "kept_live_rows": {"before": live_before[0] if live_before else None,
                           "after": live_after[0] if live_after else None,
                           "unchanged": live_before == live_after},
    }


# -- the run -----------------------------------------------------------------------------
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--per-day", type=int, default=1_000_000, help="deliveries a day")
    parser.add_argument("--label", default="full")
    parser.add_argument("--keep", action="store_true", help="keep both databases")
    parser.add_argument("--jobs", type=int, default=2, help="days seeded at a time")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--events", type=int, default=10_000,
                        help="events (x4 deliveries) per throughput round")
    parser.add_argument("--batch", type=int, default=100, help="tasks per claim")
    parser.add_argument("--wal-cycles", type=int, default=100)
    parser.add_argument("--requests", type=int, default=300, help="per API route")
    parser.add_argument("--route-seconds", type=float, default=60.0,
                        help="time cap per API route (at least 20 timed requests)")
    args = parser.parse_args()
    today = datetime.now(UTC).date()
    first = today - timedelta(days=args.days)
    result: dict[str, Any] = {"label": args.label, "today": today.isoformat(),
                              "started": datetime.now(UTC).isoformat(timespec="seconds"),
                              "args": vars(args), "cpus": os.cpu_count()}
    urls: dict[str, str] = {}
    seeded: dict[str, dict[str, Any]] = {}
    envs = []
    try:
        for name in ("full", "empty"):
            url, bootstrap, topics = fresh_env(f"hscale_{name}", partitions=1)
            envs.append((url, bootstrap, topics))
            urls[name] = url
            result.setdefault("partitions_made", {})[name] = make_partitions(url, first, today)
            seeded[name] = asyncio.run(make_tenants(url))
        print(f"seeding {args.days} days x {args.per_day} deliveries ...", flush=True)
        result["seed"] = seed_history(urls["full"], args.days, args.per_day, today, args.jobs)
        s = result["seed"]
        print(f"seeded {s['deliveries']} deliveries, {s['attempts']} attempts, {s['events']}"
              f" events in {s['seconds']} s ({s['deliveries_per_s']} deliveries/s)", flush=True)
        with psycopg.connect(urls["empty"], autocommit=True) as conn:
            conn.execute("VACUUM ANALYZE")
        # The seed's dirty pages written out before anything is timed: a checkpoint (and
        # the kernel's writeback) under way makes every commit's WAL flush wait.
        t = time.perf_counter()
        with psycopg.connect(urls["full"], autocommit=True) as conn:
            conn.execute("CHECKPOINT")
        os.sync()
        result["settle_s"] = round(time.perf_counter() - t, 1)
        phases: list[tuple[str, Any]] = [
            ("disk", lambda: disk(urls["full"], s["deliveries"])),
            ("throughput", lambda: throughput(urls, args.rounds, args.events, args.batch)),
            ("wal_hot", lambda: {name: wal_and_hot(urls[name], today, args.wal_cycles,
                                                   args.batch) for name in ("full", "empty")}),
            ("api", lambda: api_routes(urls["full"], envs[0][1], seeded["full"], args.days,
                                       args.requests, args.route_seconds)),
            ("retention", lambda: retention(urls["full"], args.days, today)),  # the last: it drops
        ]
        for name, phase in phases:
            print(f"{name} ...", flush=True)
            t = time.perf_counter()
            try:
                result[name] = phase()
            except Exception as exc:  # one broken phase must not lose the others (or the seed)
                result.setdefault("errors", {})[name] = f"{type(exc).__name__}: {exc}"
                print(f"  {name} failed: {exc!r}", flush=True)
            result.setdefault("phase_s", {})[name] = round(time.perf_counter() - t, 1)
    finally:
        result["finished"] = datetime.now(UTC).isoformat(timespec="seconds")
        RESULTS.mkdir(exist_ok=True)
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
        path = RESULTS / f"history-scale-{args.label}-{stamp}.json"
        path.write_text(json.dumps(result, indent=2, default=str))
        print(f"wrote {path}")
        for url, bootstrap, topics in envs:
            if not args.keep:
                drop_database(url)
            drop_topics(bootstrap, topics)
    summary(result)


def summary(r: dict[str, Any]) -> None:
    if r.get("errors"):
        print(f"phases failed: {r['errors']}")
        return
    s, t, d = r["seed"], r["throughput"], r["disk"]
    print(f"\n== history scale ({r['label']}): {s['days']} days x {s['per_day']} deliveries"
          f" = {s['deliveries']} deliveries, {s['attempts']} attempts, {s['events']} events")
    print(f"seed: {s['seconds']} s, {s['deliveries_per_s']} deliveries/s"
          f" (machine busy {s['machine_busy']})")
    print(f"fanout deliveries/s: full {t['full']['fanout_deliveries_per_s']}"
          f" empty {t['empty']['fanout_deliveries_per_s']}"
          f" ratio {t['ratio_full_over_empty']['fanout']}")
    print(f"dispatcher attempts/s: full {t['full']['dispatcher_attempts_per_s']}"
          f" empty {t['empty']['dispatcher_attempts_per_s']}"
          f" ratio {t['ratio_full_over_empty']['dispatcher']}")
    for name, x in r["api"]["routes"].items():
        print(f"{name}: p50 {x['p50_ms']} ms p99 {x['p99_ms']} ms max {x['max_ms']} ms")
    ret = r["retention"]
    print(f"retention: dropped {ret['dropped']} in {ret['drop_s']} s (maintain"
          f" {ret['maintain_s']} s), held {ret['held']}, lock waits {ret['lock_waits']}")
    w = ret["writer"]
    print(f"  writer max ms: before {w['before'].get('max_ms')} during"
          f" {w['during'].get('max_ms')} after {w['after'].get('max_ms')};"
          f" errors {w['errors_total']}; kept live rows unchanged:"
          f" {ret['kept_live_rows']['unchanged']} ({ret['kept_live_rows']['before']})")
    print(f"disk: {d['per_delivery']} B/delivery (heap {d['heap_per_delivery']},"
          f" indexes {d['index_per_delivery']})")
    for name, x in d["tables"].items():
        print(f"  {name}: heap {x['heap_per_delivery']} B, indexes {x['index_per_delivery']} B")
    for name, x in r["wal_hot"].items():
        print(f"WAL {name}: {x['wal_bytes_per_attempt']} B/attempt"
              f" ({x['full_page_images_per_attempt']} full-page images,"
              f" {x['wal_records_per_attempt']} records per attempt); HOT"
              f" deliveries {x['hot']['deliveries']['hot_ratio']}"
              f" attempts {x['hot']['attempts']['hot_ratio']}")


if __name__ == "__main__":
    main()
