"""Builders for the dispatcher's unit tests: endpoint rows, tasks read from a partition,
attempt results, and a table over a real (pure) scheduler with a clock the test sets."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from hookstream.dispatcher.attempt import AttemptResult
from hookstream.dispatcher.endpoint_state import EndpointTable
from hookstream.dispatcher.metrics import DispatcherMetrics
from hookstream.dispatcher.offset_book import Item, OffsetBook
from hookstream.dispatcher.store import EndpointRow
from prometheus_client import CollectorRegistry

from hookstream.core.codec import DeliveryTask, TaskKind
from hookstream.policy.circuit import CircuitPolicy, CircuitState
from hookstream.policy.classify import ErrorClass, classify
from hookstream.policy.scheduler import FairScheduler, Limits

TP = ("hookstream.deliveries", 0)
POLICY = CircuitPolicy(failure_threshold=3, base_pause_s=30.0, max_pause_s=600.0)


def row(*, status: str = "active", rate: float = 10.0, burst: int = 10, cap: int = 2,
        version: int = 1, circuit: CircuitState | None = None,
        endpoint_id: uuid.UUID | None = None, tenant: str = "acme") -> EndpointRow:
    return EndpointRow(id=endpoint_id or uuid.uuid4(), tenant=tenant, status=status,
                       rate_per_s=rate, burst=burst, max_in_flight=cap, config_version=version,
                       circuit=circuit or CircuitState())


def task(endpoint_id: uuid.UUID, *, due_in_s: float = 0.0, now: datetime | None = None,
         kind: TaskKind = TaskKind.NEW) -> DeliveryTask:
    now = now or datetime.now(UTC)
    return DeliveryTask(delivery_id=uuid.uuid4(), event_id=uuid.uuid4(),
                        endpoint_id=endpoint_id, tenant="acme", kind=kind,
                        due_at=now + timedelta(seconds=due_in_s), committed_at=now)


def result(status: int | None, *, latency_ms: float = 20.0, now: float = 0.0,
           error: ErrorClass | None = None,
           headers: Mapping[str, str] | None = None) -> AttemptResult:
    return AttemptResult(started_at=now, finished_at=now, latency_ms=latency_ms,
                         status_code=status, error_class=error, error=None, excerpt=None,
                         decision=classify(status, error, headers or {}, now))


@dataclass
class Clock:
    now: float = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Parts:
    """A scheduler, a book, metrics and an endpoint table wired like the dispatcher's."""

    clock: Clock = field(default_factory=Clock)
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)

    def __post_init__(self) -> None:
        unlimited = Limits(1e9, 1e9, 10**9)
        self.sched: FairScheduler[uuid.UUID, Item] = FairScheduler(
            10**6, lambda _tenant: unlimited)
        self.book = OffsetBook()
        self.book.assigned([TP])
        self._next_offset = 0
        self.metrics = DispatcherMetrics(self.registry)
        self.metrics.publish_at_zero(["deliveries"])
        self.table = EndpointTable(sched=self.sched, policy=POLICY, metrics=self.metrics,
                                   refresh_s=1.0, clock=self.clock)

    def read(self, tasks: list[DeliveryTask]) -> list[Item]:
        """The tasks as if consumed from one partition, at the next offsets."""
        offsets = list(range(self._next_offset, self._next_offset + len(tasks)))
        self._next_offset += len(tasks)
        trackers = self.book.track_all([TP] * len(tasks), offsets)
        out = []
        for t, o, tr in zip(tasks, offsets, trackers, strict=True):
            assert tr is not None
            out.append(Item(t, TP, o, tr))
        return out

    def sample(self, name: str, **labels: str) -> float:
        value = self.registry.get_sample_value(name, labels)
        return 0.0 if value is None else value

    def committable(self) -> Any:
        return self.book.commits().get(TP)
