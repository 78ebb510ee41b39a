"""The reaper against a store twin: what it hands back, and when it holds back."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from hookstream.dispatcher.lost_work import HOLD_CAP_S, LostWork, lost_after_s
from hookstream.dispatcher.metrics import DispatcherMetrics
from prometheus_client import CollectorRegistry

from hookstream.core.secretbox import new_key_entry
from hookstream.core.settings import DispatcherSettings, from_env
from hookstream.io.kafka import Record

Produce = Callable[[list[dict[str, Any]]], Awaitable[bool]]


def _row() -> dict[str, Any]:
    return {"delivery_id": uuid.uuid4(), "event_id": uuid.uuid4(),
            "endpoint_id": uuid.uuid4(), "tenant": "acme", "lease_version": 1,
            "attempts": 1, "committed_at": datetime.now(UTC)}


class StoreTwin:
    """expired_leases as the real store runs it: read the rows (``during_read`` stands
    for whatever happens while the read waits), await ``produce``, release if True."""

    def __init__(self, rows: list[dict[str, Any]], during_read: Callable[[], None]):
        self.rows, self.during_read = rows, during_read
        self.released: list[dict[str, Any]] = []

    async def expired_leases(self, limit: int, produce: Produce) -> int:
        self.during_read()
        rows = self.rows[:limit]
        if not rows or not await produce(rows):
            return 0
        self.released += rows
        return len(rows)


class Rig:
    def __init__(self, rows: list[dict[str, Any]], stuck_while_reading_s: float) -> None:
        self.stuck_s = 0.0
        self.published: list[Record] = []

        def outage_ends() -> None:
            # the attempts finished during the outage; their outcomes now wait
            self.stuck_s = stuck_while_reading_s

        self.store = StoreTwin(rows, outage_ends)

        async def publish(records: list[Record]) -> bool:
            self.published += records
            return True

        settings = from_env(DispatcherSettings, {"HOOKSTREAM_SECRET_KEYS": new_key_entry("k1")})
        self.lost_work = LostWork(
            store=self.store, settings=settings, topic="t.deliveries",  # type: ignore[arg-type]
            metrics=DispatcherMetrics(CollectorRegistry()), publish=publish,
            fail=lambda _where, exc: None, writer_stuck_for=lambda _now: self.stuck_s)


async def test_expired_leases_are_handed_back_when_no_outcome_waits() -> None:
    rig = Rig([_row(), _row()], stuck_while_reading_s=0.0)
    assert await rig.lost_work.reap_once() == 2
    assert len(rig.published) == 2 and len(rig.store.released) == 2


async def test_outcomes_that_began_waiting_during_the_read_keep_their_leases() -> None:
    # The read waited out a database outage for a pooled connection; meanwhile the
    # attempts finished and their outcomes wait to be written. Handing the leases back
    # now would send each delivery again (seen in test_faults_dispatcher under load).
    rig = Rig([_row(), _row()], stuck_while_reading_s=30.0)
    assert await rig.lost_work.reap_once() == 0
    assert rig.published == [] and rig.store.released == []


async def test_nothing_is_read_while_outcomes_wait() -> None:
    rig = Rig([_row()], stuck_while_reading_s=0.0)
    rig.stuck_s = 5.0
    reads: list[bool] = []
    rig.store.during_read = lambda: reads.append(True)
    assert await rig.lost_work.reap_once() == 0
    assert reads == [] and rig.published == []


def test_a_row_counts_as_lost_only_past_the_bound_plus_the_unread_backlog() -> None:
    # Issue #47: after a dispatcher stopped for 3 minutes, rows overdue by more than the
    # bound still had their tasks in its partitions; sweeping them raised
    # HookstreamTasksLost for tasks that were only waiting.
    assert lost_after_s(120.0, 0.0) == 120.0
    assert lost_after_s(120.0, 180.0) == 300.0
    assert lost_after_s(120.0, None) == 120.0 + HOLD_CAP_S  # unknown: wait, but not forever
    assert lost_after_s(120.0, 10 * HOLD_CAP_S) == 120.0 + HOLD_CAP_S
