"""The dispatcher's intake: queue or defer, and an offset advances only once what it
decided is durable. A fake broker and a fake store stand in for Kafka and PostgreSQL;
the scheduler, the book and the endpoint table are the real (pure) ones."""

from __future__ import annotations

import asyncio
import dataclasses
import math
import random
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hookstream.dispatcher.backlog import REOPEN_SPREAD_S, Backlog
from hookstream.dispatcher.boundary import Durable, Health
from hookstream.dispatcher.endpoint_state import EndpointState, Eviction
from hookstream.dispatcher.intake import Intake
from hookstream.dispatcher.store import EndpointRow

from hookstream.core.codec import DeliveryTask, TaskKind
from hookstream.core.topics import Topics
from hookstream.io.kafka import Record
from hookstream.policy.circuit import CircuitState
from tests.unit.dispatcher_parts import POLICY, TP, Parts, result, row, task

HORIZON_S = 5.0
TOPICS = Topics("t")


class FakeStore:
    def __init__(self, rows: list[EndpointRow]):
        self.rows = {r.id: r for r in rows}
        self.postponed: list[DeliveryTask] = []
        self.parked: list[DeliveryTask] = []
        self.pulled: list[tuple[uuid.UUID, float, float]] = []
        # Rows in flight, by delivery: the lease version the row is at (a claim moved it).
        self.in_flight: dict[uuid.UUID, int] = {}
        self.released: list[tuple[uuid.UUID, int]] = []

    async def load_endpoints(self, ids: list[uuid.UUID]) -> list[EndpointRow]:
        return [self.rows[i] for i in ids if i in self.rows]

    def _pending(self, tasks: list[DeliveryTask]) -> list[DeliveryTask]:
        return [t for t in tasks if t.delivery_id not in self.in_flight]

    async def postpone(self, tasks: list[DeliveryTask]) -> set[uuid.UUID]:
        self.postponed.extend(self._pending(tasks))
        return {t.delivery_id for t in self._pending(tasks)}

    async def park(self, tasks: list[DeliveryTask]) -> set[uuid.UUID]:
        self.parked.extend(self._pending(tasks))
        return {t.delivery_id for t in self._pending(tasks)}

    async def release_parked(self, endpoint_id: uuid.UUID, limit: int
                             ) -> list[dict[str, Any]]:
        """The next ``limit`` parked tasks of the endpoint, in slot order, as rows."""
        mine = sorted((t for t in self.parked if t.endpoint_id == endpoint_id),
                      key=lambda t: t.due_at)[:limit]
        self.released.append((endpoint_id, limit))
        for t in mine:
            self.parked.remove(t)
        return [{"delivery_id": t.delivery_id, "event_id": t.event_id,
                 "endpoint_id": t.endpoint_id, "tenant": t.tenant,
                 "lease_version": t.lease_version, "attempts": 0,
                 "committed_at": t.committed_at} for t in mine]

    async def early(self, tasks: list[DeliveryTask]) -> set[uuid.UUID]:
        return {t.delivery_id for t in tasks
                if t.lease_version > 0 and self.in_flight.get(t.delivery_id) == t.lease_version}

    async def pull_forward(self, endpoint_id: uuid.UUID, now_s: float, factor: float) -> int:
        self.pulled.append((endpoint_id, now_s, factor))
        return 0


class FakeBroker:
    """Acknowledges every record, or none (``ack`` False: what publish_until_acked
    answers when shutdown gave up waiting for a broker that is away)."""

    def __init__(self) -> None:
        self.ack = True
        self.records: list[Record] = []

    async def publish(self, records: list[Record]) -> bool:
        if self.ack:
            self.records.extend(records)
        return self.ack

    def tasks(self, topic_prefix: str = "t.delay.") -> list[DeliveryTask]:
        return [DeliveryTask.decode(r.value) for r in self.records
                if r.topic.startswith(topic_prefix)]


