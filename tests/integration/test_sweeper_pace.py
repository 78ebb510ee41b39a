"""The sweeper hands a parked backlog back at the pace its slots come due, not at
SWEEP_BATCH per SWEEP_INTERVAL_S: in every saturated end-to-end run the last thousands
of healthy deliveries (parked while the dispatcher was behind) came back at exactly
1,000 per 5 s, long after their slots. Real PostgreSQL, real broker."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from hookstream.dispatcher.lost_work import LostWork
from hookstream.dispatcher.metrics import DispatcherMetrics
from hookstream.dispatcher.store import Store
from prometheus_client import CollectorRegistry

from hookstream.core.settings import DispatcherSettings
from hookstream.core.topics import TopicSpec
from hookstream.dev.devkeys import development_keyring
from hookstream.endpoints import create_endpoint
from hookstream.io.kafka import (
    Failed,
    Publisher,
    Record,
    delete_topics,
    ensure_topics,
    publish_until_acked,
)
from tests.conftest import Stack
from tests.helpers import scalar

pytestmark = pytest.mark.integration
PER_ENDPOINT = 400


@pytest.fixture
def topic(stack: Stack) -> Iterator[str]:
    name = f"sweep-{uuid.uuid4().hex[:8]}"
    ensure_topics(stack.bootstrap, [TopicSpec(name, 3, {})])
    yield name
    delete_topics(stack.bootstrap, [name])


def _park_due(db_url: str, endpoints: list[uuid.UUID]) -> None:
    """PER_ENDPOINT parked deliveries per endpoint, every slot already come."""
    with psycopg.connect(db_url) as conn:
        for endpoint in endpoints:
            conn.execute(
                "WITH ev AS (INSERT INTO events (event_id, tenant, type, schema_version,"
                " occurred_at, committed_at, payload, payload_sha256)"
                " SELECT gen_random_uuid(), 'acme', 'x.y', 1, now(), now(), '\\x7b7d', '\\x00'"
                " FROM generate_series(1, %s) RETURNING event_id)"
                " INSERT INTO deliveries (event_id, endpoint_id, tenant, endpoint_config_version,"
                " created_at, next_attempt_at, expires_at, parked)"
                " SELECT event_id, %s, 'acme', 1, now(), now() - interval '1 second',"
                " now() + interval '1 day', true FROM ev", (PER_ENDPOINT, endpoint))


async def test_a_due_parked_backlog_comes_back_at_once_not_a_batch_per_interval(
        db_url: str, stack: Stack, topic: str) -> None:
    with psycopg.connect(db_url) as conn:
        endpoints = [create_endpoint(conn, tenant="acme", url=f"https://e{i}.example/h").endpoint_id
                     for i in range(2)]
    _park_due(db_url, endpoints)
    # 100 per sweep, 10 per endpoint, a sweep a second: the old pace was 20 rows/s, so
    # these 800 rows would have taken 40 s.
    settings = DispatcherSettings(database_url=db_url, kafka_bootstrap=stack.bootstrap,
                                  sweep_interval_s=1.0, sweep_batch=100)
    store = Store(db_url, lease_s=30, keyring=development_keyring())
    await store.open()
    publisher = Publisher(stack.bootstrap, "test-sweeper")
    failures: list[Failed] = []

    async def publish(records: list[Record]) -> bool:
        return await publish_until_acked(publisher, records, on_failure=failures.extend)

    lost_work = LostWork(store=store, settings=settings, topic=topic,
                         metrics=DispatcherMetrics(CollectorRegistry()), publish=publish,
                         fail=lambda what, exc: pytest.fail(f"{what}: {exc}"),
                         writer_stuck_for=lambda now: 0.0)
    sweeper = asyncio.create_task(lost_work.sweep_forever())
    started = time.monotonic()
    try:
        parked = "SELECT count(*) FROM deliveries WHERE parked"
        while scalar(db_url, parked) and time.monotonic() - started < 60:
            await asyncio.sleep(0.1)
        took = time.monotonic() - started
        assert scalar(db_url, parked) == 0
        # One interval's sleep, then sweeps back to back (each a database statement and
        # an acknowledged produce): seconds, where a batch per interval took 40.
        assert took < 8.0, f"800 due parked deliveries took {took:.1f}s to come back"
        assert failures == []
    finally:
        sweeper.cancel()
        await asyncio.gather(sweeper, return_exceptions=True)
        publisher.close()
        await store.close()
