"""Shared set-up for the benchmark scripts: a fresh database and topic prefix on the local
stack, process sampling (CPU seconds, peak RSS) from /proc, bulk-loaded deliveries."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
from confluent_kafka import Producer

from hookstream.core.codec import DeliveryTask, TaskKind
from hookstream.core.topics import Topics
from hookstream.dev import localstack
from hookstream.dev.harness import free_port
from hookstream.io.kafka import delete_topics, ensure_topics
from hookstream.ops.migrate import migrate

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench-results"


def fresh_env(name: str, partitions: int = 6) -> tuple[str, str, Topics]:
    """(database url, bootstrap, topics) on the local stack, all new."""
    localstack.up()
    env = localstack.env()
    admin = env["HOOKSTREAM_DATABASE_URL"]
    db = f"hs_bench_{name}"
    url = admin.rsplit("/", 1)[0] + "/" + db
    drop_database(url)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {db}")
    migrate(url)
    topics = Topics(f"bench-{name}-{uuid.uuid4().hex[:6]}")
    ensure_topics(env["HOOKSTREAM_KAFKA_BOOTSTRAP"], topics.specs(partitions))
    return url, env["HOOKSTREAM_KAFKA_BOOTSTRAP"], topics


def drop_database(db_url: str) -> None:
    """A finished run's database goes at once: left behind, its dead rows bring an
    autovacuum worker into the middle of the next run's measurement."""
    admin, name = db_url.rsplit("/", 1)
    with psycopg.connect(f"{admin}/postgres", autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def drop_topics(bootstrap: str, topics: Topics) -> None:
    delete_topics(bootstrap, [s.name for s in topics.specs()])


def cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system) a live process has used; OSError once it is gone."""
    return _stat(pid)[1]


def proc_stats(pid: int) -> tuple[float, int]:
    """(CPU seconds user+system, peak RSS bytes) of a live process."""
    cpu = cpu_seconds(pid)
    peak = 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                peak = int(line.split()[1]) * 1024
    return cpu, peak


_PG_BACKGROUND = tuple(f"postgres: {name}" for name in (
    "checkpointer", "background writer", "walwriter", "autovacuum", "logical replication",
    "archiver"))


def stack_pids() -> dict[str, int]:
    """Pids of the local stack the environment points at: its PostgreSQL's postmaster
    and its Kafka broker (absent when not running from this stack folder)."""
    from hookstream.dev.localstack import kafka, postgres

    out = {}
    if pg := postgres.status(check_health=False).get("pid"):
        out["postgres"] = int(pg)
    if broker := kafka.running_pid():
        out["kafka"] = broker
    return out


def _stat(pid: int) -> tuple[int, float]:
    """(parent pid, CPU seconds user+system) of a live process; OSError once it is gone."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()  # the name may hold spaces and ')'
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_by_role(own: dict[int, str] | None = None,
                stack: dict[str, int] | None = None) -> dict[str, float]:
    """CPU seconds so far of every process on the machine, summed by role: two snapshots
    give who spent the cores in between.

    Without ``own`` roles go by command line (dispatcher, receiver, postgres, kafka,
    other), whoever started the process. With ``own`` (pid → role: this run's services
    and receivers) only this run's processes get a role: those pids, the local stack's
    PostgreSQL (its postmaster and every child; background work apart) and Kafka broker,
    and this process (``benchmark``); every other process is ``others`` — other people's
    suites on the shared cores, which must not count as this run's cost. ``stack`` is
    ``stack_pids()``, looked up once per run by the caller (it runs pg_ctl)."""
    if stack is None:
        stack = stack_pids() if own is not None else {}
    out: dict[str, float] = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            ppid, cpu = _stat(int(pid))
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue  # exited meanwhile
        if own is not None:
            role = own.get(int(pid)) or (
                ("postgres_background" if cmd.startswith(_PG_BACKGROUND) else "postgres")
                if stack.get("postgres") in (int(pid), ppid)
                else "kafka" if stack.get("kafka") == int(pid)
                else "benchmark" if int(pid) == os.getpid()
                else "others")
        else:
            role = ("dispatcher" if "hookstream.dispatcher" in cmd
                    else "receiver" if "fast_receiver" in cmd or "receiver_farm" in cmd
                    # PostgreSQL's own background work (checkpoints, autovacuum) apart from
                    # the backends serving the measured statements: it lands in runs by
                    # timing.
                    else "postgres_background" if cmd.startswith(_PG_BACKGROUND)
                    else "postgres" if "postgres" in cmd
                    else "kafka" if "kafka" in cmd
                    else "other")
        out[role] = out.get(role, 0.0) + cpu
    return out


