"""Bulk replay, recovery and endpoint deletion as resumable background work.

The request that starts one records an ``operations`` row (with a lease owned by this
API instance) and answers 202 at once. A task then works through the matching
deliveries oldest-first in batches; each batch is one transaction that sets the rows
back to pending and advances the operation's cursor and progress; once it committed,
the batch's REPLAY tasks are produced and retried until Kafka acknowledges them (no
transaction waits for the broker, and a long outage holds the operation at that batch
rather than racing ahead). If this instance dies, the lease runs out and any
instance's sweeper takes the operation over at its cursor; a batch whose tasks never
reached Kafka is committed ``pending`` and due, which the dispatcher's sweeper
re-queues: nothing is skipped. A ``delete`` operation (hookstream.controlplane.deletion) runs on
the same machinery, one batch of the endpoint's history per step.
"""

from __future__ import annotations

import asyncio
import logging
import uuid

from prometheus_client import Counter
from psycopg_pool import AsyncConnectionPool

from hookstream.controlplane import deletion, store
from hookstream.controlplane.tasks import TaskSink, now_utc, replay_tasks
from hookstream.controlplane.validation import REPLAYABLE
from hookstream.io.kafka import Failed

log = logging.getLogger("hookstream.api.operations")  # the name its lines always had
MAX_FAILURES = 3


class Operations:
    def __init__(self, pool: AsyncConnectionPool[store.Conn], sink: TaskSink, *, batch_size: int,
                 lease_s: float, replays: Counter, owner: str | None = None,
                 delete_batch_size: int = deletion.DELETE_BATCH_SIZE) -> None:
        self.pool = pool
        self.sink = sink
        self.batch_size = batch_size
        self.delete_batch_size = delete_batch_size
        self.lease_s = lease_s
        self.replays = replays
        self.owner = owner or f"api-{uuid.uuid4()}"
        self._tasks: set[asyncio.Task[None]] = set()

    def start(self, operation_id: uuid.UUID) -> asyncio.Task[None]:
        task = asyncio.create_task(self.run(operation_id), name=f"operation-{operation_id}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def run(self, operation_id: uuid.UUID) -> None:
        failures = 0
        while True:
            try:
                if not await self.step(operation_id):
                    return
                failures = 0
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # broker or database trouble: retry, then give up
                failures += 1
                log.warning("operation batch failed", extra={
                    "operation_id": str(operation_id), "error": str(exc), "failures": failures})
                if failures >= MAX_FAILURES:
                    await self._fail(operation_id, f"{type(exc).__name__}: {exc}"[:500])
                    return
                await asyncio.sleep(min(0.5 * 2 ** failures, 5.0))

    async def step(self, operation_id: uuid.UUID) -> bool:
        """One batch; False once the operation is finished (or no longer ours)."""
        async with self.pool.connection() as conn:
            op = await store.lock_owned_operation(conn, operation_id, self.owner)
            if op is None:
                return False
            if op["kind"] == "delete":
                outcome = await deletion.step(conn, op, self.owner,
                                              batch_size=self.delete_batch_size,
                                              lease_s=self.lease_s)
            else:
                outcome = None
                picked = await store.select_replay_batch(conn, op, self.batch_size)
                if not picked:
                    await store.finish_operation(conn, operation_id, self.owner, "succeeded")
                    return False
                marked = await store.mark_pending(conn, [r["delivery_id"] for r in picked],
                                                  REPLAYABLE)
                await store.operation_progress(conn, op, self.owner, cursor=picked[-1],
                                               processed=len(picked), enqueued=len(marked),
                                               lease_s=self.lease_s)
        if outcome is not None:  # a delete: nothing to send
            if outcome is deletion.Step.BLOCKED:  # wait after the commit, holding nothing
                await asyncio.sleep(deletion.BLOCKED_WAIT_S)
            return outcome is not deletion.Step.DONE
        return await self._send(operation_id, op, marked)

    async def _send(self, operation_id: uuid.UUID, op: store.Row,
                    marked: list[store.Row]) -> bool:
        """A committed replay batch's tasks, produced until Kafka acknowledges them."""
        self.replays.labels(op["kind"]).inc(len(marked))

        def failed(batch: list[Failed]) -> None:
            log.warning("replay tasks not acknowledged; retrying them", extra={
                "operation_id": str(operation_id), "count": len(batch),
                "first": batch[0].error})

        if not await self.sink.send_until_acked(replay_tasks(marked, now_utc()),
                                                on_failure=failed):
            log.error("replay tasks refused by the broker; the sweeper will re-queue them",
                      extra={"operation_id": str(operation_id), "count": len(marked)})
        return True

    async def _fail(self, operation_id: uuid.UUID, error: str) -> None:
        try:
            async with self.pool.connection() as conn:
                await store.finish_operation(conn, operation_id, self.owner, "failed", error)
        except Exception as exc:  # the lease runs out and another instance retries
            log.warning("could not record the failed operation",
                        extra={"operation_id": str(operation_id), "error": str(exc)})

    async def adopt_orphans(self) -> int:
        """Take over operations whose owner stopped renewing their lease."""
        adopted = 0
        while True:
            async with self.pool.connection() as conn:
                operation_id = await store.claim_orphaned_operation(conn, self.owner,
                                                                    self.lease_s)
            if operation_id is None:
                return adopted
            log.info("resuming an orphaned operation", extra={"operation_id": str(operation_id)})
            self.start(operation_id)
            adopted += 1

    async def sweep_forever(self, interval_s: float) -> None:
        while True:
            try:
                await self.adopt_orphans()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("operation sweep failed", extra={"error": str(exc)})
            await asyncio.sleep(interval_s)

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def wait_idle(self) -> None:
        """For tests and shutdown: wait for the operations started here."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
