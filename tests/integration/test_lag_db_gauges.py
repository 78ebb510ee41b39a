"""The PostgreSQL-derived delivery gauges on a real database: values, and the bounded
cardinality of the per-endpoint series."""

from __future__ import annotations

import uuid

import psycopg
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from hookstream.ops.db_metrics import DeliveryStatsSource, delivery_stats_collector

ACTIVE = 15  # more than the top N (10): only the worst 10 may get a label


def _endpoint(conn: psycopg.Connection, status: str = "active", *,
              paused_for_s: float | None = None, failing_for_s: float | None = None) -> str:
    row = conn.execute(
        "INSERT INTO endpoints (tenant, url, status, consecutive_failures, first_failure_at,"
        " paused_until) VALUES ('acme', 'https://example.com/hook', %s, %s,"
        " now() - make_interval(secs => %s), now() + make_interval(secs => %s)) RETURNING id",
        (status, 5 if failing_for_s else 0, failing_for_s, paused_for_s)).fetchone()
    assert row
    return str(row[0])


def _delivery(conn: psycopg.Connection, endpoint: str, *, age_s: float,
              status: str = "pending", attempts: int = 0) -> str:
    event = uuid.uuid4()
    conn.execute(
        "INSERT INTO events (event_id, tenant, type, schema_version, occurred_at, committed_at,"
        " payload, payload_sha256) VALUES (%s, 'acme', 'invoice.paid', 1, now(), now(),"
        " '\\x7b7d', '\\x00')", (event,))
    row = conn.execute(
        "INSERT INTO deliveries (event_id, endpoint_id, tenant, endpoint_config_version, status,"
        " attempts, created_at, next_attempt_at, expires_at, committed_at)"
        " SELECT event_id, %s, 'acme', 1, %s, %s,"
        " now() - make_interval(secs => %s), now() - make_interval(secs => %s),"
        " now() + interval '1 day', committed_at FROM events WHERE event_id = %s"
        " RETURNING delivery_id",
        (endpoint, status, attempts, age_s, age_s, event)).fetchone()
    assert row
    return str(row[0])


def _attempt(conn: psycopg.Connection, delivery: str, no: int, *, ago_s: float = 5,
             manual: bool = False) -> None:
    conn.execute(
        "INSERT INTO attempts (delivery_id, attempt_no, started_at, finished_at, outcome, manual,"
        " committed_at) SELECT delivery_id, %s, now() - make_interval(secs => %s), now(),"
        " 'retry', %s, committed_at FROM deliveries WHERE delivery_id = %s",
        (no, ago_s, manual, delivery))


def test_delivery_gauges_from_the_database(db_url: str) -> None:
    with psycopg.connect(db_url) as conn:
        # active endpoints with a pending delivery each, 45 s … 465 s old; odd ones are retries
        ages = {}
        for i in range(1, ACTIVE + 1):
            ep = _endpoint(conn)
            ages[ep] = 30.0 * i + 15
            _delivery(conn, ep, age_s=ages[ep], attempts=i % 2)
        # older than all of them but held by the customer: paused, or circuit open
        paused = _endpoint(conn, "paused")
        _delivery(conn, paused, age_s=86_400)
        tripped = _endpoint(conn, paused_for_s=600, failing_for_s=7_200)
        _delivery(conn, tripped, age_s=50_000, attempts=5)
        disabled = _endpoint(conn, "disabled")
        for _ in range(3):
            _delivery(conn, disabled, age_s=100, status="dead", attempts=15)
        # attempts in the window: 3 + 1 automatic for two deliveries, 1 replay
        done = _endpoint(conn)
        a = _delivery(conn, done, age_s=60, status="delivered", attempts=3)
        b = _delivery(conn, done, age_s=60, status="delivered", attempts=1)
        for no in (1, 2, 3):
            _attempt(conn, a, no)
        _attempt(conn, b, 1)
        _attempt(conn, b, 2, manual=True)
        _attempt(conn, b, 3, ago_s=7_200)  # outside the 15-minute window

    source = DeliveryStatsSource(db_url, top_n=10, window_s=900)
    try:
        stats = source.sample()
    finally:
        source.close()

    worst = {w.endpoint: w for w in stats.worst}
    oldest_ten = sorted(ages, key=lambda ep: -ages[ep])[:10]
    # the 10 oldest active ones, and (in a pool of their own, so they never crowd the
    # live ones out) the held ones
    assert {ep for ep, w in worst.items() if not w.held} == set(oldest_ten)
    assert {ep for ep, w in worst.items() if w.held} == {paused, tripped}
    for ep in oldest_ten:
        w = worst[ep]
        assert abs(w.oldest_age_s - ages[ep]) < 5 and w.pending == 1 and w.tenant == "acme"
    assert abs(worst[paused].oldest_age_s - 86_400) < 5
    assert stats.pending["new"].rows == 7 and stats.pending["retry"].rows == 8
    assert abs(stats.pending["new"].oldest_age_s - 435) < 5  # i = 14
    assert abs(stats.pending["retry"].oldest_age_s - 465) < 5  # i = 15
    assert stats.pending["held"].rows == 2
    assert abs(stats.pending["held"].oldest_age_s - 86_400) < 5
    # 15 endpoints behind by > 10 s, 14 by > 60 s (75 s … 465 s), none by > 600 s
    assert stats.endpoints_overdue == {10.0: 15, 60.0: 14, 600.0: 0, 3600.0: 0}
    assert stats.dead == 3
    assert stats.dead_in_window == 3  # updated_at now(): they went dead within the window
    assert stats.endpoints_by_status == {"active": ACTIVE + 2, "paused": 1, "disabled": 1}
    assert stats.circuits_open == 1
    assert abs(stats.circuit_longest_open_s - 7_200) < 5
    assert (stats.automatic_attempts, stats.manual_attempts, stats.attempted_deliveries) == \
        (4, 1, 2)
    assert stats.retry_amplification == 2.0


