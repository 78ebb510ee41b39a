"""A slow customer stays the customer's problem (issue #13): the whole pipeline with many
fast endpoints and a few that answer in seconds, against the same run without them.

    .venv/bin/python -m benchmarks.slow_customers [--endpoints 300] [--slow 10]
        [--slow-delay-s 3] [--rate 300] [--slow-rate 3] [--duration 180]

Each event goes to exactly one endpoint (its own event type). The fast endpoints share
``--rate`` events/s; each slow endpoint gets ``--slow-rate`` events/s on top — more than it
can drain (its in-flight cap of 4 ÷ ``--slow-delay-s`` ≈ 1.3/s), so its backlog grows for
the whole run, as seed 000's customer's did. Two phases in one run, on fresh databases
and topics: **baseline** (the slow endpoints' events not sent) and **slow**. Each reports,
over the steady window (the load minus its first ``--warmup`` seconds):

* dispatcher group lag in seconds (p50 / p99 / max of the worst partition, sampled every
  2 s from the relay's /metrics — every service exports every group);
* write amplification: records written to the deliveries topic and the delay tiers per
  delivery created (1.0 = each delivery's task written once, never deferred or retried);
* dispatcher CPU-ms per attempt, and the machine's busy share;
* fast endpoints' commit → first attempt p50 / p99 (the customers that did nothing wrong);
* the slow endpoints as the per-endpoint gauges show them, and whether the platform
  signals stayed quiet (fast endpoints overdue, platform-behind condition).

Prints a table and writes bench-results/slow-customers.json.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import shutil
import tempfile
import threading
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import psycopg
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec
from prometheus_client.parser import text_string_to_metric_families

from benchmarks.common import RESULTS, cpu_seconds
from benchmarks.pipeline import (
    drop_database,
    fresh_database,
    machine_busy,
    percentiles,
    stack_target,
    start_farm,
)
from hookstream.core.topics import Topics
from hookstream.dev.harness import Pipeline, free_port, pipeline_env
from hookstream.endpoints import create_endpoint
from hookstream.io.kafka import delete_topics, ensure_topics

TENANTS = 30
PAD = "x" * 200
_INSERT = (
    "INSERT INTO outbox (event_id, tenant, type, payload)"
    " SELECT gen_random_uuid(), t, y, convert_to("
    "'{\"t\":' || extract(epoch FROM clock_timestamp()) || ',\"pad\":\"" + PAD + "\"}', 'UTF8')"
    " FROM unnest(%(tenants)s::text[], %(types)s::text[]) AS x(t, y)"
)


class Load(threading.Thread):
    """One multi-row INSERT every tick: fast endpoints share ``rate``; each slow endpoint
    gets ``slow_rate`` (when ``with_slow``)."""

    def __init__(self, db: str, fast: list[tuple[str, str]], slow: list[tuple[str, str]],
                 rate: float, slow_rate: float, duration_s: float, tick_s: float = 0.05):
        super().__init__(name="load", daemon=True)
        self.db, self.fast, self.slow = db, fast, slow
        self.rate, self.slow_rate, self.duration_s, self.tick_s = (
            rate, slow_rate, duration_s, tick_s)
        self.written = 0
        self.rng = random.Random(13)

    def run(self) -> None:
        owed_fast, owed_slow = 0.0, 0.0
        with psycopg.connect(self.db, autocommit=True) as conn:
            t0 = time.monotonic()
            tick = 0
            while time.monotonic() - t0 < self.duration_s:
                owed_fast += self.rate * self.tick_s
                owed_slow += self.slow_rate * self.tick_s
                picks = [self.rng.choice(self.fast) for _ in range(int(owed_fast))]
                owed_fast -= int(owed_fast)
                while owed_slow >= 1:
                    owed_slow -= 1
                    picks += self.slow
                if picks:
                    conn.execute(_INSERT, {"tenants": [p[0] for p in picks],
                                           "types": [p[1] for p in picks]})
                    self.written += len(picks)
                tick += 1
                time.sleep(max(0.0, t0 + tick * self.tick_s - time.monotonic()))


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(text) for s in f.samples}


def topic_ends(bootstrap: str, topics: list[str]) -> int:
    """Sum of the high watermarks of ``topics`` (records ever written to them)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    meta = admin.list_topics(timeout=10)
    tps = [TopicPartition(t, p) for t in topics for p in meta.topics[t].partitions]
    futures = admin.list_offsets({tp: OffsetSpec.latest() for tp in tps}, request_timeout=10)
    return sum(f.result(timeout=10).offset for f in futures.values())


