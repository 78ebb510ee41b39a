"""Issue #14's two bounded pieces, measured on a seeded history of the local stack:

* the hot queries that used to count unbounded sets (the sampler's dead letters, the
  relay's per-second backlog, the health route), this branch's SQL beside main's;
* the dispatcher's claim with the deleted-endpoint check beside main's claim;
* deleting an endpoint: the request's transaction and the background batches, beside
  the single-transaction cascade main ran inside the request, with a concurrent writer
  on another endpoint's rows (since 0014 dropped the foreign keys, that DELETE no longer
  cascades: ``deliveries_left_behind`` says so).

The seed (SQL, in bulk): ``--deliveries`` events with one delivery and one attempt each
over 20 endpoints, 10 % dead, plus ``--backlog`` unpublished outbox rows (a Kafka outage);
the day partitions (0014) of every day it spans are made first.

    python -m benchmarks.history_hot_paths                       # 2 M deliveries, ~2 min seed
    python -m benchmarks.history_hot_paths --deliveries 200000   # quick

Results (JSON) land in bench-results/history-hot-paths-<time>.json. main's SQL is read
with ``git show main:...``, so run it from a checkout that has a ``main`` branch.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from psycopg.rows import dict_row

from benchmarks.common import RESULTS, ROOT, drop_database, drop_topics, fresh_env
from hookstream.controlplane import deletion, store
from hookstream.controlplane.validation import DELIVERY_STATUSES
from hookstream.core.counts import COUNT_CAP
from hookstream.io import queries

ENDPOINTS = 20
SEED = """
-- day partitions (0014) for every day the seed spans, or its rows land in the defaults
SELECT hookstream_history_partitions(
    ((now() - {deliveries} * interval '1 s') AT TIME ZONE 'UTC')::date,
    ((now() AT TIME ZONE 'UTC') + interval '4 days')::date);
INSERT INTO tenants (id) VALUES ('acme');
INSERT INTO endpoints (id, tenant, url)
SELECT ('00000000-0000-0000-0000-' || lpad(to_hex(i), 12, '0'))::uuid, 'acme',
       'https://e' || i || '.example/'
FROM generate_series(1, {endpoints}) i;
INSERT INTO events (event_id, tenant, type, schema_version, occurred_at, committed_at,
                    payload, payload_sha256)
SELECT hookstream_uuid_v7(), 'acme', 'invoice.paid', 1, now() - i * interval '1 s',
       now() - i * interval '1 s', '\\x00', '\\x00'
FROM generate_series(1, {deliveries}) i;
INSERT INTO deliveries (event_id, endpoint_id, tenant, endpoint_config_version, status,
                        attempts, expires_at, created_at, updated_at, next_attempt_at,
                        committed_at)
SELECT e.event_id,
       ('00000000-0000-0000-0000-' || lpad(to_hex(1 + (n % {endpoints})::int), 12, '0'))::uuid,
       'acme', 1, CASE WHEN n % 10 = 0 THEN 'dead' ELSE 'delivered' END, 1,
       e.committed_at + interval '1 day', e.committed_at, e.committed_at, e.committed_at,
       e.committed_at
