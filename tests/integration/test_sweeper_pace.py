"""The sweeper hands a parked backlog back at the pace its slots come due, not at
SWEEP_BATCH per SWEEP_INTERVAL_S: in every saturated end-to-end run the last thousands
of healthy deliveries (parked while the dispatcher was behind) came back at exactly
1,000 per 5 s, long after their slots. Real PostgreSQL, real broker."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Iterator
from itertools import pairwise

import psycopg
import pytest
from hookstream.dispatcher.lost_work import LostWork
from hookstream.dispatcher.metrics import DispatcherMetrics
from hookstream.dispatcher.store import Store
from prometheus_client import CollectorRegistry

from hookstream.core.settings import DispatcherSettings
from hookstream.core.topics import TopicSpec
from hookstream.dev.localstack.devkeys import development_keyring
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
                " FROM generate_series(1, %s) RETURNING event_id, committed_at)"
                " INSERT INTO deliveries (event_id, endpoint_id, tenant, endpoint_config_version,"
                " created_at, next_attempt_at, expires_at, parked, committed_at)"
                " SELECT event_id, %s, 'acme', 1, now(), now() - interval '1 second',"
                " now() + interval '1 day', true, committed_at FROM ev",
                (PER_ENDPOINT, endpoint))


class Sweeper:
    """LostWork's sweeper on the real database and broker, 100 rows per sweep (10 per
    endpoint), a sweep a second: the old pace was 20 rows/s."""

    def __init__(self, db_url: str, stack: Stack, topic: str,
                 has_room: Callable[[], bool]):
        self.db_url, self.stack, self.topic, self.has_room = db_url, stack, topic, has_room
        self.failures: list[Failed] = []

    async def __aenter__(self) -> Sweeper:
        settings = DispatcherSettings(database_url=self.db_url,
                                      kafka_bootstrap=self.stack.bootstrap,
                                      sweep_interval_s=1.0, sweep_batch=100)
        self.store = Store(self.db_url, lease_s=30, keyring=development_keyring())
        await self.store.open()
        self.publisher = Publisher(self.stack.bootstrap, "test-sweeper")

        async def publish(records: list[Record]) -> bool:
            return await publish_until_acked(self.publisher, records,
                                             on_failure=self.failures.extend)

        lost_work = LostWork(store=self.store, settings=settings, topic=self.topic,
                             metrics=DispatcherMetrics(CollectorRegistry()), publish=publish,
                             fail=lambda what, exc: pytest.fail(f"{what}: {exc}"),
                             writer_stuck_for=lambda now: 0.0, has_room=self.has_room)
        self.task = asyncio.create_task(lost_work.sweep_forever())
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)
        self.publisher.close()
        await self.store.close()


def _endpoints(db_url: str) -> list[uuid.UUID]:
    with psycopg.connect(db_url) as conn:
        return [create_endpoint(conn, tenant="acme", url=f"https://e{i}.example/h").endpoint_id
                for i in range(2)]


async def test_a_due_parked_backlog_comes_back_at_once_not_a_batch_per_interval(
        db_url: str, stack: Stack, topic: str) -> None:
    _park_due(db_url, _endpoints(db_url))  # 800 rows: 40 s at the old pace
    started = time.monotonic()
    async with Sweeper(db_url, stack, topic, has_room=lambda: True) as sweeper:
        parked = "SELECT count(*) FROM deliveries WHERE parked"
        while scalar(db_url, parked) and time.monotonic() - started < 60:
            await asyncio.sleep(0.1)
        took = time.monotonic() - started
        assert scalar(db_url, parked) == 0
        # One interval's sleep, then sweeps back to back (each a database statement and
        # an acknowledged produce): seconds, where a batch per interval took 40.
        assert took < 8.0, f"800 due parked deliveries took {took:.1f}s to come back"
        assert sweeper.failures == []


async def test_a_dispatcher_without_room_keeps_the_intervals_pace(
        db_url: str, stack: Stack, topic: str) -> None:
    # Its scheduler is full: what it was handed back it would only park again, so the
    # sweeps stay an interval apart even though each comes back full.
    _park_due(db_url, _endpoints(db_url))
    asked: list[float] = []

    def no_room() -> bool:
        asked.append(time.monotonic())
        return False

    async with Sweeper(db_url, stack, topic, has_room=no_room) as sweeper:
        deadline = time.monotonic() + 15
        while len(asked) < 3 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert len(asked) >= 3, "the sweeper did not sweep three times in 15 s"
        gaps = [b - a for a, b in pairwise(asked)]
        assert min(gaps) >= 0.9, gaps
        assert sweeper.failures == []
