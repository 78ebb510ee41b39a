"""What an idle pipeline costs (issue #46): CPU-ms per second of each process — relay,
fanout, dispatcher, the Kafka broker, PostgreSQL — while nothing happens, and the latency
of the first event after a quiet spell (a cheaper idle must not make it slower).

One run: a fresh database and topic prefix on the local stack, the three services as
processes (hookstream.dev.harness) with one endpoint at a local receiver, one warm-up
delivery, a settle, then ``--window`` seconds of nothing measured from /proc, then
``--probes`` events each after ``--quiet`` seconds of nothing, commit → verified arrival.
``--repeat`` windows per run; medians reported. Settings can be passed as
``--variant`` settings (their HOOKSTREAM_ names without the prefix) to compare in one run:
``--variant before --variant after:LAG_SAMPLE_INTERVAL_S=15`` alternates them.

    .venv/bin/python -m benchmarks.idle_cost --window 60 --repeat 3
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
)
from hookstream.dev.harness import Pipeline, pipeline_env
from hookstream.dev.receiver import Receiver, ReceiverThread
from hookstream.endpoints import create_endpoint
from hookstream.outbox import write_event

ROLES = ("relay", "fanout", "dispatcher", "kafka", "postgres", "postgres_background")


def _variant(raw: str) -> tuple[str, dict[str, str]]:
    name, _, rest = raw.partition(":")
    settings = dict(kv.split("=", 1) for kv in rest.split(",") if kv)
    return name, settings


def _wait_arrivals(receiver: Receiver, n: int, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while len([a for a in receiver.arrivals if a.verified]) < n:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{n} verified arrivals not reached in {timeout_s}s")
        time.sleep(0.002)


def run_variant(name: str, settings: dict[str, str], args: argparse.Namespace,
                log_dir: Path) -> dict[str, Any]:
    db_url, bootstrap, topics = fresh_env(f"idle_{name}")
    receiver = Receiver()
    thread = ReceiverThread(receiver).start()
    extra = {k.lower(): v for k, v in settings.items()}
    env = pipeline_env(database_url=db_url, bootstrap=bootstrap, topic_prefix=topics.prefix,
                       allow_private_targets="true", **extra)
    pipeline = Pipeline(env, log_dir / name).start()
    try:
        with psycopg.connect(db_url) as conn:
            ep = create_endpoint(conn, tenant="idle", url=receiver.url("ep"),
                                 event_types=["*"], allow_insecure=True)
        receiver.add("ep", ep.secret)
        with psycopg.connect(db_url, autocommit=True) as conn:
            write_event(conn, tenant="idle", type="warm.up", payload={})
        _wait_arrivals(receiver, 1)
        time.sleep(args.settle)  # a benchmark's settle: start-up work (joins, first samples) ends
        own = {p.proc.pid: key for key, p in pipeline.processes.items() if p.proc}
        stack = stack_pids()
        windows = []
        for _ in range(args.repeat):
            before, t0 = cpu_by_role(own, stack), time.monotonic()
            time.sleep(args.window)
            after, t1 = cpu_by_role(own, stack), time.monotonic()
            spent = cpu_delta(before, after)
            windows.append({r: 1000 * spent.get(r, 0.0) / (t1 - t0) for r in ROLES})
        latencies = []
        for i in range(args.probes):
            time.sleep(args.quiet)
            with psycopg.connect(db_url, autocommit=True) as conn:
                committed = time.time()
                write_event(conn, tenant="idle", type="probe", payload={"i": i})
            _wait_arrivals(receiver, 2 + i)
            latencies.append(1000 * (receiver.arrivals[-1].received_at - committed))
    finally:
        pipeline.stop()
        thread.stop()
        drop_database(db_url)
        drop_topics(bootstrap, topics)
    per_role = {r: statistics.median(w[r] for w in windows) for r in ROLES}
    return {"variant": name, "settings": settings, "windows": windows,
            "cpu_ms_per_s": per_role,
            "cpu_ms_per_s_total": sum(per_role.values()),
            "first_event_after_quiet_ms": latencies,
            "first_event_after_quiet_ms_median": statistics.median(latencies)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--window", type=float, default=60.0, help="seconds per idle window")
    p.add_argument("--repeat", type=int, default=3, help="idle windows per variant run")
    p.add_argument("--rounds", type=int, default=1, help="alternations of the variants")
    p.add_argument("--settle", type=float, default=15.0)
    p.add_argument("--probes", type=int, default=5)
    p.add_argument("--quiet", type=float, default=10.0,
                   help="seconds of nothing before each probe event")
    p.add_argument("--variant", action="append", type=_variant, default=[],
                   help="NAME[:SETTING=VALUE,...] (HOOKSTREAM_ omitted); repeatable")
    args = p.parse_args(argv)
    variants = args.variant or [("current", {})]
    RESULTS.mkdir(exist_ok=True)
    log_dir = RESULTS / "idle-cost-logs"
    runs = []
    for _ in range(args.rounds):
        for name, settings in variants:
            run = run_variant(name, settings, args, log_dir)
            runs.append(run)
            print(json.dumps({k: run[k] for k in (
                "variant", "cpu_ms_per_s", "cpu_ms_per_s_total",
                "first_event_after_quiet_ms_median")}), flush=True)
    out = RESULTS / f"idle-cost-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(json.dumps({"args": {k: v for k, v in vars(args).items()
                                        if k != "variant"},
                               "variants": [v[0] for v in variants], "runs": runs}, indent=1))
    print(f"raw: {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
