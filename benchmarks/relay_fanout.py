"""Relay and fanout throughput on the local stack (a script, not a timed test).

    .venv/bin/python -m benchmarks.relay_fanout --events 100000 --endpoints-per-event 1 4

For each endpoints-per-event value it uses a fresh database (migrated) and a fresh topic
prefix on the stack the environment points at (HOOKSTREAM_DATABASE_URL,
HOOKSTREAM_KAFKA_BOOTSTRAP), and runs the real services as processes:

1. relay: the relay is started and idle; N outbox rows are committed in one
   transaction (the commit is t0, its NOTIFY wakes the relay); the clock stops when
   the last row is marked published. Rate = N / elapsed (events/s).
2. fanout: every event's tenant has K endpoints subscribed to ``*``; the fanout
   starts on the already filled events topic; the clock runs from the moment its group
   is stable (it holds its partitions) to the moment all N*K rows exist and all N*K
   tasks are in the deliveries topic (high watermarks). Rate = N*K / elapsed
   (deliveries/s: rows + tasks).
3. optionally (``--large``) one event to a tenant with that many endpoints.

``--profile DIR`` attaches py-spy to the service under test and writes a flame graph
(svg) and the top functions (``py-spy record --format raw``) into DIR.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from confluent_kafka import Consumer, TopicPartition

from benchmarks.common import wait_group_stable
from hookstream.harness import ServiceProcess, pipeline_env
from hookstream.kafka import delete_topics, ensure_topics
from hookstream.migrate import migrate
from hookstream.topics import Topics

DEFAULT_DB = "postgresql://hookstream@127.0.0.1:55432/hookstream"
DEFAULT_KAFKA = "127.0.0.1:19092"
TENANTS = 100
PARTITIONS = 6


@dataclass
class Bench:
    admin_url: str
    bootstrap: str
    log_dir: Path
    profile_dir: Path | None
    service_env: dict[str, str]

    def url_for(self, dbname: str) -> str:
        return self.admin_url.rsplit("/", 1)[0] + "/" + dbname


def fresh_database(b: Bench) -> tuple[str, str]:
    name = f"hs_bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(b.admin_url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    url = b.url_for(name)
    migrate(url)
    return name, url


def drop_database(b: Bench, name: str) -> None:
    with psycopg.connect(b.admin_url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def fill_outbox(url: str, n: int, payload_bytes: int) -> float:
    """N rows in one transaction, generated server-side; returns the commit time."""
    with psycopg.connect(url) as conn:
        conn.execute(
            "INSERT INTO outbox (event_id, tenant, type, object_id, object_version, payload)"
            " SELECT gen_random_uuid(), 'tenant-' || (i %% %(tenants)s), 'invoice.paid',"
            "        'inv_' || i, 1,"
            "        convert_to(json_build_object('id', i, 'amount', i * 3,"
            "                   'note', repeat('x', %(pad)s))::text, 'UTF8')"
            " FROM generate_series(1, %(n)s) AS i",
            {"n": n, "tenants": TENANTS, "pad": max(0, payload_bytes - 40)})
        conn.commit()
        return time.monotonic()


def add_endpoints(url: str, per_tenant: int, tenants: list[str]) -> None:
    with psycopg.connect(url) as conn:
        conn.execute(
            "INSERT INTO endpoints (tenant, url, event_types)"
            " SELECT t, 'https://example.com/hooks/' || t || '/' || i, '{*}'"
            " FROM unnest(%(tenants)s::text[]) AS t, generate_series(1, %(k)s) AS i",
            {"tenants": tenants, "k": per_tenant})


def scalar(url: str, sql: str) -> Any:
    with psycopg.connect(url) as conn:
        row = conn.execute(sql).fetchone()
        return row[0] if row else None


class TopicCounter:
    """Records in a topic (sum of high - low watermarks), with one long-lived client so
    a poll costs a few milliseconds, not a new connection."""

    def __init__(self, bootstrap: str, topic: str):
        self.topic = topic
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-watermarks"})
        meta = self.consumer.list_topics(topic, timeout=10).topics[topic]
        self.partitions = [TopicPartition(topic, p) for p in meta.partitions]

    def __call__(self) -> int:
        total = 0
        for tp in self.partitions:
            low, high = self.consumer.get_watermark_offsets(tp, timeout=10)
            total += high - low
        return total

    def close(self) -> None:
        self.consumer.close()


class Profiler:
    def __init__(self, out_dir: Path | None, name: str, pid: int):
        self.proc: subprocess.Popen[bytes] | None = None
        if out_dir is None:
            return
        spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
        out_dir.mkdir(parents=True, exist_ok=True)
        self.out = out_dir / f"{name}.svg"
        self.raw = out_dir / f"{name}.txt"
        self.proc = subprocess.Popen(
            [spy, "record", "--pid", str(pid), "--rate", "200", "--format", "raw",
             "--output", str(self.raw), "--nonblocking"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.5)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.send_signal(2)  # SIGINT: py-spy writes its output and exits
            self.proc.wait(30)


def wait_for(fn: Any, timeout_s: float, what: str, interval_s: float = 0.05) -> float:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if fn():
            return time.monotonic()
        time.sleep(interval_s)
    raise TimeoutError(f"{what} not reached within {timeout_s}s")


def run_relay(b: Bench, url: str, topics: Topics, n: int, payload_bytes: int) -> float:
    env = {**pipeline_env(database_url=url, bootstrap=b.bootstrap, topic_prefix=topics.prefix),
           **b.service_env}
    relay = ServiceProcess("relay", env, b.log_dir / "relay.log").start()
    try:
        relay.wait_healthy(60)
        assert relay.proc is not None
        prof = Profiler(b.profile_dir, f"relay-{n}", relay.proc.pid)
        t0 = fill_outbox(url, n, payload_bytes)
        t1 = wait_for(lambda: scalar(url, "SELECT count(*) FROM outbox WHERE published_at IS NULL"
                                          " AND quarantined_at IS NULL") == 0,
                      600, "all rows published", 0.02)
        prof.stop()
    finally:
        relay.terminate()
    return t1 - t0


def run_fanout(b: Bench, url: str, topics: Topics, expected: int, label: str) -> float:
    group = f"bench-{uuid.uuid4().hex[:8]}"
    env = {**pipeline_env(database_url=url, bootstrap=b.bootstrap, topic_prefix=topics.prefix,
                          fanout_group_id=group),
           **b.service_env}
    tasks_in_topic = TopicCounter(b.bootstrap, topics.deliveries)
    fanout = ServiceProcess("fanout", env, b.log_dir / "fanout.log").start()
    try:
        fanout.wait_healthy(60)
        assert fanout.proc is not None
        prof = Profiler(b.profile_dir, f"fanout-{label}", fanout.proc.pid)
        # The clock starts when the fanout holds its partitions (the group is stable: its
        # start-up and group join are not fanout throughput), not at its first committed
        # row, which left the first statement's whole cost out (up to ~2x on the
        # one-event, 10,000-endpoint case). The group is polled every 0.2 s, so the clock
        # may start a little late: rows already written then are reported.
        wait_group_stable(b.bootstrap, group, 1)
        t0 = time.monotonic()
        if early := scalar(url, "SELECT count(*) FROM deliveries"):
            print(f"  (fanout {label}: {early} rows already written when the clock started)",
                  flush=True)
        wait_for(lambda: scalar(url, "SELECT count(*) FROM deliveries") >= expected, 900,
                 "all delivery rows", 0.02)
        t1 = wait_for(lambda: tasks_in_topic() >= expected, 300, "all delivery tasks", 0.01)
        prof.stop()
    finally:
        fanout.terminate()
    rows = scalar(url, "SELECT count(*) FROM deliveries")
    tasks = tasks_in_topic()
    tasks_in_topic.close()
    if rows != expected or tasks < expected:
        raise AssertionError(f"expected {expected} rows and tasks, got {rows} rows, {tasks} tasks")
    return t1 - t0


def one_round(b: Bench, n: int, k: int, payload_bytes: int) -> dict[str, float]:
    name, url = fresh_database(b)
    topics = Topics(f"bench{uuid.uuid4().hex[:8]}")
    ensure_topics(b.bootstrap, topics.specs(partitions=PARTITIONS))
    try:
        relay_s = run_relay(b, url, topics, n, payload_bytes)
        add_endpoints(url, k, [f"tenant-{i}" for i in range(TENANTS)])
        fanout_s = run_fanout(b, url, topics, n * k, f"{n}x{k}")
        return {"relay_s": relay_s, "relay_rate": n / relay_s,
                "fanout_s": fanout_s, "fanout_rate": n * k / fanout_s}
    finally:
        delete_topics(b.bootstrap, [s.name for s in topics.specs()])
        drop_database(b, name)


def large_round(b: Bench, endpoints: int) -> dict[str, float]:
    name, url = fresh_database(b)
    topics = Topics(f"bench{uuid.uuid4().hex[:8]}")
    ensure_topics(b.bootstrap, topics.specs(partitions=PARTITIONS))
    try:
        add_endpoints(url, endpoints, ["tenant-1"])  # fill_outbox's row 1
        run_relay(b, url, topics, 1, 200)
        fanout_s = run_fanout(b, url, topics, endpoints, f"large-{endpoints}")
        return {"fanout_s": fanout_s, "fanout_rate": endpoints / fanout_s}
    finally:
        delete_topics(b.bootstrap, [s.name for s in topics.specs()])
        drop_database(b, name)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--events", type=int, default=100_000)
    p.add_argument("--endpoints-per-event", type=int, nargs="*", default=[1, 4])
    p.add_argument("--payload-bytes", type=int, default=200)
    p.add_argument("--large", type=int, default=0,
                   help="also fan one event out to a tenant with this many endpoints")
    p.add_argument("--profile", type=Path, default=None, help="py-spy output folder")
    p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                   help="extra HOOKSTREAM_<NAME> for the services, e.g. RELAY_BATCH_SIZE=2000")
    args = p.parse_args(argv)
    b = Bench(
        admin_url=os.environ.get("HOOKSTREAM_DATABASE_URL", DEFAULT_DB),
        bootstrap=os.environ.get("HOOKSTREAM_KAFKA_BOOTSTRAP", DEFAULT_KAFKA),
        log_dir=Path(os.environ.get("TMPDIR", "/tmp")) / f"hs-bench-{os.getpid()}",
        profile_dir=args.profile,
        service_env={"HOOKSTREAM_LOG_LEVEL": "WARNING"} | {
            f"HOOKSTREAM_{kv.split('=', 1)[0].upper()}": kv.split("=", 1)[1] for kv in args.set},
    )
    print(f"stack: {b.admin_url} {b.bootstrap}; {os.cpu_count()} CPUs; logs in {b.log_dir}")
    print(f"{'events':>8} {'ep/event':>8} {'relay s':>8} {'events/s':>10} "
          f"{'fanout s':>9} {'deliveries/s':>13}")
    for k in args.endpoints_per_event:
        r = one_round(b, args.events, k, args.payload_bytes)
        print(f"{args.events:>8} {k:>8} {r['relay_s']:>8.2f} {r['relay_rate']:>10,.0f} "
              f"{r['fanout_s']:>9.2f} {r['fanout_rate']:>13,.0f}", flush=True)
    if args.large:
        r = large_round(b, args.large)
        print(f"one event → {args.large:,} endpoints: {r['fanout_s']:.2f} s, "
              f"{r['fanout_rate']:,.0f} deliveries/s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