@dataclass
class Msg:
    """A consumed record as confluent-kafka hands it over."""

    data: bytes
    at: int

    def topic(self) -> str:
        return TP[0]

    def partition(self) -> int:
        return TP[1]

    def offset(self) -> int:
        return self.at

    def timestamp(self) -> tuple[int, int]:
        return (1, 1_700_000_000_000)  # TIMESTAMP_CREATE_TYPE, ms

    def key(self) -> bytes:
        return b"key"

    def value(self) -> bytes:
        return self.data


class Rig(Parts):
    def __init__(self, *rows: EndpointRow):
        super().__init__()
        self.clock.now = time.monotonic()  # the intake reads the real clocks
        self.store = FakeStore(list(rows))
        self.broker = FakeBroker()
        self.woken = asyncio.Event()
        durable = Durable(self.store, self.broker.publish,  # type: ignore[arg-type]
                          Health(self.metrics))
        self.backlog = Backlog(
            sched=self.sched, endpoints=self.table, book=self.book, durable=durable,
            topics=TOPICS, metrics=self.metrics, horizon_s=HORIZON_S, rng=random.Random(7))
        self.intake = Intake(
            endpoints=self.table, sched=self.sched, backlog=self.backlog, book=self.book,
            durable=durable, topics=TOPICS, metrics=self.metrics, wake=self.woken.set)

    async def ingest(self, tasks: list[DeliveryTask]) -> None:
        await self.intake.ingest(self.read(tasks))

    def state(self, endpoint_id: uuid.UUID) -> EndpointState:
        ep = self.table.get(endpoint_id)
        assert ep is not None
        return ep

    async def background_done(self) -> None:
        # The intake's and the backlog's own background work: awaited, not slept on.
        await asyncio.wait_for(
            asyncio.gather(*self.intake._background, *self.backlog._background), 5)


async def test_a_servable_task_is_queued_and_the_pump_woken() -> None:
    r = row()
    rig = Rig(r)
    await rig.ingest([task(r.id)])
    assert rig.sched.queued_for(r.id) == 1 and rig.woken.is_set()
    assert rig.broker.records == [] and rig.committable() == 0  # running: not committable


@pytest.mark.parametrize("status", ["paused", "disabled", None])
async def test_tasks_of_a_held_or_unknown_endpoint_are_dropped_and_their_offsets_complete(
        status: str | None) -> None:
    r = row(status=status or "active")
    rig = Rig(*([r] if status else []))
    await rig.ingest([task(r.id) for _ in range(3)])
    assert rig.sched.queued == 0 and rig.broker.records == []
    assert rig.committable() == 3  # the rows stay pending: the sweeper sends them later
    reason = status or "endpoint_gone"
    assert rig.sample("hookstream_dispatcher_tasks_dropped_total", reason=reason) == 3


async def test_tasks_of_a_deleted_endpoint_are_dropped_as_gone() -> None:
    r = row(status="deleted")  # its delete operation removes the rows; nothing sends them
    rig = Rig(r)
    await rig.ingest([task(r.id) for _ in range(2)])
    assert rig.sched.queued == 0 and rig.broker.records == [] and rig.committable() == 2
    assert rig.sample("hookstream_dispatcher_tasks_dropped_total", reason="endpoint_gone") == 2


async def test_a_resumed_endpoint_is_read_again_before_its_tasks_are_judged() -> None:
    r = row(status="paused")
    rig = Rig(r)
    await rig.ingest([task(r.id)])
    rig.store.rows[r.id] = row(endpoint_id=r.id, version=2)  # resumed by its owner
    await rig.ingest([task(r.id)])
    assert rig.sched.queued_for(r.id) == 1


