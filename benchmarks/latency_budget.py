"""Where a first attempt's milliseconds go, hop by hop, and the floors to compare with.

The budget of one healthy delivery (issue #15), every timestamp from the same host clock:

    commit (outbox.created_at) → published (outbox.published_at, after the broker's ack)
    → stored (events.stored_at, the fanout's statement) → deliveries created
    (deliveries.created_at: the same statement, so the same instant, for the common
    batch; the second statement on the fanout's general path) → [task produced, consumed]
    → claim sent → claimed → request started (attempts.started_at) → arrival at the
    receiver (the farm's first sight of the webhook-id) → response (attempts.finished_at)

The database and the farm give per-delivery times; the dispatcher's own share (read from
Kafka → claim sent, the claim's round trip, claim returned → attempt started) comes from
its histograms, so it is bucket-resolution (interpolated like ``histogram_quantile``).

Yardsticks, measured in the same run on the same machine: Kafka's own end-to-end latency
tool (``org.apache.kafka.tools.EndToEndLatency``, acks=all: produce → consume of one
record at a time), one PostgreSQL commit round trip, one HTTP POST to the same receiver.
The pipeline's floor is two Kafka hops, two database round trips on the path (the
fanout's write, the claim) and one HTTP request; the report gives the ratio of the
measured p50 to that sum.
"""

from __future__ import annotations

import asyncio
import re
import statistics
import time
import uuid
from typing import Any

import aiohttp
import psycopg
from prometheus_client.parser import text_string_to_metric_families

from hookstream.core.topics import TopicSpec
from hookstream.dev.harness import ServiceProcess
from hookstream.io.kafka import delete_topics, ensure_topics

HOPS = ("commit→published", "published→stored", "stored→deliveries created",
        "deliveries created→request started", "request started→arrival",
        "arrival→response recorded", "commit→arrival")
DISPATCHER_STAGES = {
    "hookstream_dispatcher_read_seconds": "task produced→read",
    "hookstream_dispatcher_queued_seconds": "task read→claim sent",
    "hookstream_dispatcher_claim_seconds": "claim round trip",
    "hookstream_dispatcher_start_seconds": "claim returned→attempt started",
}


def _pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(p / 100 * len(values)))]


def p50_p99_ms(values: list[float]) -> list[float]:
    return [round(1000 * _pct(values, 50), 2), round(1000 * _pct(values, 99), 2)]


def hops(db: str, healthy_ids: list[str], arrivals: dict[str, float]) -> dict[str, Any]:
    """p50 / p99 in ms of each hop, over the healthy deliveries whose first attempt ran."""
    with psycopg.connect(db) as conn:
        rows = conn.execute(
            "SELECT d.delivery_id::text, extract(epoch FROM o.created_at)::float8,"
            " extract(epoch FROM o.published_at)::float8,"
            " extract(epoch FROM e.stored_at)::float8,"
            " extract(epoch FROM d.created_at)::float8,"
            " extract(epoch FROM a.started_at)::float8,"
            " extract(epoch FROM a.finished_at)::float8"
            " FROM deliveries d JOIN events e ON e.event_id = d.event_id"
            " JOIN outbox o ON o.event_id = d.event_id"
            " JOIN attempts a ON a.delivery_id = d.delivery_id AND a.attempt_no = 1"
            " WHERE d.endpoint_id = ANY(%s::uuid[])", (healthy_ids,)).fetchall()
    series: dict[str, list[float]] = {h: [] for h in HOPS}
    missing = 0
    for delivery, commit, published, stored, created, started, finished in rows:
        arrived = arrivals.get(delivery)
        if arrived is None or published is None or finished is None:
            missing += 1
            continue
        for hop, value in zip(HOPS, (published - commit, stored - published, created - stored,
                                     started - created, arrived - started, finished - arrived,
                                     arrived - commit), strict=True):
            series[hop].append(value)
    return {"deliveries": len(rows) - missing, "without_all_timestamps": missing,
            "p50_p99_ms": {h: p50_p99_ms(v) for h, v in series.items()}}


