"""Producing replay tasks to ``<prefix>.deliveries``: the control plane's one Kafka edge.

Callers commit the rows they set back to pending **first** and only then hand their
tasks to Kafka, so no transaction (row locks, a snapshot pinning vacuum) is ever held
while the API waits for the broker. A task that is never acknowledged loses nothing:
its delivery is committed ``pending`` and due now, which is exactly what the
dispatcher's sweeper re-queues once it is overdue by ``SWEEP_AFTER_S``. A task that
claims nothing (a duplicate of a swept one) is harmless: the claim needs status
'pending' and the lease version.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from hookstream.core.codec import DeliveryTask, TaskKind
from hookstream.core.topics import Topics
from hookstream.io.kafka import Failed, Publisher, Record, publish_until_acked

log = logging.getLogger("hookstream.api.tasks")  # the name its log lines always had
# A single replay answers within this even with Kafka away; its task is then the
# sweeper's to send (the answer says so).
REPLAY_ACK_WAIT_S = 5.0


def replay_tasks(rows: Sequence[Mapping[str, Any]], now: datetime) -> list[DeliveryTask]:
    return [DeliveryTask(
        delivery_id=r["delivery_id"], event_id=r["event_id"], endpoint_id=r["endpoint_id"],
        tenant=r["tenant"], kind=TaskKind.REPLAY, due_at=now, committed_at=r["committed_at"],
        lease_version=r["lease_version"]) for r in rows]


class TaskSink:
    def __init__(self, bootstrap: str, topics: Topics, publisher: Publisher | None = None):
        self.topics = topics
        self.publisher = publisher or Publisher(bootstrap, "hookstream-api")

    def _records(self, tasks: Sequence[DeliveryTask]) -> list[Record]:
        topic = self.topics.deliveries
        return [Record(topic, task.key, task.encode()) for task in tasks]

    async def offer(self, tasks: Sequence[DeliveryTask],
                    wait_s: float = REPLAY_ACK_WAIT_S) -> bool:
        """True once every task is acknowledged within ``wait_s``; False otherwise (the
        records may still be delivered later; the sweeper covers them either way)."""
        if not tasks:
            return True
        failed = await self.publisher.publish_async(self._records(tasks), wait_s)
        if failed:
            log.warning("replay task not acknowledged; the sweeper will send it", extra={
                "count": len(failed), "first": failed[0].error})
        return not failed

    async def send_until_acked(self, tasks: Sequence[DeliveryTask], *,
                               on_failure: Callable[[list[Failed]], None]) -> bool:
        """Retry exactly the failed tasks until all are acknowledged (True), or until
        the broker refuses them for good (False: the sweeper will try them again)."""
        refused = False

        def failed(batch: list[Failed]) -> None:
            nonlocal refused
            refused = not any(f.retriable for f in batch)
            on_failure(batch)

        return await publish_until_acked(self.publisher, self._records(tasks),
                                         on_failure=failed, give_up=lambda: refused)

    def close(self) -> None:
        self.publisher.close()


def now_utc() -> datetime:
    return datetime.now(UTC)