async def test_a_task_not_due_yet_goes_to_its_tier_and_its_row_learns_the_due_time() -> None:
    r = row()
    rig = Rig(r)
    t = task(r.id, due_in_s=60)
    await rig.ingest([t])
    assert [rec.topic for rec in rig.broker.records] == [TOPICS.for_delay(59.9)]
    assert rig.broker.tasks()[0].due_at == t.due_at
    assert [p.delivery_id for p in rig.store.postponed] == [t.delivery_id]
    assert rig.committable() == 1
    assert rig.sample("hookstream_dispatcher_deferred_total", reason="not_due") == 1


async def test_an_unacknowledged_deferral_keeps_its_offset_and_its_row() -> None:
    # The broker is away and shutdown gave up: nothing may count as durable, so the
    # original task is read again after a restart.
    r = row()
    rig = Rig(r)
    rig.broker.ack = False
    await rig.ingest([task(r.id, due_in_s=60)])
    assert rig.committable() == 0 and rig.store.postponed == []


async def test_a_task_due_within_the_smallest_tier_waits_here_for_its_exact_due_time() -> None:
    r = row()
    rig = Rig(r)
    t = task(r.id, due_in_s=0.2)
    await rig.ingest([t])
    assert rig.sched.queued_for(r.id) == 0 and rig.broker.records == []
    rig.woken.clear()
    await asyncio.wait_for(rig.woken.wait(), 5)  # ingested again once due
    assert rig.sched.queued_for(r.id) == 1
    assert datetime.now(UTC) >= t.due_at  # never early


async def test_an_open_circuit_defers_until_the_pause_ends_spread_over_a_few_seconds() -> None:
    now = datetime.now(UTC).timestamp()
    r = row(circuit=CircuitState(consecutive_failures=5, first_failure_at=now - 10,
                                 paused_until=now + 60))
    rig = Rig(r)
    await rig.ingest([task(r.id) for _ in range(20)])
    # Parked in PostgreSQL (the sweeper hands them back), not recirculated through Kafka.
    assert rig.broker.records == []
    dues = [t.due_at.timestamp() for t in rig.store.parked]
    assert len(dues) == 20 and rig.sched.queued == 0
    assert all(now + 60 <= d <= now + 60 + REOPEN_SPREAD_S for d in dues)
    assert rig.committable() == 20


async def test_a_task_that_arrives_before_its_attempt_is_recorded_comes_back_not_dropped(
        ) -> None:
    # Issue #47: a reaped lease's task (produced before its row is released) or a retry
    # (published before its outcome row is written) can reach an endpoint whose circuit is
    # open while the row is still in flight at the task's lease version. Parking it then
    # writes nothing; dropping it left the row pending with no task for the sweeper's
    # bound. It goes back through the smallest tier instead, its offset completing only
    # once that copy is acknowledged; a stale task (its row claimed again since) is
    # dropped as before.
    now = datetime.now(UTC).timestamp()
    r = row(circuit=CircuitState(consecutive_failures=5, first_failure_at=now - 10,
                                 paused_until=now + 60))
    rig = Rig(r)
    early = dataclasses.replace(task(r.id, kind=TaskKind.RETRY), lease_version=3)
    stale = dataclasses.replace(task(r.id, kind=TaskKind.RETRY), lease_version=3)
    rig.store.in_flight = {early.delivery_id: 3, stale.delivery_id: 4}
    rig.broker.ack = False
    await rig.ingest([early, stale])
    assert rig.store.parked == [] and rig.committable() == 0  # the early one waits
    rig.broker.ack = True
    await rig.ingest([early])  # redelivered (no commit), the row still in flight: acknowledged
    (back,) = rig.broker.tasks("t.delay.1s")
    assert back.delivery_id == early.delivery_id and back.lease_version == 3
    assert 0 < back.due_at.timestamp() - now <= 2
    assert rig.metrics.deferred.labels("early")._value.get() >= 1


