"""The measured inputs of docs/capacity.md (issue #46): per delivery, the CPU-ms of each
service, of the Kafka broker and of PostgreSQL; PostgreSQL's rows written and WAL bytes;
Kafka's bytes appended to the pipeline's topics.

One run: a fresh database and topic prefix on the local stack, the three services as
processes, ``--endpoints`` endpoints at a fast receiver (its own process), ``--events``
events written at ``--rate`` events/s in transactions of 50, each to every endpoint; the
window runs from the first write until every delivery is recorded delivered. Counters are
read before and after: /proc for CPU, ``pg_current_wal_lsn()`` and ``pg_stat_database``
for PostgreSQL, the size of the topics' directories in the broker's log dir for Kafka
(the .log segments: records as stored, batched and compressed).

    .venv/bin/python -m benchmarks.capacity_inputs --events 2500 --endpoints 4 --rate 250
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

import psycopg

from benchmarks.common import (
    RESULTS,
    cpu_by_role,
    cpu_delta,
    drop_database,
    drop_topics,
    fresh_env,
    stack_pids,
    start_fast_receiver,
)
from hookstream.dev.harness import Pipeline, pipeline_env
from hookstream.dev.localstack import kafka
from hookstream.endpoints import create_endpoint
from hookstream.outbox import write_event

ROLES = ("relay", "fanout", "dispatcher", "kafka", "postgres", "postgres_background")


def _pg_counters(db_url: str) -> dict[str, int]:
    # A benchmark reads the server's own counters (no store: nothing here is the product).
    with psycopg.connect(db_url) as conn:
        lsn = conn.execute("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn").fetchone()
        row = conn.execute(
            "SELECT tup_inserted, tup_updated, tup_deleted FROM pg_stat_database"
            " WHERE datname = current_database()").fetchone()
    assert lsn is not None and row is not None
    return {"wal_bytes": int(lsn[0]), "inserted": row[0], "updated": row[1],
            "deleted": row[2]}


def _kafka_bytes(prefix: str) -> int:
    data = kafka.data_dir()
    total = 0
    for d in data.iterdir():
        if d.is_dir() and d.name.startswith(prefix + "."):
            for f in d.iterdir():
                if f.suffix == ".log":
                    total += f.stat().st_size
    return total


def _delivered(db_url: str) -> int:
    with psycopg.connect(db_url) as conn:
        row = conn.execute(
            "SELECT count(*) FROM deliveries WHERE status = 'delivered'").fetchone()
    assert row is not None
    return int(row[0])


def run(args: argparse.Namespace, log_dir: Path) -> dict[str, Any]:
    db_url, bootstrap, topics = fresh_env("capacity")
    receiver, port = start_fast_receiver()
    env = pipeline_env(database_url=db_url, bootstrap=bootstrap, topic_prefix=topics.prefix,
                       allow_private_targets="true")
    pipeline = Pipeline(env, log_dir).start()
    try:
        with psycopg.connect(db_url) as conn:
            for i in range(args.endpoints):
                create_endpoint(conn, tenant="cap", url=f"http://127.0.0.1:{port}/hooks/e{i}",
                                event_types=["*"], allow_insecure=True, rate_per_s=10_000,
                                burst=10_000, max_in_flight=64)
        # 2 s after the endpoints exist, the dispatcher's refresh has seen them
        time.sleep(2)
        own = {p.proc.pid: key for key, p in pipeline.processes.items() if p.proc}
        stack = stack_pids()
        expected = args.events * args.endpoints
        pg_before, kafka_before = _pg_counters(db_url), _kafka_bytes(topics.prefix)
        cpu_before, t0 = cpu_by_role(own, stack), time.monotonic()
        with psycopg.connect(db_url) as conn:
            next_at = time.monotonic()
            for start in range(0, args.events, 50):
                with conn.transaction():
                    for i in range(start, min(args.events, start + 50)):
                        write_event(conn, tenant="cap", type="order.paid",
                                    payload={"n": i, "amount_cents": 1999, "currency": "EUR",
                                             "customer": f"cus_{i % 977:06d}"})
                next_at += 50 / args.rate
                time.sleep(max(0.0, next_at - time.monotonic()))
        deadline = time.monotonic() + 300
        while _delivered(db_url) < expected:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{_delivered(db_url)} of {expected} delivered in 300 s")
            time.sleep(0.2)
        cpu_after, t1 = cpu_by_role(own, stack), time.monotonic()
        pg_after, kafka_after = _pg_counters(db_url), _kafka_bytes(topics.prefix)
    finally:
        pipeline.stop()
        receiver.terminate()
        drop_database(db_url)
        drop_topics(bootstrap, topics)
    spent = cpu_delta(cpu_before, cpu_after)
    per = {f"cpu_ms_{r}": 1000 * spent.get(r, 0.0) / expected for r in ROLES}
    per.update({
        "pg_wal_bytes": (pg_after["wal_bytes"] - pg_before["wal_bytes"]) / expected,
        "pg_rows_inserted": (pg_after["inserted"] - pg_before["inserted"]) / expected,
        "pg_rows_updated": (pg_after["updated"] - pg_before["updated"]) / expected,
        "pg_rows_deleted": (pg_after["deleted"] - pg_before["deleted"]) / expected,
        "kafka_bytes": (kafka_after - kafka_before) / expected,
    })
    return {"deliveries": expected, "seconds": t1 - t0,
            "deliveries_per_s": expected / (t1 - t0), "per_delivery": per}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--events", type=int, default=2500)
    p.add_argument("--endpoints", type=int, default=4)
    p.add_argument("--rate", type=float, default=250.0, help="events per second")
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args(argv)
    RESULTS.mkdir(exist_ok=True)
    runs = []
    for i in range(args.repeat):
        result = run(args, RESULTS / "capacity-logs" / str(i))
        runs.append(result)
        print(json.dumps({"deliveries_per_s": round(result["deliveries_per_s"], 1),
                          **{k: round(v, 3) for k, v in result["per_delivery"].items()}}),
              flush=True)
    median = {k: statistics.median(r["per_delivery"][k] for r in runs)
              for k in runs[0]["per_delivery"]}
    out = RESULTS / f"capacity-inputs-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(json.dumps({"args": vars(args), "median_per_delivery": median,
                               "runs": runs}, indent=1))
    print("median per delivery: " + json.dumps({k: round(v, 3) for k, v in median.items()}))
    print(f"raw: {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