def scalar(db: str, sql: str, params: Any = None) -> Any:
    with psycopg.connect(db) as conn:
        row = conn.execute(sql, params).fetchone()
        return row[0] if row else None


def phase(args: argparse.Namespace, with_slow: bool) -> dict[str, Any]:
    admin_url, bootstrap = stack_target()
    label = "slow" if with_slow else "baseline"
    db = fresh_database(admin_url, f"slowcust_{label}")
    topics = Topics(f"bsc{uuid.uuid4().hex[:8]}")
    ensure_topics(bootstrap, topics.specs(partitions=args.partitions))
    work = Path(tempfile.mkdtemp(prefix=f"hs-slowcust-{label}-"))
    ports = [free_port() for _ in range(args.receivers)]
    farm: dict[str, Any] = {"endpoints": {}}
    fast: list[tuple[str, str]] = []
    slow: list[tuple[str, str]] = []
    slow_ids: list[str] = []
    with psycopg.connect(db) as conn:
        for i in range(args.endpoints):
            is_slow = i < args.slow
            tenant, etype, name = f"t{i % TENANTS:02d}", f"e.{i}", f"ep{i}"
            ep = create_endpoint(
                conn, tenant=tenant, url=f"http://127.0.0.1:{ports[i % len(ports)]}/hooks/{name}",
                event_types=[etype], allow_insecure=True,
                **({"max_in_flight": 4} if is_slow else {}))
            farm["endpoints"][name] = {"secret": ep.secret, "kind": "slow" if is_slow else "ok",
                                       "delay_s": args.slow_delay_s}
            (slow if is_slow else fast).append((tenant, etype))
            if is_slow:
                slow_ids.append(str(ep.endpoint_id))
    farm_procs = start_farm(farm, ports, verify_every=20, work=work)
    env = pipeline_env(database_url=db, bootstrap=bootstrap, topic_prefix=topics.prefix,
                       allow_private_targets="true", lag_sample_interval_s="2",
                       db_metrics_interval_s="5",
                       **dict(kv.split("=", 1) for kv in args.set))
    pipeline = Pipeline(env, work).start(90)
    load = Load(db, fast, slow if with_slow else [], args.rate,
                args.slow_rate, args.duration)
    lag_samples: list[float] = []
    overdue_fast: list[float] = []
    delivery_topics = [topics.deliveries, *topics.tiers.topics]
    dispatcher_group = f"{topics.prefix}-dispatcher"
    try:
        load.start()
        time.sleep(args.warmup)
        t0 = time.monotonic()
        busy0 = machine_busy()
        cpu0 = cpu_seconds(pipeline["dispatcher"].proc.pid)  # type: ignore[union-attr]
        records0 = topic_ends(bootstrap, delivery_topics)
        deliveries0 = scalar(db, "SELECT count(*) FROM deliveries")
        attempts0 = scalar(db, "SELECT count(*) FROM attempts")
        window_start = scalar(db, "SELECT now()")
        while load.is_alive():
            got = scrape(pipeline["relay"].http_port)
            ages = [v for (name, labels), v in got.items()
                    if name == "kafka_consumergroup_lag_seconds"
                    and dict(labels).get("consumergroup") == dispatcher_group]
            if ages:
                lag_samples.append(max(ages))
            fan = scrape(pipeline["fanout"].http_port)
            overdue_fast.append(fan.get(("hookstream_endpoints_overdue",
                                         (("over_seconds", "10"),)), 0.0))
            time.sleep(2)
        elapsed = time.monotonic() - t0
        busy1 = machine_busy()
        cpu1 = cpu_seconds(pipeline["dispatcher"].proc.pid)  # type: ignore[union-attr]
        records1 = topic_ends(bootstrap, delivery_topics)
        deliveries1 = scalar(db, "SELECT count(*) FROM deliveries")
        attempts1 = scalar(db, "SELECT count(*) FROM attempts")
        fan = scrape(pipeline["fanout"].http_port)
        shown = {dict(labels)["endpoint"]: v for (name, labels), v in fan.items()
                 if name == "hookstream_endpoint_oldest_pending_age_seconds"}
        first = [r[0] for r in psycopg.connect(db).execute(
            "SELECT extract(epoch FROM a.started_at - ev.committed_at)::float8"
            " FROM attempts a JOIN deliveries d USING (delivery_id)"
            " JOIN events ev USING (event_id)"
            " WHERE a.attempt_no = 1 AND a.started_at >= %s AND NOT d.endpoint_id = ANY(%s)",
            (window_start, slow_ids)).fetchall()]
        slow_pending = scalar(db, "SELECT count(*) FROM deliveries WHERE status = 'pending'"
                                  " AND endpoint_id = ANY(%s)", (slow_ids,))
        created = deliveries1 - deliveries0
        attempts = attempts1 - attempts0
        result = {
            "phase": label, "window_s": round(elapsed, 1), "events_written": load.written,
            "deliveries_created": created, "attempts": attempts,
            "dispatcher_lag_s": percentiles(lag_samples) | {"max": max(lag_samples or [0])},
            "write_amplification": round((records1 - records0) / max(1, created), 3),
            "dispatcher_cpu_ms_per_attempt": round((cpu1 - cpu0) * 1000 / max(1, attempts), 4),
            "machine_busy_share": round((busy1[0] - busy0[0]) / max(1, busy1[1] - busy0[1]), 3),
            "fast_first_attempt_s": percentiles(first),
            "endpoints_overdue_10s_max": max(overdue_fast or [0]),
            "slow_endpoints_shown": sum(1 for s in slow_ids if s in shown),
            "slow_pending_at_end": slow_pending,
        }
        print(json.dumps(result), flush=True)
        return result
    finally:
        pipeline.stop()
        for p in farm_procs:
            p.terminate()
        delete_topics(bootstrap, [s.name for s in topics.specs()])
        if not args.keep_db:
            drop_database(admin_url, db)
        shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--endpoints", type=int, default=300)
    p.add_argument("--slow", type=int, default=10)
    p.add_argument("--slow-delay-s", type=float, default=3.0)
    p.add_argument("--rate", type=float, default=300.0, help="events/s to the fast endpoints")
    p.add_argument("--slow-rate", type=float, default=3.0, help="events/s to EACH slow endpoint")
    p.add_argument("--duration", type=float, default=180.0)
    p.add_argument("--warmup", type=float, default=30.0)
    p.add_argument("--partitions", type=int, default=6)
    p.add_argument("--receivers", type=int, default=2)
    p.add_argument("--phases", nargs="+", choices=["baseline", "slow"],
                   default=["baseline", "slow"])
    p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                   help="a service setting for both phases, e.g. --set sweep_interval_s=1")
    p.add_argument("--keep-db", action="store_true")
    p.add_argument("--label", default="")
    args = p.parse_args(argv)
    results = [phase(args, with_slow=(ph == "slow")) for ph in args.phases]
    by = {r["phase"]: r for r in results}
    out: dict[str, Any] = {"args": vars(args), "phases": by}
    if "baseline" in by and "slow" in by:
        base, slow = by["baseline"], by["slow"]
        out["cpu_ratio"] = round(slow["dispatcher_cpu_ms_per_attempt"]
                                 / max(1e-9, base["dispatcher_cpu_ms_per_attempt"]), 2)
    print(f"{'':34}" + "".join(f"{r['phase']:>14}" for r in results))
    def pair(key: str, digits: int) -> Any:
        return lambda r: f"{r[key].get('p50', 0):.{digits}f} / {r[key].get('p99', 0):.{digits}f}"

    rows = [("dispatcher lag p50 / p99 s", pair("dispatcher_lag_s", 1)),
            ("write amplification (rec/deliv)", lambda r: f"{r['write_amplification']:.2f}"),
            ("dispatcher CPU-ms / attempt",
             lambda r: f"{r['dispatcher_cpu_ms_per_attempt']:.3f}"),
            ("fast 1st attempt p50 / p99 s", pair("fast_first_attempt_s", 2)),
            ("endpoints overdue >10 s (max)", lambda r: f"{r['endpoints_overdue_10s_max']:.0f}"),
            ("slow endpoints in the gauges", lambda r: str(r["slow_endpoints_shown"])),
            ("machine busy", lambda r: f"{r['machine_busy_share']:.0%}")]
    for title, fmt in rows:
        print(f"{title:34}" + "".join(f"{fmt(r):>14}" for r in results))
    if "cpu_ratio" in out:
        print(f"dispatcher CPU per attempt, slow / baseline: {out['cpu_ratio']}x")
    RESULTS.mkdir(exist_ok=True)
    suffix = re.sub(r"[^\w.-]", "_", args.label)
    name = "slow-customers" + (f"-{suffix}" if suffix else "")
    (RESULTS / f"{name}.json").write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
