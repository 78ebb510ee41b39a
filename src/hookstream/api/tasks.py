"""Producing replay tasks to ``<prefix>.deliveries``: the API's one Kafka edge.

confluent-kafka's flush blocks, so it runs in a worker thread; callers await it while
holding the database transaction that set the deliveries back to pending, and commit
only once every task is acknowledged (a failure rolls the rows back; a task whose row
change never committed claims nothing, because the claim needs status 'pending').
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from confluent_kafka import KafkaError, Message, Producer

from hookstream.codec import DeliveryTask, TaskKind
from hookstream.kafka import BrokerUnavailable, flush_or_raise, new_producer
from hookstream.topics import Topics

FLUSH_TIMEOUT_S = 30.0


def replay_tasks(rows: Sequence[Mapping[str, Any]], now: datetime) -> list[DeliveryTask]:
    return [DeliveryTask(
        delivery_id=r["delivery_id"], event_id=r["event_id"], endpoint_id=r["endpoint_id"],
        tenant=r["tenant"], kind=TaskKind.REPLAY, due_at=now, committed_at=r["committed_at"],
        lease_version=r["lease_version"]) for r in rows]


class TaskSink:
    def __init__(self, bootstrap: str, topics: Topics, producer: Producer | None = None):
        self.topics = topics
        self.producer = producer or new_producer(bootstrap, "hookstream-api")

    async def send(self, tasks: Sequence[DeliveryTask]) -> None:
        if tasks:
            await asyncio.to_thread(self._send, list(tasks))

    def _send(self, tasks: list[DeliveryTask]) -> None:
        failures: list[KafkaError] = []

        def on_delivery(err: KafkaError | None, _msg: Message) -> None:
            if err is not None:
                failures.append(err)

        for task in tasks:
            while True:
                try:
                    self.producer.produce(self.topics.deliveries, key=task.key,
                                          value=task.encode(), on_delivery=on_delivery)
                    break
                except BufferError:
                    self.producer.poll(0.1)
        flush_or_raise(self.producer, FLUSH_TIMEOUT_S)
        if failures:
            raise BrokerUnavailable(f"{len(failures)} replay tasks not acknowledged: "
                                    f"{failures[0]}")

    def close(self) -> None:
        self.producer.flush(10)


def now_utc() -> datetime:
    return datetime.now(UTC)