async def test_after_a_pause_only_a_probe_goes_through() -> None:
    now = datetime.now(UTC).timestamp()
    r = row(cap=4, circuit=CircuitState(consecutive_failures=5, first_failure_at=now - 100,
                                        paused_until=now - 1))
    rig = Rig(r)
    await rig.ingest([task(r.id) for _ in range(3)])
    assert rig.state(r.id).probing
    assert len(rig.sched.take(rig.clock.now, 10)) == 1


async def test_a_backlog_beyond_the_horizon_is_parked_behind_what_stays_in_memory() -> None:
    r = row(rate=10.0, cap=2)  # drains 10/s: 50 tasks in the 5 s horizon
    rig = Rig(r)
    first = [task(r.id) for _ in range(80)]
    before = datetime.now(UTC).timestamp()
    await rig.ingest(first)
    assert rig.sched.queued_for(r.id) == 50
    assert rig.broker.records == []  # no record: the rows wait in PostgreSQL
    deferred = rig.store.parked
    # The newest go, the oldest stay: a task is never overtaken by a younger one.
    assert [t.delivery_id for t in deferred] == [t.delivery_id for t in first[50:]]
    dues = [t.due_at.timestamp() for t in deferred]
    assert dues == sorted(dues) and dues[0] >= before + 50 / 10.0
    assert dues[-1] - dues[0] == pytest.approx(29 / 10.0, abs=1e-3)
    # A later batch queues up behind the first one's slots, not among them.
    await rig.ingest([task(r.id) for _ in range(10)])
    later = [t.due_at.timestamp() for t in rig.store.parked[30:]]
    assert len(later) == 10 and later[0] >= dues[-1] + 0.1 - 1e-3
    assert rig.state(r.id).deferred == 40
    assert rig.sample("hookstream_dispatcher_deferred_total", reason="backlog") == 40
    assert rig.committable() == 0  # offset 0 is still queued


async def test_a_parked_delivery_handed_back_keeps_its_place_ahead_of_younger_ones() -> None:
    # The sweeper hands a parked delivery back when its slot comes; by then younger
    # deliveries fill the endpoint's share. Sending the old one away again (the newest
    # arrival) would park it behind them, over and over: the write amplification and the
    # starvation of a slow customer's oldest work.
    r = row(rate=10.0, cap=2)
    rig = Rig(r)
    now = datetime.now(UTC)
    young = [task(r.id, now=now) for _ in range(50)]  # exactly the share (10/s × 5 s)
    await rig.ingest(young)
    old = task(r.id, now=now - timedelta(seconds=300))
    await rig.ingest([old])
    assert [t.delivery_id for t in rig.store.parked] == [young[-1].delivery_id]
    served = [item.task.delivery_id for _, item in rig.sched.take(rig.clock.now, 100)]
    assert served[0] == old.delivery_id  # and it goes first


async def test_once_its_latency_is_known_a_slow_endpoint_keeps_only_what_it_drains() -> None:
    r = row(rate=100.0, cap=2)
    rig = Rig(r)
    await rig.ingest([task(r.id) for _ in range(60)])
    assert rig.sched.queued_for(r.id) == 60  # 100/s for 5 s: all of them, for now
    # 2 in flight at 1 s: 2/s; 8 kept, what it drains in the horizon less one latency
    ep = rig.table.observed(r.id, 1000.0)
    assert ep is not None
    rig.backlog.trim(ep, datetime.now(UTC).timestamp())
    await rig.background_done()
    assert rig.sched.queued_for(r.id) == 8 and len(rig.store.parked) == 52