def _histogram_quantile(buckets: list[tuple[float, float]], q: float) -> float:
    """Prometheus's histogram_quantile over cumulative (upper bound, count) pairs."""
    total = buckets[-1][1]
    if total == 0:
        return float("nan")
    rank, lower, below = q * total, 0.0, 0.0
    for upper, count in buckets:
        if count >= rank:
            if upper == float("inf"):
                return lower
            return lower + (upper - lower) * (rank - below) / max(count - below, 1e-12)
        lower, below = upper, count
    return lower


# The batch durations of the relay and the fanout: how long one round holds its events.
BATCH_STAGES = {
    "hookstream_relay_batch_seconds": "relay round",
    "hookstream_fanout_batch_seconds": "fanout batch",
}


def dispatcher_stages(dispatcher: ServiceProcess,
                      stages: dict[str, str] = DISPATCHER_STAGES) -> dict[str, list[float]]:
    """p50 / p99 in ms of a service's stages (by default the dispatcher's), from its
    histograms."""
    code, body = dispatcher.get("/metrics")
    if code != 200:
        return {}
    out: dict[str, list[float]] = {}
    for family in text_string_to_metric_families(body.decode()):
        if family.name not in stages:
            continue
        buckets = sorted((float(s.labels["le"]), s.value) for s in family.samples
                         if s.name.endswith("_bucket"))
        if buckets:
            out[stages[family.name]] = [
                round(1000 * _histogram_quantile(buckets, q), 2) for q in (0.5, 0.99)]
    return out


# -- yardsticks -----------------------------------------------------------------------------

def kafka_end_to_end(bootstrap: str, n: int = 2000) -> dict[str, Any]:
    """Kafka's own tool: produce one record (acks=all), consume it, n times in a row."""
    from hookstream.dev.localstack import kafka

    topic = f"yard-e2e-{uuid.uuid4().hex[:6]}"
    ensure_topics(bootstrap, [TopicSpec(topic, 1, {})])
    try:
        res = kafka.run_tool("org.apache.kafka.tools.EndToEndLatency",
                             [bootstrap, topic, str(n), "all", "300"], timeout=180)
    finally:
        delete_topics(bootstrap, [topic])
    text = res.stdout + res.stderr
    avg = re.search(r"Avg latency: ([\d.]+) ms", text)
    pct = re.search(r"Percentiles: 50th = ([\d.]+), 99th = ([\d.]+), 99.9th = ([\d.]+)", text)
    if not (avg and pct):
        return {"error": text[-800:]}
    return {"avg_ms": float(avg.group(1)), "p50_ms": float(pct.group(1)),
            "p99_ms": float(pct.group(2))}


def postgres_commit(db: str, n: int = 1000) -> dict[str, float]:
    """One autocommitted single-row INSERT (a commit, WAL flushed), n times in a row."""
    times: list[float] = []
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("CREATE TEMP TABLE yard_commit (id uuid, at timestamptz)")
        for _ in range(n):
            t = time.perf_counter()
            conn.execute("INSERT INTO yard_commit VALUES (gen_random_uuid(), now())")
            times.append(time.perf_counter() - t)
    # A temporary table is not WAL-logged: measure the commit on a real one as well.
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS yard_commit_logged (id uuid, at timestamptz)")
        logged: list[float] = []
        try:
            for _ in range(n):
                t = time.perf_counter()
                conn.execute("INSERT INTO yard_commit_logged VALUES (gen_random_uuid(), now())")
                logged.append(time.perf_counter() - t)
        finally:
            conn.execute("DROP TABLE yard_commit_logged")
    return {"p50_ms": round(1000 * statistics.median(logged), 3),
            "p99_ms": round(1000 * _pct(logged, 99), 3),
            "unlogged_p50_ms": round(1000 * statistics.median(times), 3)}


async def _http_rtt(url: str, n: int) -> list[float]:
    times = []
    async with aiohttp.ClientSession() as session:
        for _ in range(n):
            t = time.perf_counter()
            async with session.post(url, data=b"{}") as resp:
                await resp.read()
            times.append(time.perf_counter() - t)
    return times


