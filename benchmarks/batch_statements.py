"""The dispatcher's two batch statements alone, today's text against a git revision's.

    .venv/bin/python -m benchmarks.batch_statements --batch 200 --against 4a983e8

One fresh database on the local stack (migrated, 100 tenants of 4 endpoints with sealed
secrets, today's partitions: ``benchmarks.history_scale``'s helpers). Each round the
fanout's real statements make ``--events`` × 4 pending deliveries committed now, then
the real ``Store.claim`` and ``Store.record`` (hookstream.dispatcher.store) take them in
batches of ``--batch``, each delivered — once with today's ``dispatcher.sql``, once with
the revision's, alternated round by round so both see the same host and a partition of
the same size. It reports milliseconds per claim and per record (client side: the
round trip, PostgreSQL's planning and execution) and attempts/s over the time spent in
the two statements, the median over ``--rounds`` rounds, and the ratio; then the
planning and execution times of EXPLAIN ANALYZE of one claim, each side. Nothing else
of the pipeline runs: this isolates what a statement's text costs the database, not
what the dispatcher does around it (``benchmarks.pipeline`` measures that).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
from datetime import UTC, datetime, timedelta

import psycopg
from hookstream.dispatcher import store as store_mod

from benchmarks import history_scale as hs
from benchmarks.common import drop_database, fresh_env
from hookstream.core.codec import DeliveryTask
from hookstream.io import queries

NAMES = ("claim", "record_outcomes")
EXPLAINS = 40  # claims explained per side


def explain_claims(url: str, claim_sql: str, tasks: list[DeliveryTask], batch: int
                   ) -> tuple[float, float]:
    """Median planning and execution ms of EXPLAIN ANALYZE of ``claim_sql`` over
    batches of ``tasks``, each rolled back, planned with its values as the dispatcher's
    connections plan (hookstream.io.pg.plan_with_values)."""
    plan, execute = [], []
    with psycopg.connect(url) as conn:
        conn.execute("SET plan_cache_mode = force_custom_plan")
        for i in range(EXPLAINS):
            some = tasks[(i * batch) % (len(tasks) - batch):][:batch]
            with conn.transaction(force_rollback=True):
                row = conn.execute("EXPLAIN (ANALYZE, SUMMARY, FORMAT JSON) " + claim_sql,
                                   hs.claim_params(some)).fetchone()
            assert row is not None
            plan.append(row[0][0]["Planning Time"])
            execute.append(row[0][0]["Execution Time"])
    return statistics.median(plan), statistics.median(execute)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch", type=int, default=200, help="tasks per claim (the pump's 200)")
    ap.add_argument("--events", type=int, default=10_000, help="events per round (× 4)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds per side")
    ap.add_argument("--against", required=True, help="git revision of the other dispatcher.sql")
    args = ap.parse_args()
    theirs = queries.parse(subprocess.run(
        ["git", "show", f"{args.against}:src/hookstream/io/sql/dispatcher.sql"],
        check=True, capture_output=True, text=True).stdout)
    ours = {name: store_mod.Q[name] for name in NAMES}
    sides = {"today": ours, args.against: {name: theirs[name] for name in NAMES}}
    url, _, _ = fresh_env("batch_statements", partitions=1)
    today = datetime.now(UTC).date()
    hs.make_partitions(url, today - timedelta(days=2), today)
    asyncio.run(hs.make_tenants(url))
    results: dict[str, list[tuple[float, float, float]]] = {side: [] for side in sides}
    seq = 0
    try:
        for rnd in range(args.rounds):
            order = list(sides) if rnd % 2 == 0 else list(sides)[::-1]
            for side in order:
                _, tasks = hs.fanout_round(url, args.events, seq)
                seq += args.events
                with psycopg.connect(url, autocommit=True) as conn:
                    conn.execute("ANALYZE")  # both sides plan from the same statistics
                store_mod.Q.update(sides[side])
                got = asyncio.run(hs.dispatch_round(url, tasks, args.batch))
                n, batches = got["attempts"], -(-len(tasks) // args.batch)
                row = (got["claim_s"] * 1000 / batches, got["record_s"] * 1000 / batches,
                       n / got["db_s"])
                results[side].append(row)
                print(f"round {rnd + 1} {side}: {n} attempts; claim {row[0]:.2f} ms, "
                      f"record {row[1]:.2f} ms per batch of {args.batch}; {row[2]:,.0f}/s",
                      flush=True)
        _, tasks = hs.fanout_round(url, max(args.events // 4, 2 * args.batch), seq)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("ANALYZE")
        for side, q in sides.items():
            planning, execution = explain_claims(url, q["claim"], tasks, args.batch)
            print(f"EXPLAIN claim of {args.batch}, {side}: planning {planning:.2f} ms, "
                  f"execution {execution:.2f} ms (median of {EXPLAINS})", flush=True)
    finally:
        store_mod.Q.update(ours)
        drop_database(url)
    med = {side: [statistics.median(r[i] for r in rows) for i in range(3)]
           for side, rows in results.items()}
    for side, (c, r, rate) in med.items():
        print(f"median {side}: claim {c:.2f} ms, record {r:.2f} ms, {rate:,.0f} attempts/s")
    print(f"ratio today / {args.against}: {med['today'][2] / med[args.against][2]:.2f}")


if __name__ == "__main__":
    main()