async def test_a_slow_endpoint_that_speeds_up_gets_its_parked_backlog_at_its_new_pace(
        ) -> None:
    # Slow (2 in flight at 1 s: 2/s), 60 tasks: 8 kept, 52 parked over 26 s of slots.
    # Then its answers take 10 ms: 100/s (its configured rate). The parked rows move
    # toward now by 2/100, in PostgreSQL and in the cursor new deferrals queue behind.
    r = row(rate=100.0, cap=2)
    rig = Rig(r)
    await rig.ingest([task(r.id) for _ in range(60)])
    ep = rig.table.observed(r.id, 1000.0)
    assert ep is not None
    now = datetime.now(UTC).timestamp()
    rig.backlog.trim(ep, now)
    await rig.background_done()
    assert len(rig.store.parked) == 52 and ep.planned_rate == 2.0
    cursor = ep.defer_cursor
    assert cursor >= now + 25
    for _ in range(3):  # one 10 ms answer is not enough to double the average's pace
        rig.table.observed(r.id, 10.0)
        rig.backlog.trim(ep, now)
    assert rig.store.pulled == []
    for _ in range(30):
        rig.table.observed(r.id, 10.0)
        rig.backlog.trim(ep, now)
    await rig.background_done()
    # Once each time the pace doubled (the latency average decays toward 10 ms): a few
    # rewrites of the rows, never one per answer.
    pulled = rig.store.pulled
    assert 1 <= len(pulled) <= 6
    assert all(e == r.id and at == now and f <= 0.5 for e, at, f in pulled)
    total = math.prod(f for _, _, f in pulled)
    assert total == pytest.approx(2.0 / ep.planned_rate)
    assert ep.planned_rate >= 50  # near its configured 100/s
    assert ep.defer_cursor == pytest.approx(now + (cursor - now) * total)
    assert rig.sample("hookstream_dispatcher_backlog_caught_up_total") == len(pulled)


async def test_an_endpoint_with_nothing_parked_pulls_nothing_forward() -> None:
    r = row(rate=100.0, cap=2)
    rig = Rig(r)
    await rig.ingest([task(r.id) for _ in range(5)])
    ep = rig.state(r.id)
    for latency_ms in (1000.0, 10.0, 10.0, 10.0):
        rig.table.observed(r.id, latency_ms)
        rig.backlog.trim(ep, datetime.now(UTC).timestamp())
    await rig.background_done()
    assert rig.store.parked == [] and rig.store.pulled == []


async def test_an_eviction_is_deferred_when_paused_and_dropped_when_disabled() -> None:
    paused, disabled = row(), row()
    rig = Rig(paused, disabled)
    await rig.ingest([task(paused.id) for _ in range(3)] + [task(disabled.id) for _ in range(2)])
    until = datetime.now(UTC).timestamp() + 30
    rig.backlog.evict(Eviction(rig.sched.pop_excess(paused.id, 0), until))
    rig.backlog.evict(Eviction(rig.sched.pop_excess(disabled.id, 0), None))
    await rig.background_done()
    dues = [t.due_at.timestamp() for t in rig.store.parked]
    assert len(dues) == 3 and all(until <= d <= until + REOPEN_SPREAD_S for d in dues)
    assert rig.sample("hookstream_dispatcher_tasks_dropped_total", reason="disabled") == 2
    assert rig.committable() == 5


@pytest.mark.parametrize("acked", [True, False])
async def test_an_undecodable_record_completes_only_once_its_dead_letter_is_acknowledged(
        acked: bool) -> None:
    r = row()
    rig = Rig(r)
    rig.broker.ack = acked
    await rig.intake.receive([Msg(b"\x00not a task", 0)])
    assert rig.sample("hookstream_dispatcher_undecodable_tasks_total") == 1
    assert rig.committable() == (1 if acked else 0)
    if acked:
        (dead,) = rig.broker.records
        assert dead.topic == TOPICS.dead and dead.value == b"\x00not a task"
        assert dead.headers and dead.headers[0][0] == "hookstream-reason"


async def test_received_records_are_decoded_and_ingested() -> None:
    r = row(cap=5)
    rig = Rig(r)
    tasks = [task(r.id) for _ in range(3)]
    await rig.intake.receive([Msg(t.encode(), n) for n, t in enumerate(tasks)])
    assert rig.sched.queued_for(r.id) == 3
    taken = [item.task.delivery_id for _, item in rig.sched.take(rig.clock.now, 10)]
    assert sorted(taken) == sorted(t.delivery_id for t in tasks)


