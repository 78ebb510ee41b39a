"""What every use case works with: the settings, the database pool, the Kafka sink for
replay tasks, the background operations and the metrics; opened once per process by
``running`` and closed by it (the HTTP app, ``hookstream.api.resources``, holds it)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta

import psycopg
from prometheus_client import CollectorRegistry, Counter
from psycopg.rows import DictRow, dict_row
from psycopg_pool import AsyncConnectionPool

from hookstream.controlplane.operations import Operations
from hookstream.controlplane.tasks import TaskSink, now_utc
from hookstream.core.settings import ApiSettings
from hookstream.core.topics import Topics
from hookstream.io.pg import NETWORK_BOUNDS, POOL_RECONNECT_S
from hookstream.ops.observability import at_zero

POOL_TIMEOUT_S = 5.0
# `kind` of hookstream_api_replays_total: one delivery, or an endpoint's replay/recover
REPLAY_KINDS = ("single", "replay", "recover")


class ApiMetrics:
    def __init__(self, registry: CollectorRegistry,
                 responses: Iterable[tuple[str, str, str]]) -> None:
        # Published at 0 from the start: every (method, route, status) the API documents
        # (bounded: a handful per route), each replay kind.
        self.requests = at_zero(Counter(
            "hookstream_api_requests_total", "Control-plane API requests",
            ["method", "route", "status"], registry=registry), list(responses))
        self.replays = at_zero(Counter(
            "hookstream_api_replays_total",
            "Deliveries set back to pending for a manual replay", ["kind"], registry=registry),
            REPLAY_KINDS)


@dataclass
class ControlPlane:
    settings: ApiSettings
    pool: AsyncConnectionPool[psycopg.AsyncConnection[DictRow]]
    sink: TaskSink
    operations: Operations
    metrics: ApiMetrics

    def conn(self) -> AbstractAsyncContextManager[psycopg.AsyncConnection[DictRow]]:
        """One transaction: committed when the block ends, rolled back if it raises."""
        return self.pool.connection(timeout=POOL_TIMEOUT_S)

    def oldest(self) -> datetime:
        return now_utc() - timedelta(days=self.settings.history_days)


@asynccontextmanager
async def running(settings: ApiSettings, metrics: ApiMetrics) -> AsyncIterator[ControlPlane]:
    """The pool (opened without waiting for the database), the sink, the operations and
    their sweeper (which adopts operations whose owner died), for as long as the block."""
    pool = AsyncConnectionPool(settings.database_url, min_size=1,
                               max_size=settings.db_pool_size, open=False,
                               connection_class=psycopg.AsyncConnection[DictRow],
                               kwargs={"row_factory": dict_row, **NETWORK_BOUNDS},
                               reconnect_timeout=POOL_RECONNECT_S, name="hookstream-api")
    await pool.open(wait=False)
    sink = TaskSink(settings.kafka_bootstrap, Topics(settings.topic_prefix))
    operations = Operations(pool, sink, batch_size=settings.operation_batch_size,
                            lease_s=settings.operation_lease_s, replays=metrics.replays)
    cp = ControlPlane(settings, pool, sink, operations, metrics)
    sweeper = asyncio.create_task(operations.sweep_forever(settings.operation_lease_s),
                                  name="operation-sweeper")
    try:
        yield cp
    finally:
        sweeper.cancel()
        await asyncio.gather(sweeper, return_exceptions=True)
        await operations.close()
        await asyncio.to_thread(sink.close)
        await pool.close()