def test_endpoint_series_stay_bounded_by_top_n(db_url: str) -> None:
    with psycopg.connect(db_url) as conn:
        for i in range(40):
            _delivery(conn, _endpoint(conn), age_s=10.0 + i)
    collector = delivery_stats_collector(db_url, interval_s=5, top_n=4, window_s=900)
    try:
        assert collector.sampler.run_once()
        registry = CollectorRegistry()
        registry.register(collector)
        text = generate_latest(registry).decode()
    finally:
        collector.sampler.stop()
    labelled = [s for f in text_string_to_metric_families(text) for s in f.samples
                if "endpoint" in s.labels]
    by_name: dict[str, int] = {}
    for s in labelled:
        by_name[s.name] = by_name.get(s.name, 0) + 1
    assert by_name == {"hookstream_endpoint_oldest_pending_age_seconds": 4,
                       "hookstream_endpoint_pending": 4, "hookstream_endpoint_held": 4}
    ages = sorted(s.value for s in labelled
                  if s.name == "hookstream_endpoint_oldest_pending_age_seconds")
    assert ages[0] > 45  # the four oldest of 10 … 49 s


def test_an_endpoint_that_recovers_keeps_its_series_at_zero(db_url: str) -> None:
    # A gap would read as "no data"; 0 is the truth (nothing waiting) and keeps
    # dashboards and per-endpoint alerts continuous.
    with psycopg.connect(db_url) as conn:
        slow = _endpoint(conn)
        delivery = _delivery(conn, slow, age_s=300)
        _delivery(conn, _endpoint(conn), age_s=20)
    source = DeliveryStatsSource(db_url, top_n=10, window_s=900)
    try:
        first = {w.endpoint: w for w in source.sample().worst}
        assert first[slow].pending == 1 and first[slow].oldest_age_s >= 300
        with psycopg.connect(db_url) as conn:
            conn.execute("UPDATE deliveries SET status = 'delivered' WHERE delivery_id = %s",
                         (delivery,))
        again = {w.endpoint: w for w in source.sample().worst}
    finally:
        source.close()
    assert slow in again
    assert (again[slow].pending, again[slow].oldest_age_s) == (0, 0.0)


def test_the_attempts_window_is_read_once_per_slice_and_never_counted_twice(
        db_url: str) -> None:
    with psycopg.connect(db_url) as conn:
        done = _endpoint(conn)
        a = _delivery(conn, done, age_s=60, status="delivered", attempts=2)
        _attempt(conn, a, 1, ago_s=30)
        _attempt(conn, a, 2, ago_s=20)
        _attempt(conn, a, 3, ago_s=1_000)  # before the 900-s window
    # settle 0: a slice ends at the database's now(), so the rows below, written after
    # a sample, are past its end whatever the two clocks say
    source = DeliveryStatsSource(db_url, top_n=10, window_s=900, settle_s=0)
    try:
        first = source.sample()
        assert (first.automatic_attempts, first.attempted_deliveries) == (2, 1)
        again = source.sample()  # nothing new: the same totals, not twice them
        assert (again.automatic_attempts, again.attempted_deliveries) == (2, 1)
        with psycopg.connect(db_url) as conn:
            b = _delivery(conn, done, age_s=5, status="delivered", attempts=1)
            _attempt(conn, b, 1, ago_s=0)
            _attempt(conn, b, 2, ago_s=0, manual=True)
        later = source.sample()
        assert (later.automatic_attempts, later.manual_attempts,
                later.attempted_deliveries) == (3, 1, 2)
        assert later.retry_amplification == 1.5
    finally:
        source.close()