FROM (SELECT event_id, committed_at, row_number() OVER () AS n FROM events) e;
INSERT INTO attempts (delivery_id, attempt_no, started_at, finished_at, outcome, committed_at)
SELECT delivery_id, 1, created_at, created_at, 'delivered', committed_at FROM deliveries;
INSERT INTO outbox (event_id, tenant, type, payload)
SELECT hookstream_uuid_v7(), 'acme', 'invoice.paid', '\\x00' FROM generate_series(1, {backlog});
"""


def _ep(i: int) -> uuid.UUID:
    return uuid.UUID(int=i)


def main_queries(concern: str) -> dict[str, str]:
    text = subprocess.run(["git", "-C", str(ROOT), "show", f"main:src/hookstream/io/sql/"
                           f"{concern}.sql"], capture_output=True, text=True, check=True).stdout
    return queries.parse(text)


def median_ms(conn: psycopg.Connection[Any], sql: str, params: dict[str, Any], *,
              runs: int = 7, rollback: bool = False) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        conn.execute(sql, params, binary=True)
        times.append(time.perf_counter() - started)
        if rollback:
            conn.rollback()
    return round(statistics.median(times) * 1000, 2)


def hot_queries(url: str) -> dict[str, dict[str, float]]:
    now = datetime.now(UTC)
    health = {"id": _ep(1), "window_start": now - timedelta(days=7),
              "all_statuses": list(DELIVERY_STATUSES)}
    cases = [("observability", "dead", {}, {"cap": COUNT_CAP, "window_s": 900.0}),
             ("relay", "backlog", {}, {"cap": COUNT_CAP, "head": 1000}),
             ("api", "endpoint_health", health, {**health, "cap": COUNT_CAP})]
    out = {}
    with psycopg.connect(url, autocommit=True) as conn:
        for concern, name, old_params, new_params in cases:
            old = main_queries(concern)[name]
            new = queries.load(concern)[name]
            median_ms(conn, new, new_params, runs=2)  # warm the cache for both
            # main may already hold the bounded text (it takes the new parameters then):
            # psycopg reads only the names a statement uses, so the union serves both
            both = {**old_params, **new_params}
            out[f"{concern}.{name}"] = {"main_ms": median_ms(conn, old, both),
                                        "branch_ms": median_ms(conn, new, new_params)}
    return out


def claim(url: str) -> dict[str, Any]:
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT delivery_id, committed_at FROM deliveries"
                            " WHERE endpoint_id = %s LIMIT 100", (_ep(7),)).fetchall()
        ids = [r[0] for r in rows]
        conn.execute("UPDATE deliveries SET status = 'pending', lease_version = 0"
                     " WHERE delivery_id = ANY(%s)", (ids,))
        conn.commit()
        # committed_at: the partition key the tasks carry (0014); a claim without it
        # simply does not use it
        params = {"delivery_id": ids, "committed_at": [r[1] for r in rows],
                  "lease_version": [0] * 100, "manual": [False] * 100, "lease_s": 30.0}
        old, new = main_queries("dispatcher")["claim"], queries.load("dispatcher")["claim"]
        rounds: dict[str, list[float]] = {"main_ms": [], "branch_ms": []}
        main_error = None
        for _ in range(3):  # interleaved: drift hits both alike
            if main_error is None:
                try:
                    rounds["main_ms"].append(median_ms(conn, old, params, runs=50,
                                                       rollback=True))
                except psycopg.errors.NotNullViolation as exc:
                    # a main from before the partitioned history (0014): its claim writes
                    # attempts without their committed_at, refused by this schema
                    conn.rollback()
                    main_error = str(exc).splitlines()[0]
            rounds["branch_ms"].append(median_ms(conn, new, params, runs=50, rollback=True))
    out: dict[str, Any] = {k: statistics.median(v) if v else None for k, v in rounds.items()}
    if main_error is not None:
        out["main_error"] = main_error
    return out


class Writer(threading.Thread):
    """A dispatcher-like writer on another endpoint's rows: one short UPDATE every 10 ms."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url, self.stop, self.latencies_s = url, threading.Event(), list[float]()

    def run(self) -> None:
        with psycopg.connect(self.url, autocommit=True) as conn:
            ids = [r[0] for r in conn.execute(
                "SELECT delivery_id FROM deliveries WHERE endpoint_id = %s LIMIT 1000",
                (_ep(3),))]
            i = 0
            while not self.stop.is_set():
                started = time.perf_counter()
                conn.execute("UPDATE deliveries SET updated_at = now() WHERE delivery_id = %s",
                             (ids[i % len(ids)],))
                self.latencies_s.append(time.perf_counter() - started)
                i += 1
                time.sleep(0.01)

    def summary(self) -> dict[str, float]:
        lat = sorted(self.latencies_s)
        return {"writes": len(lat), "median_ms": round(statistics.median(lat) * 1000, 2),
                "max_ms": round(lat[-1] * 1000, 1)}