def cpu_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    # A process that exited between the snapshots drops out: its share reads as negative,
    # so clamp (the roles measured here all outlive the window).
    return {k: max(0.0, after.get(k, 0.0) - before.get(k, 0.0)) for k in after}


def machine_cpu() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine since boot, from /proc/stat: two
    snapshots give how busy the cores were in between (iowait and idle count as idle)."""
    with open("/proc/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:]]
    idle = ticks[3] + ticks[4]
    hz = os.sysconf("SC_CLK_TCK")
    return (sum(ticks[:8]) - idle) / hz, sum(ticks[:8]) / hz


def busy_fraction(before: tuple[float, float], after: tuple[float, float]) -> float:
    total = after[1] - before[1]
    return (after[0] - before[0]) / total if total > 0 else 0.0


def rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def start_fast_receiver(*extra: str) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(ROOT / "benchmarks" / "fast_receiver.py"),
                             "--port", str(port), *extra])
    import urllib.request

    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/count", timeout=1).read()
            return proc, port
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("fast receiver did not start")


def load_deliveries(db_url: str, bootstrap: str, topics: Topics, *, endpoints: list[str],
                    tenants: list[str], n: int, payload: bytes = b'{"bench": true}') -> None:
    """n events and n pending deliveries (event i → endpoint i mod len) written in bulk,
    and their tasks produced to the deliveries topic: the dispatcher's input, without the
    relay and fanout in the way."""
    rows = insert_deliveries(db_url, endpoints=endpoints, n=n, payload=payload)
    produce_tasks(bootstrap, topics, encode_tasks(rows))


def insert_deliveries(db_url: str, *, endpoints: list[str], n: int,
                      payload: bytes = b'{"bench": true}') -> list[tuple[Any, ...]]:
    """The rows half of ``load_deliveries``: (delivery, event, endpoint, tenant,
    committed_at) per row (the commit time is the rows' partition key: the task carries it)."""
    with psycopg.connect(db_url) as conn:
        conn.execute(
            "INSERT INTO events (event_id, tenant, type, schema_version, occurred_at,"
            " committed_at, payload, payload_sha256)"
            " SELECT gen_random_uuid(), 'bench', 'bench.run', 1, now(), now(), %s, sha256(%s)"
            " FROM generate_series(1, %s)", (payload, payload, n))
        conn.execute(
            "INSERT INTO deliveries (event_id, endpoint_id, tenant, endpoint_config_version,"
            " expires_at, committed_at)"
            " SELECT e.event_id, ep.id, ep.tenant, 1, now() + interval '1 day', e.committed_at"
            " FROM (SELECT event_id, committed_at, row_number() OVER () - 1 AS i FROM events) e"
            " JOIN (SELECT id, tenant, row_number() OVER (ORDER BY id) - 1 AS j FROM endpoints)"
            " ep ON ep.j = e.i %% %s", (len(endpoints),))
        return conn.execute(
            "SELECT delivery_id, event_id, endpoint_id, tenant, committed_at FROM deliveries"
        ).fetchall()


def encode_tasks(rows: list[tuple[Any, ...]]) -> list[tuple[bytes, bytes]]:
    """(key, value) of one NEW task per (delivery, event, endpoint, tenant, committed_at)
    row, due now."""
    from datetime import UTC, datetime

    now = datetime.now(UTC)
    return [(task.key, task.encode()) for task in (
        DeliveryTask(d, ev, ep, tenant, TaskKind.NEW, now, at)
        for d, ev, ep, tenant, at in rows)]


def produce_tasks(bootstrap: str, topics: Topics, messages: list[tuple[bytes, bytes]]) -> None:
    """The tasks half of ``load_deliveries``, already encoded: producing is then cheap
    enough not to weigh on a measurement it overlaps."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20,
                         "queue.buffering.max.messages": 1_000_000})
    for key, value in messages:
        while True:
            try:
                producer.produce(topics.deliveries, key=key, value=value)
                break
            except BufferError:
                producer.poll(0.1)
    producer.flush(120)


def wait_group_stable(bootstrap: str, group: str, members: int, timeout_s: float = 60) -> None:
    """Until the consumer group is Stable with ``members`` members that all hold
    partitions: a measurement then starts after the rebalances of start-up, not in them."""
    from confluent_kafka import ConsumerGroupState
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            desc = admin.describe_consumer_groups([group])[group].result(10)
            if (desc.state == ConsumerGroupState.STABLE and len(desc.members) == members
                    and all(m.assignment.topic_partitions for m in desc.members)):
                return
        except Exception:  # not created yet, coordinator loading: ask again
            pass
        time.sleep(0.2)
    raise TimeoutError(f"consumer group {group} not stable with {members} members")
