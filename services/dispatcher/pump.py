"""The pump: what the scheduler allows → claimed in one round trip → signed POSTs.

Each finished attempt is turned into values and handed down: its answer to the backlog
(``after_attempt``: the endpoint table's circuit and adaptive rate, and what that moves
out of memory), its delivery verdict (``decide``) and attempt row to the outcome writer.
The pump itself decides nothing.
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from datetime import UTC, datetime

import aiohttp
from hookstream.dispatcher.attempt import AttemptResult, send
from hookstream.dispatcher.backlog import Backlog
from hookstream.dispatcher.boundary import Durable
from hookstream.dispatcher.decide import delivery_verdict
from hookstream.dispatcher.metrics import DispatcherMetrics
from hookstream.dispatcher.offset_book import Item, OffsetBook
from hookstream.dispatcher.outcomes import Finished, OutcomeWriter
from hookstream.dispatcher.store import AttemptRecord, Claim

from hookstream.core.aio import wait_set
from hookstream.core.codec import TaskKind
from hookstream.core.settings import DispatcherSettings
from hookstream.policy.backoff import BackoffPolicy
from hookstream.policy.scheduler import FairScheduler

TAKE_MAX = 200  # tasks claimed per round trip at most
IDLE_WAKE_S = 0.5  # looks again this often with nothing to wake it


class Pump:
    def __init__(self, *, settings: DispatcherSettings, sched: FairScheduler[uuid.UUID, Item],
                 book: OffsetBook, durable: Durable, backlog: Backlog, writer: OutcomeWriter,
                 backoff: BackoffPolicy, metrics: DispatcherMetrics,
                 rng: random.Random | None = None):
        self._s, self._sched, self._book, self._durable = settings, sched, book, durable
        self._backlog, self._writer, self._backoff = backlog, writer, backoff
        self._metrics = metrics
        self._rng = rng or random.Random()
        self.attempts: set[asyncio.Task[None]] = set()
        self._wake = asyncio.Event()
        # Set when the scheduler has room again: the poll loop reads more.
        self.room = asyncio.Event()

    def wake(self) -> None:
        self._wake.set()

    async def run(self, session: aiohttp.ClientSession) -> None:
        sched = self._sched
        while True:
            timer = sched.next_timer_at()
            timeout = IDLE_WAKE_S if timer is None else max(
                0.0, min(IDLE_WAKE_S, timer - time.monotonic()))
            await wait_set(self._wake, timeout)
            self._wake.clear()
            while True:
                picked = sched.take(time.monotonic(), TAKE_MAX)
                if not picked:
                    break
                live = []
                for key, item in picked:
                    if self._book.valid(item):
                        live.append((key, item))
                    else:
                        sched.release(key, time.monotonic())  # revoked meanwhile
                if live:
                    await self._claim_and_send(session, live)
            self._metrics.queued.set(sched.queued)
            self._metrics.in_flight.set(len(self.attempts))
            if sched.queued < self._s.max_queued:
                self.room.set()

    async def _claim_and_send(self, session: aiohttp.ClientSession,
                              picked: list[tuple[uuid.UUID, Item]]) -> None:
        sent_m = time.monotonic()
        claims = await self._durable.claim([item.task for _, item in picked])
        claimed_m = time.monotonic()
        self._metrics.stage_claim.observe(claimed_m - sent_m)
        by_id = {c.delivery_id: c for c in claims}
        now = datetime.now(UTC)
        not_taken = []
        for key, item in picked:
            claim = by_id.pop(item.task.delivery_id, None)
            if claim is None:
                self._sched.release(key, time.monotonic())
                not_taken.append(item)
                continue
            first = item.task.kind is TaskKind.NEW and claim.attempt_no == 1
            if first:
                self._metrics.first_attempt.observe(
                    max(0.0, (now - item.task.committed_at).total_seconds()))
                self._metrics.stage_queued.observe(max(0.0, sent_m - item.consumed_at))
            job = asyncio.create_task(self._attempt(session, claim, item,
                                                    claimed_m if first else None))
            self.attempts.add(job)
            job.add_done_callback(self.attempts.discard)
        if not_taken:
            # stale (dropped) or early (back in a second): not on the hot path
            self._backlog.spawn(self._backlog.not_taken(not_taken))

    async def _attempt(self, session: aiohttp.ClientSession, claim: Claim, item: Item,
                       claimed_m: float | None = None) -> None:
        s = self._s
        if claimed_m is not None:
            self._metrics.stage_start.observe(time.monotonic() - claimed_m)
        result = await send(
            session, url=claim.url, delivery_id=str(claim.delivery_id), body=claim.payload,
            secrets=claim.secrets, timeout_s=s.request_timeout_s,
            body_cap_bytes=s.response_body_cap_bytes, user_agent=s.user_agent,
            allow_private=s.allow_private_targets)
        self._observe(result)
        if claim.manual:
            self._metrics.replays.labels(result.decision.outcome.value).inc()
        now = time.time()
        verdict = delivery_verdict(
            result.decision, attempt_no=claim.attempt_no, manual=claim.manual,
            expires_at_s=claim.expires_at_s, now_s=now, policy=self._backoff, rng=self._rng)
        self._backlog.after_attempt(claim.endpoint_id, result, now)
        self._sched.release(claim.endpoint_id, time.monotonic())
        self._wake.set()
        record = AttemptRecord(
            claim=claim, status=verdict.status.value, started_at=result.started_at,
            finished_at=result.finished_at, status_code=result.status_code,
            latency_ms=result.latency_ms,
            error_class=result.error_class.value if result.error_class else None,
            outcome=result.decision.outcome.value, excerpt=result.excerpt, error=result.error,
            next_at_s=verdict.retry_due_s)
        self._writer.add(Finished(record, verdict, item))

    def _observe(self, result: AttemptResult) -> None:
        code = result.status_code
        status_class = f"{code // 100}xx" if code else (
            result.error_class.value if result.error_class else "none")
        self._metrics.attempts.inc(result.decision.outcome.value, status_class)
        self._metrics.latency.observe(result.latency_ms / 1000.0)