def http_round_trip(port: int, n: int = 1000) -> dict[str, float]:
    """One POST at a time to the receiver farm (its non-endpoint path: no verification)."""
    times = asyncio.run(_http_rtt(f"http://127.0.0.1:{port}/hooks/yardstick", n))
    return {"p50_ms": round(1000 * statistics.median(times), 3),
            "p99_ms": round(1000 * _pct(times, 99), 3)}


def floor_ms(yardsticks: dict[str, Any]) -> float | None:
    """Two Kafka hops + two database round trips + one HTTP request, at their p50.

    EndToEndLatency prints its percentiles in whole milliseconds (a loopback hop reads
    "50th = 0"): its mean, printed to the microsecond, stands in for the Kafka hop."""
    try:
        kafka = yardsticks["kafka_end_to_end"]
        return round(2 * (kafka["p50_ms"] or kafka["avg_ms"])
                     + 2 * yardsticks["postgres_commit"]["p50_ms"]
                     + yardsticks["http_round_trip"]["p50_ms"], 2)
    except (KeyError, TypeError):
        return None


# -- batching: what a delivery costs in round trips -----------------------------------------

# (service, histogram or counter family) whose sample count is one batch of that stage.
BATCH_COUNTS = {
    "relay rounds": ("relay", "hookstream_relay_batch_seconds"),
    "fanout batches": ("fanout", "hookstream_fanout_batch_seconds"),
    "dispatcher claims": ("dispatcher", "hookstream_dispatcher_claim_seconds"),
}


def _family_count(body: bytes, family_name: str) -> float:
    for family in text_string_to_metric_families(body.decode()):
        if family.name == family_name:
            return sum(s.value for s in family.samples if s.name.endswith("_count"))
    return 0.0


def _deferrals(body: bytes) -> dict[str, float]:
    for family in text_string_to_metric_families(body.decode()):
        if family.name == "hookstream_dispatcher_deferred":
            return {f"dispatcher deferred ({s.labels['reason']})": s.value
                    for s in family.samples if s.name.endswith("_total")}
    return {}


def batch_counts(services: dict[str, ServiceProcess]) -> dict[str, float]:
    """How many batches each stage has run so far (its histogram's count), and how many
    tasks the dispatcher deferred, by reason: a saturated dispatcher that parks pays a
    write now and a hand-back later for each parked delivery."""
    out: dict[str, float] = {}
    bodies: dict[str, bytes] = {}
    for stage, (service, family) in BATCH_COUNTS.items():
        process = services.get(service)
        if process is None:
            continue
        code, body = process.get("/metrics")
        if code == 200:
            out[stage] = _family_count(body, family)
            bodies[service] = body
    if "dispatcher" in bodies:
        out.update(_deferrals(bodies["dispatcher"]))
    return out


def database_commits(db: str) -> int:
    """Transactions committed in the run's database so far (every service's)."""
    with psycopg.connect(db, autocommit=True) as conn:
        row = conn.execute("SELECT xact_commit FROM pg_stat_database"
                           " WHERE datname = current_database()").fetchone()
    return int(row[0]) if row else 0


def batching(before: dict[str, float], after: dict[str, float], commits: int,
             deliveries: int, events: int) -> dict[str, float]:
    """Per stage: batches run during the run, and events or deliveries per batch; the
    database's commits per delivery. Small batches cost round trips and commits (CPU the
    saturated dispatcher lacks); large ones cost waiting: this shows which one a run paid."""
    out: dict[str, float] = {"pg_commits_per_delivery": round(commits / max(deliveries, 1), 3)}
    for stage in after:
        n = after[stage] - before.get(stage, 0.0)
        out[f"{stage}"] = n
        if stage.startswith("dispatcher deferred"):
            continue
        unit = deliveries if stage == "dispatcher claims" else events
        out[f"{stage}: per batch"] = round(unit / n, 1) if n else 0.0
    return out