async def test_after_an_attempt_an_answer_that_opens_the_circuit_parks_the_queue() -> None:
    # The pump's one call after an attempt: the endpoint table learns the answer, the
    # backlog carries out what it moved out of memory.
    r = row(cap=5)
    rig = Rig(r)
    await rig.ingest([task(r.id) for _ in range(4)])
    now = datetime.now(UTC).timestamp()
    for _ in range(POLICY.failure_threshold):
        rig.backlog.after_attempt(r.id, result(500, now=now), now)
    await rig.background_done()
    paused_until = rig.state(r.id).circuit.paused_until
    assert paused_until is not None and rig.sched.queued_for(r.id) == 0
    dues = [t.due_at.timestamp() for t in rig.store.parked]
    assert len(dues) == 4 and all(paused_until <= d <= paused_until + REOPEN_SPREAD_S
                                  for d in dues)
    assert rig.sample("hookstream_dispatcher_deferred_total", reason="circuit") == 4
    assert rig.committable() == 4


async def test_an_endpoint_that_runs_out_of_work_gets_its_parked_rows_now() -> None:
    # Issue #47: a drain schedule is a plan from what one process observed; an endpoint
    # that answers and has nothing left in memory must not idle while rows of its own
    # wait for slots planned at a slower pace (a fresh process, an earlier incarnation).
    r = row(rate=10.0, cap=2)  # keeps what drains in 5 s: 50
    rig = Rig(r)
    slow_plan = [task(r.id, due_in_s=60.0 + k) for k in range(120)]
    rig.store.parked.extend(slow_plan)  # parked by an earlier process, one a second
    await rig.ingest([task(r.id)])
    assert len(rig.sched.take(rig.clock.now, 10)) == 1
    now = datetime.now(UTC).timestamp()
    rig.backlog.after_attempt(r.id, result(200, now=now), now)  # its last in flight
    await rig.background_done()
    assert rig.store.released == [(r.id, 49)]  # what it drains in the horizon less 20 ms
    back = rig.broker.tasks("t.deliveries")
    assert [t.delivery_id for t in back] == [t.delivery_id for t in slow_plan[:49]]
    assert all(t.due_at.timestamp() <= time.time() for t in back)
    assert {h for rec in rig.broker.records for h in rec.headers} == {
        ("hookstream-origin", b"refill")}
    assert rig.sample("hookstream_dispatcher_backlog_refilled_total") == 49


async def test_no_refill_while_work_remains_and_none_once_nothing_is_parked() -> None:
    r = row(rate=10.0, cap=2)
    rig = Rig(r)
    await rig.ingest([task(r.id) for _ in range(3)])
    taken = rig.sched.take(rig.clock.now, 10)
    assert len(taken) == 2
    now = datetime.now(UTC).timestamp()
    rig.backlog.after_attempt(r.id, result(200, now=now), now)  # one queued, one in flight
    rig.backlog.after_attempt(r.id, result(500, now=now), now)  # a failure: no refill
    await rig.background_done()
    assert rig.store.released == []
    rig.sched.release(r.id, rig.clock.now)
    rig.sched.release(r.id, rig.clock.now)
    rig.sched.take(rig.clock.now, 10)
    for _ in range(3):  # nothing parked: one look, then none until it parks again
        rig.backlog.after_attempt(r.id, result(200, now=now), now)
        await rig.background_done()
    assert [e for e, _ in rig.store.released] == [r.id]
    assert not rig.state(r.id).parked_maybe


async def test_after_an_attempt_of_a_forgotten_endpoint_nothing_happens() -> None:
    rig = Rig()
    rig.backlog.after_attempt(uuid.uuid4(), result(500), datetime.now(UTC).timestamp())
    assert rig.backlog._background == set() and rig.store.parked == []
