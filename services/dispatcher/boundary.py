"""The dispatcher's way out to PostgreSQL and Kafka, and what its failures say about it.

* ``Health``: what ``/healthz`` reports of this process — a failure anywhere (the
  database, the broker, a commit) marks it unhealthy until the database answers again;
  its delay forwarder (a thread of its own) counts too once it runs.
* ``Durable``: every read and write the delivery path makes, retried until it succeeds
  (the offsets of the work it concerns stay uncommitted meanwhile, so even a crash here
  loses nothing), and records published until the broker acknowledges each one.

The intake, the backlog, the pump and the outcome writer take one ``Durable``; a unit
test builds one over a fake store and a fake broker.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

from hookstream.dispatcher.metrics import DispatcherMetrics
from hookstream.dispatcher.store import AttemptRecord, Claim, EndpointRow, Store

from hookstream.core.codec import DeliveryTask
from hookstream.io.kafka import Failed, KafkaTransient, Publisher, Record, publish_until_acked
from hookstream.io.pg import DatabaseUnavailable
from hookstream.policy.circuit import CircuitState

log = logging.getLogger("hookstream.dispatcher")
T = TypeVar("T")
# True once every record is acknowledged; False only when shutdown gave up waiting.
Publish = Callable[[list[Record]], Awaitable[bool]]
RETRY_FIRST_S = 0.2
RETRY_CAP_S = 10.0


class Reporting(Protocol):
    """A part with a health of its own (the delay forwarder)."""

    @property
    def healthy(self) -> bool: ...
    @property
    def last_error(self) -> str | None: ...


class Health:
    def __init__(self, metrics: DispatcherMetrics):
        self._metrics = metrics
        self._healthy = False
        self._last_error: str | None = None
        self.delay: Reporting | None = None  # set once the delay forwarder runs

    @property
    def healthy(self) -> bool:
        return self._healthy and (self.delay is None or self.delay.healthy)

    @healthy.setter
    def healthy(self, value: bool) -> None:
        self._healthy = value

    @property
    def last_error(self) -> str | None:
        if self._last_error is None and self.delay is not None and not self.delay.healthy:
            return self.delay.last_error
        return self._last_error

    @last_error.setter
    def last_error(self, value: str | None) -> None:
        self._last_error = value

    def fail(self, kind: str, exc: BaseException) -> None:
        self._metrics.errors.labels(kind).inc()
        self.healthy, self.last_error = False, f"{kind}: {exc}"
        log.warning("dispatcher error", extra={"kind": kind, "error": str(exc)})

    def recovered(self) -> None:
        if not self.healthy:
            self.healthy, self.last_error = True, None

    def publish_failed(self, failed: list[Failed]) -> None:
        self._metrics.errors.labels("kafka_produce").inc(len(failed))
        self.fail("kafka", KafkaTransient(f"{len(failed)} records not acknowledged, "
                                          f"retrying them: {failed[0].error}"))
        for f in failed:
            if not f.retriable:  # a record the broker can never take: a bug, say so
                log.error("record refused permanently", extra={
                    "topic": f.record.topic, "error": f.error})


def until_acked(publisher: Publisher, health: Health, give_up: Callable[[], bool]) -> Publish:
    """Publishing through ``publisher``: failed records are sent again, exactly those,
    until all are acknowledged or ``give_up()`` (shutdown waited long enough)."""
    async def publish(records: list[Record]) -> bool:
        return await publish_until_acked(publisher, records, on_failure=health.publish_failed,
                                         give_up=give_up)

    return publish


class Durable:
    def __init__(self, store: Store, publish: Publish, health: Health):
        self._store, self._publish, self._health = store, publish, health

    async def publish(self, records: list[Record]) -> bool:
        return await self._publish(records)

    async def load_endpoints(self, ids: list[uuid.UUID]) -> list[EndpointRow]:
        return await self._retried(self._store.load_endpoints, ids)

    async def claim(self, tasks: list[DeliveryTask]) -> list[Claim]:
        return await self._retried(self._store.claim, tasks)

    async def record(self, records: list[AttemptRecord],
                     circuits: dict[uuid.UUID, CircuitState], disable: dict[uuid.UUID, str],
                     ) -> int:
        """Raises DataRejected (not retried): the writer isolates the row refused."""
        return await self._retried(self._store.record, records, circuits, disable)

    async def park(self, tasks: list[DeliveryTask]) -> set[uuid.UUID]:
        return await self._retried(self._store.park, tasks)

    async def postpone(self, tasks: list[DeliveryTask]) -> set[uuid.UUID]:
        return await self._retried(self._store.postpone, tasks)

    async def release_parked(self, endpoint_id: uuid.UUID, limit: int
                             ) -> list[dict[str, Any]]:
        return await self._retried(self._store.release_parked, endpoint_id, limit)

    async def early(self, tasks: list[DeliveryTask]) -> set[uuid.UUID]:
        return await self._retried(self._store.early, tasks)

    async def pull_forward(self, endpoint_id: uuid.UUID, now_s: float, factor: float) -> int:
        return await self._retried(self._store.pull_forward, endpoint_id, now_s, factor)

    async def _retried(self, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        """Retry a database call until it succeeds."""
        delay = RETRY_FIRST_S
        while True:
            try:
                result = await fn(*args)
                self._health.recovered()
                return result
            except DatabaseUnavailable as exc:
                self._health.fail("database", exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, RETRY_CAP_S)
