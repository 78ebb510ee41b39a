"""The outcome writer's ordering and its "stuck" measure (the reaper holds back on it):
records durable before rows, offsets after rows, and an outcome waiting for the broker
counts as waiting, not as a dead worker's. Fake broker and store, no I/O."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

from hookstream.dispatcher.boundary import Durable, Health
from hookstream.dispatcher.decide import DeliveryVerdict, RowStatus
from hookstream.dispatcher.outcomes import Finished, OutcomeWriter
from hookstream.dispatcher.store import AttemptRecord, Claim

from hookstream.core.topics import Topics
from hookstream.io.kafka import Record
from tests.unit.dispatcher_parts import Parts, row, task


class Broker:
    def __init__(self) -> None:
        self.open = asyncio.Event()  # acknowledges once set
        self.records: list[Record] = []

    async def publish(self, records: list[Record]) -> bool:
        await self.open.wait()
        self.records.extend(records)
        return True


class Store:
    def __init__(self) -> None:
        self.written: list[AttemptRecord] = []

    async def record(self, records: list[AttemptRecord], circuits: Any, disable: Any) -> int:
        self.written.extend(records)
        return len(records)


def _finished(parts: Parts, finished_at: float, retry_in_s: float | None) -> Finished:
    r = row()
    (item,) = parts.read([task(r.id)])
    claim = Claim(item.task.delivery_id, 1, 1, r.id, uuid.uuid4(), "acme", "http://x",
                  b"{}", [], False, finished_at + 86_400, item.task.committed_at)
    due = None if retry_in_s is None else finished_at + retry_in_s
    status = RowStatus.DELIVERED if due is None else RowStatus.PENDING
    record = AttemptRecord(claim, status.value, finished_at, finished_at, 200, 1.0, None,
                           "delivered", None, None, due)
    return Finished(record, DeliveryVerdict(status, due, False), item)


async def test_outcomes_waiting_for_the_broker_count_as_stuck_until_recorded() -> None:
    parts, broker, store = Parts(), Broker(), Store()
    durable = Durable(store, broker.publish, Health(parts.metrics))  # type: ignore[arg-type]
    writer = OutcomeWriter(durable=durable, topics=Topics("t"), metrics=parts.metrics,
                           book=parts.book, endpoint_changes=lambda: ({}, {}))
    assert writer.stuck_for(time.time()) == 0.0
    now = time.time()
    retry = _finished(parts, now - 5.0, retry_in_s=60.0)  # its retry record goes first
    done = _finished(parts, now - 2.0, retry_in_s=None)
    writer.add(retry)
    writer.add(done)
    assert writer.stuck_for(now) >= 5.0  # not even taken yet
    job = asyncio.create_task(writer.run())
    try:
        await asyncio.sleep(0.05)  # the batch is taken; its retry record waits for the broker
        assert store.written == [] and writer.stuck_for(time.time()) >= 5.0
        assert parts.committable() == 0  # nothing durable, nothing committable
        broker.open.set()
        await asyncio.wait_for(writer.drain(5), 5)
        assert [r.topic for r in broker.records] == ["t.delay.30s"]
        assert len(store.written) == 2 and parts.committable() == 2
        assert writer.stuck_for(time.time()) == 0.0
    finally:
        job.cancel()
