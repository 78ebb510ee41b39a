"""Relay and fanout throughput on the local stack (a script, not a timed test).

    .venv/bin/python -m benchmarks.relay_fanout --events 100000 --endpoints-per-event 1 4

For each endpoints-per-event value it uses a fresh database (migrated) and a fresh topic
prefix on the stack the environment points at (HOOKSTREAM_DATABASE_URL,
HOOKSTREAM_KAFKA_BOOTSTRAP; else the local stack's own addresses), and runs the real
services as processes:

1. relay, best case: the relay is started and idle; N outbox rows are committed in one
   transaction (the commit is t0, its NOTIFY wakes the relay); the clock stops when
   the last row is marked published. Rate = N / elapsed (events/s). One huge
   transaction is the relay's easiest input (full batches, one wake-up).
2. fanout: every event's tenant has K endpoints subscribed to ``*``; the fanout
   starts on the already filled events topic; the clock runs from the moment its group
   is stable (it holds its partitions) to the moment all N*K rows exist and all N*K
   tasks are in the deliveries topic (high watermarks). Rate = N*K / elapsed
   (deliveries/s: rows + tasks).
3. optionally (``--large``) one event to a tenant with that many endpoints.
   ``--hot-tenant R [R ...]``: the N events all of one tenant (distinct objects, one
   endpoint), fanned out by R fanout replicas in one group; reports the events topic's
   records per partition (how the relay's key spread them) and the fanout rate.
4. relay under small transactions (``--small-batch 1 50``): ``--producers`` connections
   (processes) commit transactions of 1 (then 50) events each with
   ``hookstream.outbox.write_event``, as fast as they can (or ``--producer-rate``), for
   ``--small-seconds``, while the relay publishes. The events topic stamps each record
   with the broker's append time (``LogAppendTime``): commit → acknowledged latency per
   event is that stamp minus the time the producer's commit returned, read from the
   topic after the run (nothing consumes it during the run). Reported: the producers'
   commit rate, the relay's acknowledged rate inside the producing window, the latency
   percentiles, the backlog left when the producers stop and whether the relay kept up
   (less than one second of commits left unacknowledged at the end).
5. yardstick, after the best case and after the small transactions
   (``--yardstick-records``; not before the best case, which it slows): Kafka's own
   ``ProducerPerformance`` from the stack's jars against the same broker, records of the
   relay's size, the relay's producer settings (acks=all, idempotent, linger 5 ms, lz4),
   the same partition count. Every relay rate is also quoted as a ratio of the faster of
   the two yardstick runs.

``--profile DIR`` attaches py-spy to the service under test and writes a flame graph
(svg) and the top functions (``py-spy record --format raw``) into DIR. ``--json PATH``
writes every figure (default bench-results/relay-fanout.json).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import orjson
import psycopg
from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME, Consumer, TopicPartition

from benchmarks.common import (
    RESULTS,
    busy_fraction,
    cpu_by_role,
    cpu_delta,
    cpu_seconds,
    machine_cpu,
    stack_pids,
    wait_group_stable,
)
from hookstream.core.codec import EventEnvelope
from hookstream.core.fastcodec import encode_envelope
from hookstream.core.topics import Topics, TopicSpec
from hookstream.dev.harness import ServiceProcess, pipeline_env
from hookstream.io.kafka import delete_topics, ensure_topics
from hookstream.ops.migrate import migrate

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


def fill_outbox(url: str, n: int, payload_bytes: int, tenants: int = TENANTS) -> float:
    """N rows in one transaction, generated server-side; returns the commit time."""
    with psycopg.connect(url) as conn:
        conn.execute(
            "INSERT INTO outbox (event_id, tenant, type, object_id, object_version, payload)"
            " SELECT gen_random_uuid(), 'tenant-' || (i %% %(tenants)s), 'invoice.paid',"
            "        'inv_' || i, 1,"
            "        convert_to(json_build_object('id', i, 'amount', i * 3,"
            "                   'note', repeat('x', %(pad)s))::text, 'UTF8')"
            " FROM generate_series(1, %(n)s) AS i",
            {"n": n, "tenants": tenants, "pad": max(0, payload_bytes - 40)})
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


def run_relay(b: Bench, url: str, topics: Topics, n: int, payload_bytes: int,
              tenants: int = TENANTS) -> tuple[float, float]:
    """(seconds from the one transaction's commit to the last row marked published,
    the relay's CPU seconds over them)."""
    env = {**pipeline_env(database_url=url, bootstrap=b.bootstrap, topic_prefix=topics.prefix),
           **b.service_env}
    relay = ServiceProcess("relay", env, b.log_dir / "relay.log").start()
    try:
        relay.wait_healthy(60)
        assert relay.proc is not None
        prof = Profiler(b.profile_dir, f"relay-{n}", relay.proc.pid)
        cpu0 = cpu_seconds(relay.proc.pid)
        t0 = fill_outbox(url, n, payload_bytes, tenants)
        t1 = wait_for(lambda: scalar(url, "SELECT count(*) FROM outbox WHERE published_at IS NULL"
                                          " AND quarantined_at IS NULL") == 0,
                      600, "all rows published", 0.02)
        cpu = cpu_seconds(relay.proc.pid) - cpu0
        prof.stop()
    finally:
        relay.terminate()
    return t1 - t0, cpu


def run_fanout(b: Bench, url: str, topics: Topics, expected: int, label: str,
               replicas: int = 1) -> tuple[float, int, list[int]]:
    """(seconds from the group being stable to every row and task, rows already written
    by then — with several replicas the first ones to join start before the last — and
    the rows each replica created: who did the work)."""
    group = f"bench-{uuid.uuid4().hex[:8]}"
    env = {**pipeline_env(database_url=url, bootstrap=b.bootstrap, topic_prefix=topics.prefix,
                          fanout_group_id=group),
           **b.service_env}
    tasks_in_topic = TopicCounter(b.bootstrap, topics.deliveries)
    fanouts = [ServiceProcess("fanout", env, b.log_dir / f"fanout-{i}.log").start()
               for i in range(replicas)]
    fanout = fanouts[0]
    try:
        for f in fanouts:
            f.wait_healthy(60)
        assert fanout.proc is not None
        prof = Profiler(b.profile_dir, f"fanout-{label}", fanout.proc.pid)
        # The clock starts when the fanout holds its partitions (the group is stable: its
        # start-up and group join are not fanout throughput), not at its first committed
        # row, which left the first statement's whole cost out (up to ~2x on the
        # one-event, 10,000-endpoint case). The group is polled every 0.2 s, so the clock
        # may start a little late: rows already written then are reported.
        wait_group_stable(b.bootstrap, group, replicas)
        t0 = time.monotonic()
        if early := scalar(url, "SELECT count(*) FROM deliveries"):
            print(f"  (fanout {label}: {early} rows already written when the clock started)",
                  flush=True)
        wait_for(lambda: scalar(url, "SELECT count(*) FROM deliveries") >= expected, 900,
                 "all delivery rows", 0.02)
        t1 = wait_for(lambda: tasks_in_topic() >= expected, 300, "all delivery tasks", 0.01)
        prof.stop()
        created = [_created(f) for f in fanouts]
    finally:
        for f in fanouts:
            f.terminate()
    rows = scalar(url, "SELECT count(*) FROM deliveries")
    tasks = tasks_in_topic()
    tasks_in_topic.close()
    if rows != expected or tasks < expected:
        raise AssertionError(f"expected {expected} rows and tasks, got {rows} rows, {tasks} tasks")
    return t1 - t0, early, created


def _created(fanout: ServiceProcess) -> int:
    """The delivery rows one fanout replica created, from its /metrics."""
    from prometheus_client.parser import text_string_to_metric_families

    code, body = fanout.get("/metrics", timeout=10)
    if code != 200:
        raise RuntimeError(f"fanout /metrics answered {code}")
    return int(sum(s.value for f in text_string_to_metric_families(body.decode())
                   for s in f.samples
                   if s.name == "hookstream_fanout_deliveries_created_total"))


def one_round(b: Bench, n: int, k: int, payload_bytes: int) -> dict[str, Any]:
    name, url = fresh_database(b)
    topics = Topics(f"bench{uuid.uuid4().hex[:8]}")
    ensure_topics(b.bootstrap, topics.specs(partitions=PARTITIONS))
    try:
        relay_s, relay_cpu = run_relay(b, url, topics, n, payload_bytes)
        add_endpoints(url, k, [f"tenant-{i}" for i in range(TENANTS)])
        fanout_s, _, _ = run_fanout(b, url, topics, n * k, f"{n}x{k}")
        return {"events": n, "endpoints_per_event": k,
                "relay_s": relay_s, "relay_rate": n / relay_s,
                "relay_cpu_ms_per_event": 1000 * relay_cpu / n,
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
        run_relay(b, url, topics, 1, 200)  # only the event: its rate means nothing
        fanout_s, _, _ = run_fanout(b, url, topics, endpoints, f"large-{endpoints}")
        return {"fanout_s": fanout_s, "fanout_rate": endpoints / fanout_s}
    finally:
        delete_topics(b.bootstrap, [s.name for s in topics.specs()])
        drop_database(b, name)


def hot_tenant_round(b: Bench, n: int, replicas: int, payload_bytes: int) -> dict[str, Any]:
    """Issue #16: N events of one tenant (objects inv_1..inv_N) through the relay, then R
    fanout replicas. With the tenant as the key every record sat on one partition, so one
    replica did all the work whatever R was."""
    name, url = fresh_database(b)
    topics = Topics(f"bench{uuid.uuid4().hex[:8]}")
    ensure_topics(b.bootstrap, topics.specs(partitions=PARTITIONS))
    try:
        relay_s, _ = run_relay(b, url, topics, n, payload_bytes, tenants=1)
        counter = TopicCounter(b.bootstrap, topics.events)
        per_partition = [high - low for low, high in (
            counter.consumer.get_watermark_offsets(tp, timeout=10) for tp in counter.partitions)]
        counter.close()
        add_endpoints(url, 1, ["tenant-0"])
        fanout_s, early, created = run_fanout(b, url, topics, n, f"hot-{replicas}", replicas)
        # The rate of the rows written once every replica held its partitions.
        return {"events": n, "fanout_replicas": replicas, "relay_rate": n / relay_s,
                "events_per_partition": per_partition,
                "busiest_partition_share": max(per_partition) / n,
                "rows_per_replica": created,
                "fanout_s": fanout_s, "rows_before_clock": early,
                "fanout_rate": (n - early) / fanout_s}
    finally:
        delete_topics(b.bootstrap, [s.name for s in topics.specs()])
        drop_database(b, name)


# -- the relay under small transactions ------------------------------------------------

def _payload(i: int, payload_bytes: int) -> dict[str, Any]:
    """The JSON the producers write: the same shape and size as ``fill_outbox``'s rows."""
    return {"id": i, "amount": i * 3, "note": "x" * max(0, payload_bytes - 40)}


def _producer(url: str, per_txn: int, seconds: float, rate_per_s: float | None,
              payload_bytes: int, seed: int, out_path: str,
              start: Any, done: Any, release: Any) -> None:
    """One producer connection (a process of its own): transactions of ``per_txn``
    events written with ``write_event``, for ``seconds`` after ``start``, back to back or
    paced at ``rate_per_s`` events/s. Writes one ``event_id commit_time`` line per event
    (the commit time is when ``commit()`` returned) and a last ``cpu <seconds>`` line.
    Waits at ``done`` with its connection still open, so the parent reads PostgreSQL's CPU
    before this connection's backend exits, and leaves at ``release``."""
    from hookstream.outbox import write_event

    lines: list[str] = []
    with psycopg.connect(url) as conn:
        conn.execute("SELECT 1")
        conn.rollback()
        start.wait()
        cpu0 = time.process_time()
        t0 = time.time()
        stop, next_at, i = t0 + seconds, t0, 0
        while time.time() < stop:
            ids = []
            for _ in range(per_txn):
                i += 1
                ids.append(write_event(conn, tenant=f"tenant-{i % TENANTS}",
                                       type="invoice.paid", payload=_payload(i, payload_bytes),
                                       object_id=f"inv_{seed}_{i}", object_version=1))
            conn.commit()
            committed = time.time()
            lines.extend(f"{e} {committed:.6f}" for e in ids)
            if rate_per_s:
                next_at += per_txn / rate_per_s
                if (wait := next_at - time.time()) > 0:
                    time.sleep(wait)
        cpu = time.process_time() - cpu0
        Path(out_path).write_text("\n".join([*lines, f"cpu {cpu:.3f}"]) + "\n")
        done.wait()
        release.wait()


def _read_topic(bootstrap: str, topic: str, expected: int, timeout_s: float = 120,
                ) -> tuple[dict[str, float], list[int], int]:
    """Every record of ``topic`` (read after the run): event id → broker append time
    (epoch s), the record sizes, and how many records carried another timestamp type."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    appended: dict[str, float] = {}
    sizes: list[int] = []
    other_stamps = 0
    deadline = time.monotonic() + timeout_s
    try:
        while len(sizes) < expected and time.monotonic() < deadline:
            for msg in consumer.consume(10_000, timeout=1.0):
                if msg.error():
                    continue
                value = msg.value() or b""
                kind, ms = msg.timestamp()
                if kind != TIMESTAMP_LOG_APPEND_TIME:
                    other_stamps += 1
                sizes.append(len(value))
                appended.setdefault(str(EventEnvelope.decode(value).event_id), ms / 1000)
    finally:
        consumer.close()
    return appended, sizes, other_stamps


def _percentiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    q = statistics.quantiles(values, n=1000, method="inclusive")
    return {"p50_ms": round(1000 * q[499], 1), "p95_ms": round(1000 * q[949], 1),
            "p99_ms": round(1000 * q[989], 1), "max_ms": round(1000 * max(values), 1)}


def run_small(b: Bench, per_txn: int, producers: int, seconds: float,
              rate_per_s: float | None, payload_bytes: int) -> dict[str, Any]:
    name, url = fresh_database(b)
    topics = Topics(f"bench{uuid.uuid4().hex[:8]}")
    # The broker stamps each record when it appends it: the acknowledgement time (acks=all
    # on one node), read back after the run instead of being watched during it.
    specs = [replace(s, config={**s.config, "message.timestamp.type": "LogAppendTime"})
             if s.name == topics.events else s for s in topics.specs(partitions=PARTITIONS)]
    ensure_topics(b.bootstrap, specs)
    env = {**pipeline_env(database_url=url, bootstrap=b.bootstrap, topic_prefix=topics.prefix),
           **b.service_env}
    ctx = multiprocessing.get_context("spawn")  # no fork of a process holding Kafka clients
    start, done, release = (ctx.Barrier(producers + 1) for _ in range(3))
    outs = [b.log_dir / f"producer-{per_txn}-{i}.txt" for i in range(producers)]
    relay = ServiceProcess("relay", env, b.log_dir / f"relay-small-{per_txn}.log").start()
    procs = []
    try:
        relay.wait_healthy(60)
        assert relay.proc is not None
        procs = [ctx.Process(target=_producer, args=(
                     url, per_txn, seconds, rate_per_s / producers if rate_per_s else None,
                     payload_bytes, i, str(out), start, done, release), daemon=True)
                 for i, out in enumerate(outs)]
        for proc in procs:
            proc.start()
        prof = Profiler(b.profile_dir, f"relay-small-{per_txn}", relay.proc.pid)
        own = {relay.proc.pid: "relay"} | {proc.pid: "producers" for proc in procs if proc.pid}
        stack = stack_pids()
        backlog: list[tuple[float, int]] = []
        with psycopg.connect(url, autocommit=True) as conn:
            start.wait(60)
            t0 = time.time()
            cpu0, machine0 = cpu_by_role(own, stack), machine_cpu()

            def pending() -> int:
                row = conn.execute("SELECT count(*) FROM outbox"
                                   " WHERE published_at IS NULL AND quarantined_at IS NULL"
                                   ).fetchone()
                return int(row[0]) if row else 0

            while time.time() < t0 + seconds:
                time.sleep(0.5)
                backlog.append((round(time.time() - t0, 1), pending()))
            done.wait(60)
            cpu, busy = cpu_delta(cpu0, cpu_by_role(own, stack)), busy_fraction(
                machine0, machine_cpu())
            release.wait(60)
            for proc in procs:
                proc.join(60)
            wait_for(lambda: pending() == 0, 600, "small-transaction rows published", 0.05)
        prof.stop()
    finally:
        for proc in procs:
            if proc.is_alive():
                proc.kill()
        relay.terminate()
    committed: dict[str, float] = {}
    producer_cpu = 0.0
    for out in outs:
        for line in out.read_text().splitlines():
            key, value = line.split()
            if key == "cpu":
                producer_cpu += float(value)
            else:
                committed[key] = float(value)
    n = len(committed)
    appended, sizes, other_stamps = _read_topic(b.bootstrap, topics.events, n)
    delete_topics(b.bootstrap, [s.name for s in specs])
    drop_database(b, name)
    missing = [e for e in committed if e not in appended]
    if missing or other_stamps:
        raise AssertionError(f"{len(missing)} committed events not in the topic,"
                             f" {other_stamps} records not stamped by the broker")
    t_end = max(committed.values())  # the last commit: the producing window is t0..t_end
    window = t_end - t0
    acked_in_window = sum(1 for t in appended.values() if t <= t_end)
    producer_rate = n / window
    lat = [appended[e] - t for e, t in committed.items()]
    last_quarter = [appended[e] - t for e, t in committed.items() if t >= t0 + 0.75 * window]
    left = n - acked_in_window
    return {
        "events_per_transaction": per_txn, "producers": producers,
        "offered_events_per_s": rate_per_s, "seconds": round(window, 2),
        "events": n, "transactions": n // per_txn,
        "producer_events_per_s": round(producer_rate),
        "producer_transactions_per_s": round(producer_rate / per_txn),
        # Acknowledged by Kafka (broker append time) inside the producing window.
        "relay_events_per_s": round(acked_in_window / window),
        "backlog_at_end": left,
        "drain_s": round(max(appended.values()) - t_end, 3),
        # Kept up: less than one second of the producers' commits still unacknowledged
        # when they stop.
        "kept_up": left < producer_rate,
        "commit_to_ack": _percentiles(lat),
        "commit_to_ack_last_quarter": _percentiles(last_quarter),
        "backlog_samples": backlog,
        "max_backlog": max((v for _, v in backlog), default=0),
        "record_bytes_mean": round(statistics.fmean(sizes), 1) if sizes else None,
        "cpu_ms_per_event": {k: round(1000 * v / n, 4) for k, v in sorted(cpu.items())},
        "producer_cpu_ms_per_event": round(1000 * producer_cpu / n, 4),
        "machine_busy": round(busy, 3),
    }


# -- the yardstick: Kafka's own producer against the same broker ----------------------

# The relay's producer settings (hookstream.io.kafka.producer_config) in the Java client's
# names; batch.size is librdkafka's default (the Java client's is 16 KB).
YARDSTICK_PROPS = ("acks=all", "enable.idempotence=true", "linger.ms=5",
                   "compression.type=lz4", "batch.size=1000000")


def relay_record_bytes(payload_bytes: int) -> int:
    """The size of the relay's record for the producers' payload (what the yardstick
    sends; the runs report the mean size they actually saw)."""
    return len(encode_envelope(str(uuid.uuid4()), "tenant-42", "invoice.paid", 1, "inv_1_12345",
                               1, None, time.time_ns() // 1000, time.time_ns() // 1000,
                               orjson.dumps(_payload(12345, payload_bytes))))


def kafka_yardstick(bootstrap: str, records: int, record_bytes: int) -> dict[str, Any]:
    from hookstream.dev.localstack import kafka

    topic = f"yardstick-{uuid.uuid4().hex[:6]}"
    ensure_topics(bootstrap, [TopicSpec(topic, PARTITIONS, {})])
    try:
        res = kafka.run_tool(kafka.PRODUCER_PERFORMANCE, [
            "--topic", topic, "--num-records", str(records), "--record-size", str(record_bytes),
            "--throughput", "-1", "--producer-props", f"bootstrap.servers={bootstrap}",
            *YARDSTICK_PROPS], timeout=300)
    finally:
        delete_topics(bootstrap, [topic])
    last = [ln for ln in res.stdout.splitlines() if "records sent" in ln]
    m = re.search(r"([\d.]+) records/sec .*?([\d.]+) ms avg latency.*?([\d.]+) ms max latency"
                  r"(?:.*?(\d+) ms 50th.*?(\d+) ms 95th.*?(\d+) ms 99th)?",
                  last[-1]) if last else None
    if not m:
        raise RuntimeError(f"ProducerPerformance: {res.stdout[-500:]}{res.stderr[-1000:]}")
    return {"records_per_s": round(float(m.group(1))), "avg_latency_ms": float(m.group(2)),
            "p50_ms": int(m.group(4)) if m.group(4) else None,
            "p99_ms": int(m.group(6)) if m.group(6) else None,
            "records": records, "record_bytes": record_bytes, "line": last[-1]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--events", type=int, default=100_000)
    p.add_argument("--endpoints-per-event", type=int, nargs="*", default=[1, 4])
    p.add_argument("--payload-bytes", type=int, default=200)
    p.add_argument("--large", type=int, default=0,
                   help="also fan one event out to a tenant with this many endpoints")
    p.add_argument("--hot-tenant", type=int, nargs="*", default=[],
                   help="fanout replicas: one run each with every event of one tenant")
    p.add_argument("--small-batch", type=int, nargs="*", default=[1, 50],
                   help="events per producer transaction, one relay run each (none: skip)")
    p.add_argument("--producers", type=int, default=4, help="producer connections (processes)")
    p.add_argument("--small-seconds", type=float, default=20.0,
                   help="how long the producers write in each small-transaction run")
    p.add_argument("--producer-rate", type=float, default=None,
                   help="pace the producers at this many events/s in total (default: flat out)")
    p.add_argument("--yardstick-records", type=int, default=500_000,
                   help="records per ProducerPerformance run, after the best case and at the end"
                        " (0: skip)")
    p.add_argument("--profile", type=Path, default=None, help="py-spy output folder")
    p.add_argument("--json", type=Path, default=RESULTS / "relay-fanout.json",
                   help="where to write every figure")
    p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                   help="extra HOOKSTREAM_<NAME> for the services, e.g. RELAY_BATCH_SIZE=2000")
    args = p.parse_args(argv)
    from hookstream.dev import localstack

    stack = localstack.env()  # the local stack's recorded addresses, unless named here
    b = Bench(
        admin_url=os.environ.get("HOOKSTREAM_DATABASE_URL") or stack["HOOKSTREAM_DATABASE_URL"],
        bootstrap=os.environ.get("HOOKSTREAM_KAFKA_BOOTSTRAP")
        or stack["HOOKSTREAM_KAFKA_BOOTSTRAP"],
        log_dir=Path(os.environ.get("TMPDIR", "/tmp")) / f"hs-bench-{os.getpid()}",
        profile_dir=args.profile,
        service_env={"HOOKSTREAM_LOG_LEVEL": "WARNING"} | {
            f"HOOKSTREAM_{kv.split('=', 1)[0].upper()}": kv.split("=", 1)[1] for kv in args.set},
    )
    b.log_dir.mkdir(parents=True, exist_ok=True)
    print(f"stack: {b.admin_url} {b.bootstrap}; {os.cpu_count()} CPUs; logs in {b.log_dir}")
    out: dict[str, Any] = {"args": {k: str(v) if isinstance(v, Path) else v
                                    for k, v in vars(args).items()}}
    record_bytes = relay_record_bytes(args.payload_bytes)
    yardsticks: list[dict[str, Any]] = []

    def yardstick(when: str) -> None:
        if args.yardstick_records:
            y = kafka_yardstick(b.bootstrap, args.yardstick_records, record_bytes)
            yardsticks.append({"when": when, **y})
            # Its ~150 MB of log are dirty pages the kernel would write back during the
            # next measurement, under PostgreSQL's fsyncs: written now, off the clock.
            os.sync()
            time.sleep(2)
            print(f"yardstick ({when}): Kafka ProducerPerformance, {args.yardstick_records:,}"
                  f" x {record_bytes} B, {' '.join(YARDSTICK_PROPS)}:"
                  f" {y['records_per_s']:,} records/s", flush=True)

    # The yardstick goes after the best case, never right before it: a best case measured
    # right after ProducerPerformance (its log synced or not) came out ~10 % slower
    # (medians of 12 values, alternated with runs that had no yardstick before them;
    # cause not isolated: the broker's GC or its delayed deletion of the topic may be it).
    print(f"{'events':>8} {'ep/event':>8} {'relay s':>8} {'events/s':>10} "
          f"{'fanout s':>9} {'deliveries/s':>13}   (relay: best case, one transaction)")
    out["best_case"] = []
    for k in args.endpoints_per_event:
        r = one_round(b, args.events, k, args.payload_bytes)
        out["best_case"].append(r)
        print(f"{args.events:>8} {k:>8} {r['relay_s']:>8.2f} {r['relay_rate']:>10,.0f} "
              f"{r['fanout_s']:>9.2f} {r['fanout_rate']:>13,.0f}", flush=True)
    if args.large:
        big = large_round(b, args.large)
        out["large"] = {"endpoints": args.large, **big}
        print(f"one event → {args.large:,} endpoints: {big['fanout_s']:.2f} s, "
              f"{big['fanout_rate']:,.0f} deliveries/s")
    out["hot_tenant"] = []
    for replicas in args.hot_tenant:
        r = hot_tenant_round(b, args.events, replicas, args.payload_bytes)
        out["hot_tenant"].append(r)
        print(f"one tenant, {args.events:,} events, {replicas} fanout replica(s): events per"
              f" partition {r['events_per_partition']}; rows per fanout replica"
              f" {r['rows_per_replica']}; fanout {r['fanout_s']:.2f} s,"
              f" {r['fanout_rate']:,.0f} deliveries/s", flush=True)
    yardstick("between")
    out["small_transactions"] = []
    for per_txn in args.small_batch:
        r = run_small(b, per_txn, args.producers, args.small_seconds, args.producer_rate,
                      args.payload_bytes)
        out["small_transactions"].append(r)
        lat: dict[str, float] = r["commit_to_ack"]
        print(f"small transactions, {per_txn} event(s) each, {args.producers} producers,"
              f" {r['seconds']:.0f} s: producers committed {r['producer_events_per_s']:,}"
              f" events/s ({r['producer_transactions_per_s']:,} tx/s); relay acknowledged"
              f" {r['relay_events_per_s']:,} events/s in the window,"
              f" {'kept up' if r['kept_up'] else 'DID NOT KEEP UP'}"
              f" ({r['backlog_at_end']:,} left at the end, drained {r['drain_s']} s later);"
              f" commit→ack p50 {lat['p50_ms']} / p95 {lat['p95_ms']} / p99 {lat['p99_ms']}"
              f" / max {lat['max_ms']} ms; machine {r['machine_busy']:.0%} busy", flush=True)
    yardstick("after")
    out["yardstick"] = yardsticks
    if yardsticks:
        best = max(y["records_per_s"] for y in yardsticks)
        out["yardstick_records_per_s"] = best
        ratios = {f"best case, {r['endpoints_per_event']} ep/event run":
                  round(r["relay_rate"] / best, 3) for r in out["best_case"]}
        ratios |= {f"{r['events_per_transaction']} event(s) per transaction":
                   round(r["relay_events_per_s"] / best, 3) for r in out["small_transactions"]}
        out["relay_vs_yardstick"] = ratios
        print(f"relay / yardstick ({best:,} records/s, the faster run): " + ", ".join(
            f"{k} {v:.1%}" for k, v in ratios.items()))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
