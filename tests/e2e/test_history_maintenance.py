"""The relay keeps the history (hookstream.ops.retention) while it runs: days made
ahead, an expired day dropped, a day held by a live delivery kept, each shown on its
/metrics — the service, not a direct call, on the real database."""

from __future__ import annotations

import uuid
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import psycopg

from hookstream.core.topics import Topics
from hookstream.dev.harness import ServiceProcess, pipeline_env
from tests.conftest import Stack
from tests.helpers import scalar, service_metric, stop_cleanly, wait_until

TODAY = datetime.now(UTC).date()


def _day_with_a_delivery(conn: psycopg.Connection, day: date, status: str) -> None:
    conn.execute("SELECT hookstream_history_partitions(%s, %s)", (day, day + timedelta(days=1)))
    endpoint = conn.execute(
        "INSERT INTO endpoints (tenant, url, event_types) VALUES ('acme', %s, '{*}')"
        " RETURNING id", (f"https://x.example/{uuid.uuid4()}",)).fetchone()
    assert endpoint is not None
    at = datetime(day.year, day.month, day.day, 12, tzinfo=UTC)
    event = uuid.uuid4()
    conn.execute(
        "INSERT INTO events (event_id, tenant, type, schema_version, occurred_at, committed_at,"
        " payload, payload_sha256) VALUES (%s, 'acme', 'a.b', 1, %s, %s, '{}', sha256('{}'))",
        (event, at, at))
    conn.execute(
        "INSERT INTO deliveries (event_id, endpoint_id, tenant, endpoint_config_version, status,"
        " expires_at, committed_at) VALUES (%s, %s, 'acme', 1, %s, %s, %s)",
        (event, endpoint[0], status, at + timedelta(days=1), at))


def _exists(db_url: str, table: str) -> bool:
    return bool(scalar(db_url, "SELECT to_regclass(%s) IS NOT NULL", (table,)))


def test_the_relay_drops_expired_days_holds_live_ones_and_makes_days_ahead(
        stack: Stack, db_url: str, topics: Topics, log_dir: Path) -> None:
    finished, live = TODAY - timedelta(days=12), TODAY - timedelta(days=11)
    with psycopg.connect(db_url, autocommit=True) as conn:
        _day_with_a_delivery(conn, finished, "delivered")
        _day_with_a_delivery(conn, live, "pending")
    ahead = TODAY + timedelta(days=5)
    assert not _exists(db_url, f"deliveries_p{ahead:%Y%m%d}")
    env = pipeline_env(database_url=db_url, bootstrap=stack.bootstrap,
                       topic_prefix=topics.prefix, history_days="10", history_days_ahead="5",
                       history_maintain_interval_s="0.5")
    relay = ServiceProcess("relay", env, log_dir / "relay.log").start()
    try:
        relay.wait_healthy()
        # deliveries first, then attempts and events, each in a transaction of its own
        # (ops/retention.py): waited for as a whole, not read between two of them
        wait_until(lambda: not any(_exists(db_url, f"{table}_p{finished:%Y%m%d}")
                                   for table in ("deliveries", "attempts", "events")), 30,
                   message="the finished expired day dropped from every table")
        assert _exists(db_url, f"deliveries_p{live:%Y%m%d}")  # held: its delivery is pending
        assert _exists(db_url, f"deliveries_p{ahead:%Y%m%d}")
        wait_until(lambda: service_metric(relay, "hookstream_history_expired_held") == 1, 30,
                   message="the held day on /metrics")
        assert service_metric(relay, "hookstream_history_expired_dropped_total") >= 1
        assert service_metric(relay,
                              "hookstream_history_last_maintained_timestamp_seconds") > 0
        # the delivery finishes: the next run drops its day
        with psycopg.connect(db_url, autocommit=True) as conn:
            conn.execute("UPDATE deliveries SET status = 'dead' WHERE committed_at < %s",
                         (datetime(live.year, live.month, live.day, tzinfo=UTC)
                          + timedelta(days=1),))
        wait_until(lambda: not _exists(db_url, f"deliveries_p{live:%Y%m%d}"), 30,
                   message="the day dropped once its delivery finished")
        wait_until(lambda: service_metric(relay, "hookstream_history_expired_held") == 0, 30,
                   message="nothing held any more")
    finally:
        stop_cleanly(relay)
