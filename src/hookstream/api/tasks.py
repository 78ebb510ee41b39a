"""Producing replay tasks to ``<prefix>.deliveries``: the API's one Kafka edge.

Callers await ``send`` while holding the database transaction that set the deliveries
back to pending, and commit only once every task is acknowledged by its own delivery
report (a failure rolls the rows back; a task whose row change never committed claims
nothing, because the claim needs status 'pending').
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from hookstream.codec import DeliveryTask, TaskKind
from hookstream.kafka import KafkaPermanent, KafkaTransient, Publisher, Record
from hookstream.topics import Topics


def replay_tasks(rows: Sequence[Mapping[str, Any]], now: datetime) -> list[DeliveryTask]:
    return [DeliveryTask(
        delivery_id=r["delivery_id"], event_id=r["event_id"], endpoint_id=r["endpoint_id"],
        tenant=r["tenant"], kind=TaskKind.REPLAY, due_at=now, committed_at=r["committed_at"],
        lease_version=r["lease_version"]) for r in rows]


class TaskSink:
    def __init__(self, bootstrap: str, topics: Topics, publisher: Publisher | None = None):
        self.topics = topics
        self.publisher = publisher or Publisher(bootstrap, "hookstream-api")

    async def send(self, tasks: Sequence[DeliveryTask]) -> None:
        """Returns once every task is acknowledged; raises KafkaTransient (or
        KafkaPermanent when the broker refused them for good) otherwise."""
        if not tasks:
            return
        topic = self.topics.deliveries
        failed = await self.publisher.publish_async(
            [Record(topic, task.key, task.encode()) for task in tasks])
        if failed:
            error = (f"{len(failed)} of {len(tasks)} replay tasks not acknowledged:"
                     f" {failed[0].error}")
            if any(f.retriable for f in failed):
                raise KafkaTransient(error)
            raise KafkaPermanent(error)

    def close(self) -> None:
        self.publisher.close()


def now_utc() -> datetime:
    return datetime.now(UTC)