async def background_delete(url: str, endpoint_id: uuid.UUID) -> dict[str, Any]:
    writer = Writer(url)
    writer.start()
    await asyncio.sleep(0.5)
    async with await psycopg.AsyncConnection.connect(url, row_factory=dict_row) as conn:
        started = time.perf_counter()
        marked = await store.mark_endpoint_deleted(conn, endpoint_id, None)
        assert marked is not None
        op = await store.create_delete_operation(conn, tenant=marked["tenant"],
                                                 endpoint_id=endpoint_id, owner="bench",
                                                 lease_s=30)
        await conn.commit()
        request_ms = (time.perf_counter() - started) * 1000
        batches: list[float] = []
        started = time.perf_counter()
        more = True
        while more:
            t = time.perf_counter()
            async with conn.transaction():
                row = await store.lock_owned_operation(conn, op["id"], "bench")
                assert row is not None
                more = await deletion.step(conn, row, "bench",
                                           batch_size=deletion.DELETE_BATCH_SIZE,
                                           lease_s=30) is not deletion.Step.DONE
            batches.append(time.perf_counter() - t)
        total_s = time.perf_counter() - started
    writer.stop.set()
    writer.join()
    return {"request_ms": round(request_ms, 1), "transactions": len(batches),
            "total_s": round(total_s, 2),
            "batch_median_ms": round(statistics.median(batches) * 1000),
            "batch_max_ms": round(max(batches) * 1000),
            "batches_ms": [round(b * 1000) for b in batches], "writer": writer.summary()}


def cascade_delete(url: str, endpoint_id: uuid.UUID) -> dict[str, Any]:
    writer = Writer(url)
    writer.start()
    time.sleep(0.5)
    with psycopg.connect(url) as conn:
        started = time.perf_counter()
        conn.execute("DELETE FROM endpoints WHERE id = %s", (endpoint_id,))  # main's way
        conn.commit()
        request_ms = (time.perf_counter() - started) * 1000
        # 0014 dropped the foreign keys whose ON DELETE CASCADE did main's work: what the
        # DELETE left behind says whether this still measures a cascade
        (left,) = conn.execute("SELECT count(*) FROM deliveries WHERE endpoint_id = %s",
                               (endpoint_id,)).fetchone() or (0,)
    writer.stop.set()
    writer.join()
    return {"request_ms": round(request_ms, 1), "transactions": 1,
            "deliveries_left_behind": left, "writer": writer.summary()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--deliveries", type=int, default=2_000_000)
    parser.add_argument("--backlog", type=int, default=300_000)
    args = parser.parse_args()
    url, bootstrap, topics = fresh_env("history")
    try:
        started = time.perf_counter()
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(SEED.format(endpoints=ENDPOINTS, deliveries=args.deliveries,
                                     backlog=args.backlog))
            conn.execute("VACUUM ANALYZE")
        seed_s = round(time.perf_counter() - started, 1)
        per_endpoint = args.deliveries // ENDPOINTS
        result = {"deliveries": args.deliveries, "backlog": args.backlog, "seed_s": seed_s,
                  "per_endpoint": per_endpoint, "hot_queries": hot_queries(url),
                  "claim_100": claim(url),
                  "delete_background": asyncio.run(background_delete(url, _ep(2))),
                  "delete_cascade_in_request": cascade_delete(url, _ep(4))}
    finally:
        drop_database(url)
        drop_topics(bootstrap, topics)
    print(json.dumps(result, indent=2))
    RESULTS.mkdir(exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    (RESULTS / f"history-hot-paths-{stamp}.json").write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
